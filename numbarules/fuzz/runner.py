"""The fuzzer's driver: ``run`` generates programs ``start .. start + n - 1`` of a stream, checks
each in a worker process under a wall-clock limit (``jobs`` workers in parallel; a worker is
replaced when it hangs, dies or has served ``recycle`` programs), prints a line per program and
returns a ``Summary``.

Its parts, one module each: checking one program in a process, and what each outcome means
(check.py); the finite differences it is checked against (reference.py); ``Result``,
``Summary`` and failure signatures (outcomes.py); the worker processes (workers.py). The names
other code imports from this module are re-exported here (``__all__``).
"""

import json
import os
import select
import tempfile
import time

from .check import MAX_ATTEMPTS, _rmtree, check_program, numba_primal
from .generator import FEATURES, generate
from .outcomes import OUTCOMES, Result, Summary, describe, refusal_class, signature
from .reference import (AD_ATOL, AD_RTOL, ATOL, BIG, RTOL, VALUE_RTOL, finite_differences,
                        get_leaf, leaves, with_leaf)
from .workers import _Worker, worker_main

__all__ = ["AD_ATOL", "AD_RTOL", "ATOL", "BIG", "MAX_ATTEMPTS", "OUTCOMES", "RTOL", "VALUE_RTOL",
           "Result", "Summary", "_Worker", "_rmtree", "check_program", "describe",
           "finite_differences", "get_leaf", "leaves", "numba_primal", "refusal_class", "run",
           "signature", "with_leaf", "worker_main"]


