"""Worker processes: programs are checked one at a time in a process of their own, so that a
program that hangs or crashes its process costs only that worker (the driver, runner.py, and the
reducer, reduce.py, replace it and go on).

``worker_main`` is the worker's side: one JSON request per line on stdin, one JSON ``Result``
per line on stdout. ``_Worker`` is the parent's handle on one worker: it starts it (and runs the
optional setup function in it), sends requests, reads answers with a timeout, and kills it.
"""

import importlib
import importlib.util
import json
import os
import select
import subprocess
import sys
import time
import traceback

from .generator import generate
from .outcomes import Result, _first_line


def worker_main():
    """A worker: reads one JSON request per line on stdin, answers one JSON result per line.

    Protocol output goes to the original stdout; anything the program or Numba prints goes to
    stderr. Requests: {"seed", "index", "features", "dir"} or {"setup": "module:function"}.
    """
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # the pool's import cost (numbarules', its structs and rules) before the first program
    importlib.import_module(".pool", __package__)
    # check_program is looked up on runner for each program, not imported from check: a
    # worker's setup may replace runner.check_program (tests/test_fuzz.py's hang_then_crash)
    from . import runner
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        if "program" in req:
            req.setdefault("seed", req["program"]["seed"])
            req.setdefault("index", req["program"]["index"])
        if "setup" in req:
            _call_spec(req["setup"])
            proto.write(json.dumps({"ready": True}) + "\n")
            continue
        t0 = time.perf_counter()
        try:
            if "program" in req:
                from .generator import Program
                prog = Program.from_dict(req["program"])
            else:
                prog = generate(req["seed"], req["index"], req.get("features"))
        except Exception as exc:   # noqa: BLE001 - the generator's own bug
            res = Result(req["seed"], req["index"], "invalid",
                         error=f"the generator failed: {_first_line(exc)}",
                         detail=traceback.format_exc())
        else:
            try:
                res = runner.check_program(prog, req.get("dir"))
            except Exception as exc:   # noqa: BLE001 - a fuzzer bug: report, keep going
                res = Result(prog.seed, prog.index, "internal", prog.features, prog.used,
                             error=f"fuzz runner: {_first_line(exc)}",
                             detail=traceback.format_exc(), source=prog.source)
        res.seconds = time.perf_counter() - t0
        proto.write(res.to_json() + "\n")


def _call_spec(spec):
    """Call ``module:function`` or ``path/to/file.py:function``."""
    target, _, name = spec.rpartition(":")
    if target.endswith(".py"):
        s = importlib.util.spec_from_file_location("_nrfuzz_setup", target)
        mod = importlib.util.module_from_spec(s)
        s.loader.exec_module(mod)
    else:
        mod = importlib.import_module(target)
    getattr(mod, name)()


class _Worker:
    def __init__(self, env, setup, stderr_path):
        self.stderr = open(stderr_path, "ab")
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join([here] + [p for p in [env.get("PYTHONPATH")] if p])
        self.proc = subprocess.Popen(
            [sys.executable, "-c",
             "from numbarules.fuzz.workers import worker_main; worker_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            env=dict(env, PYTHONPATH=path), bufsize=0)
        self.buf = b""
        self.stderr_path = stderr_path
        try:
            self.ready = self._read(300.0)
            if setup:
                self._send({"setup": setup})
                self.ready = self._read(300.0)
        except (EOFError, BrokenPipeError):
            self.kill()
            raise RuntimeError("numbarules fuzz: a worker process failed to start"
                               + (f" (setup {setup})" if setup else "") + ":\n"
                               + self.stderr_tail()) from None

    def _send(self, obj):
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def _read(self, timeout):
        """One JSON line, or None on timeout; raises EOFError when the worker died."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def ask(self, req, timeout):
        self._send(req)
        return self._read(timeout)

    def stderr_tail(self, n=2000):
        try:
            with open(self.stderr_path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - n))
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
        self.stderr.close()