def run(n=100, seed=0, features=None, timeout=120.0, verbose=False, keep=None, setup=None,
        start=0, jobs=1, opt=None, out=print, recycle=150, disk_cache=False):
    """Generate and check programs ``start .. start + n - 1`` of stream ``seed``; returns a
    ``Summary``.

    ``features``: names from ``generator.FEATURES`` (None: all). ``timeout``: seconds per program
    (compiles included); a program past it is ``internal: hang`` and its worker is killed and
    replaced. ``verbose``: a line per program (``out``). ``keep``: a directory to write each
    program's module and, for failures, a standalone reproducer into. ``setup``:
    ``"module:function"`` or ``"file.py:function"`` each worker calls before its first program
    (tests use it to break a rule on purpose). ``jobs``: worker processes run in parallel.
    ``opt``: ``NUMBA_OPT`` for the workers (None: inherit). ``recycle``: a worker is replaced
    after that many programs (bounds the memory compiled code accumulates). ``disk_cache``:
    numbarules' disk cache on (in a directory of the run's own), and every program that checks
    out is checked again in another worker process, which loads what the first one compiled:
    a kernel the cache keys wrongly (a stale world, a frozen value left out of the key) comes
    out wrong there (``Result.loaded``, ``Result.disk_hits``).
    """
    if features is not None:
        features = tuple(features)
        unknown = [f for f in features if f not in FEATURES]
        if unknown:
            raise ValueError(f"unknown fuzz features {unknown}; known: {', '.join(FEATURES)}")
    env = dict(os.environ)
    env.setdefault("NUMBARULES_CACHE", "0")
    env["NUMBARULES_PROGRESS"] = "0"
    if opt is not None:
        env["NUMBA_OPT"] = str(opt)
    t0 = time.perf_counter()
    summary = Summary(seed, features or ())
    tmp = tempfile.mkdtemp(prefix="nrfuzz-")
    if disk_cache:
        env["NUMBARULES_CACHE"] = "1"
        env["NUMBARULES_CACHE_DIR"] = os.path.join(tmp, "nrcache")
    directory = keep or tmp
    os.makedirs(directory, exist_ok=True)
    todo = [(i, 1) for i in range(start, start + n)]    # (index, pass: 2 = from the disk)
    first_pass = {}       # index -> (the worker of its first pass, its result)
    workers = [None] * max(1, jobs)
    served = [0] * len(workers)
    running = {}          # slot -> (index, deadline, started, pass)
    results = {}
    try:
        while todo or running:
            for slot in range(len(workers)):
                if slot in running or not todo:
                    continue
                waiting = [i for i, ps in todo if ps == 2]
                if len(workers) == 1 and len(waiting) >= 10 and workers[slot] is not None \
                        and all(first_pass[i][0] is workers[slot] for i in waiting):
                    # one worker: its second passes need another process; take them in
                    # batches of ten rather than at the end of the run (or at a recycle)
                    workers[slot].close()
                    workers[slot] = None
                # a second pass runs in another process than the first
                pick = next((k for k, (i, ps) in enumerate(todo)
                             if ps == 1 or first_pass[i][0] is not workers[slot]), None)
                if pick is None:
                    if len(workers) > 1:
                        continue            # another worker takes it
                    pick = 0
                    workers[slot].close()
                    workers[slot] = None
                if workers[slot] is not None and served[slot] >= recycle:
                    workers[slot].close()
                    workers[slot] = None
                if workers[slot] is None:
                    workers[slot] = _Worker(env, setup, os.path.join(tmp, f"worker{slot}.err"))
                    served[slot] = 0
                index, ps = todo.pop(pick)
                workers[slot]._send({"seed": seed, "index": index, "features": features,
                                     "dir": directory})
                served[slot] += 1
                running[slot] = (index, time.monotonic() + timeout, time.monotonic(), ps)
            # wait for any worker
            fds = {workers[s].proc.stdout.fileno(): s for s in running}
            ready = [s for s in running if b"\n" in workers[s].buf]
            if not ready:
                wait = max(0.0, min(r[1] for r in running.values()) - time.monotonic())
                r, _, _ = select.select(list(fds), [], [], wait)
                ready = [fds[fd] for fd in r]
            now = time.monotonic()
            for slot in list(running):
                index, deadline, started, ps = running[slot]
                w = workers[slot]
                res = None
                if slot in ready:
                    try:
                        msg = w._read(0.05)
                    except EOFError:
                        tail = w.stderr_tail()
                        w.kill()
                        workers[slot] = None
                        code = w.proc.returncode
                        res = Result(seed, index, "internal",
                                     error=f"the worker process died (exit code {code})",
                                     detail=tail)
                    else:
                        if msg is not None:
                            res = Result.from_json(json.dumps(msg))
                if res is None and now >= deadline:
                    w.kill()
                    workers[slot] = None
                    res = Result(seed, index, "internal",
                                 error=f"hang: no result within {timeout:g} s (compiles included)")
                if res is None:
                    continue
                del running[slot]
                if res.outcome == "internal" and not res.source:
                    try:
                        prog = generate(seed, index, features)
                        res.source, res.repro = prog.source, prog.repro()
                        res.features, res.used = prog.features, prog.used
                        res.stream = list(features) if features else None
                    except Exception:   # noqa: BLE001
                        pass
                res.seconds = time.monotonic() - started
                if disk_cache and ps == 1 and res.outcome == "ok":
                    first_pass[index] = (w, res)
                    todo.insert(0, (index, 2))
                    continue
                if ps == 2:
                    res.loaded = True
                    res.seconds += first_pass[index][1].seconds
                    if res.outcome != "ok":
                        res.error = "checked again loading from the disk cache: " + res.error
                results[index] = res
                if keep and res.outcome != "ok" and res.repro:
                    name = os.path.join(keep, f"fail_{seed}_{index}_{res.outcome}.py")
                    first = res.error.splitlines()[0] if res.error else ""
                    with open(name, "w") as fh:
                        fh.write(f"# {res.outcome}: {first}\n")
                        fh.write(res.repro)
                if verbose:
                    first = res.error.splitlines()[0][:150] if res.error else ""
                    # a refusal outside the README classes this program may get is a failure
                    outcome = ("refused!" if res.outcome == "refused" and not res.expected
                               else res.outcome)
                    out(f"[{index:4d}] {outcome:8s} {res.seconds:6.1f}s  {first}")
    finally:
        for w in workers:
            if w is not None:
                w.close()
        _rmtree(tmp)
    summary.results = [results[i] for i in sorted(results)]
    summary.seconds = time.perf_counter() - t0
    return summary
