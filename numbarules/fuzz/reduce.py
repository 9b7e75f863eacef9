"""Shrinking a failing program: ``minimize(seed, index, features)``.

Nothing fancy: statements of ``f`` (and module-level helpers and constants) are deleted, and
``if``/``else`` statements replaced by one of their branches, one edit at a time, keeping every
edit after which the program still fails in the same way (same outcome, same normalised error,
see ``runner.signature``). Each candidate is checked like any program, in a worker process with
the per-program time limit, so hangs shrink too. The arguments are left as they are.
"""

import ast
import copy
import json
import os
import tempfile

from .generator import generate
from .runner import Result, _rmtree, _Worker, signature


def _paths(stmts, prefix=()):
    """Paths to every statement of ``stmts``, outer first: (k,) is stmts[k], (k, "orelse", j)
    is stmts[k].orelse[j]."""
    out = []
    for k, s in enumerate(stmts):
        p = prefix + (k,)
        out.append(p)
        for field in ("body", "orelse"):
            inner = getattr(s, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                out += _paths(inner, p + (field,))
    return out


def _edit(fdef, path, how):
    """Delete the statement of ``fdef`` at ``path`` or replace it (an ``if``) by its body or
    orelse, in place; False when the edit does not apply."""
    block = fdef.body
    for i in range(0, len(path) - 1, 2):
        block = getattr(block[path[i]], path[i + 1])
    k = path[-1]
    stmt = block[k]
    if how == "delete":
        if isinstance(stmt, ast.Return) and path == (len(fdef.body) - 1,):
            return False
        block[k:k + 1] = []
    else:
        if not isinstance(stmt, ast.If) or not getattr(stmt, how):
            return False
        block[k:k + 1] = getattr(stmt, how)
    if not block:
        block.append(ast.Pass())
    return True


def minimize(seed, index, features=None, timeout=120.0, max_checks=300, out=print):
    """Shrink program ``index`` of stream ``seed`` while it fails the same way; returns
    ``(program, result)`` of the smallest version found (the original if it does not fail)."""
    prog = generate(seed, index, features)
    tmp = tempfile.mkdtemp(prefix="nrfuzz-reduce-")
    env = dict(os.environ)
    env.setdefault("NUMBARULES_CACHE", "0")
    env["NUMBARULES_PROGRESS"] = "0"
    state = {"worker": None, "checks": 0}

    def check(p):
        state["checks"] += 1
        if state["worker"] is None:
            state["worker"] = _Worker(env, None, os.path.join(tmp, "worker.err"))
        w = state["worker"]
        try:
            msg = w.ask({"program": p.to_dict(), "dir": tmp}, timeout)
        except (EOFError, BrokenPipeError):
            w.kill()
            state["worker"] = None
            return Result(p.seed, p.index, "internal",
                          error=f"the worker process died (exit code {w.proc.returncode})")
        if msg is None:
            w.kill()
            state["worker"] = None
            return Result(p.seed, p.index, "internal",
                          error=f"hang: no result within {timeout:g} s (compiles included)")
        return Result.from_json(json.dumps(msg))

    try:
        base = check(prog)
        sig = signature(base)
        if base.outcome == "ok" or (base.outcome == "refused" and base.expected):
            out(f"program {index} does not fail ({base.outcome}); nothing to reduce")
            return prog, base
        out(f"reducing program {index}: {sig}")
        tree = ast.parse(prog.source)
        current = ast.unparse(tree) + "\n"
        tried = set()
        best, best_res, variant = prog, base, 0
        changed = True
        while changed and state["checks"] < max_checks:
            changed = False
            fdef = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "f")
            # module-level helpers and constants first, then f's statements
            tops = [k for k, n in enumerate(tree.body) if n is not fdef
                    and not isinstance(n, (ast.Import, ast.ImportFrom))]
            candidates = [("module", k) for k in reversed(tops)]
            candidates += [(how, p) for p in _paths(fdef.body)
                           for how in ("delete", "body", "orelse")]
            for how, where in candidates:
                if state["checks"] >= max_checks:
                    break
                new_tree = copy.deepcopy(tree)
                if how == "module":
                    del new_tree.body[where]
                else:
                    new_f = next(n for n in new_tree.body
                                 if isinstance(n, ast.FunctionDef) and n.name == "f")
                    if not _edit(new_f, where, how):
                        continue
                source = ast.unparse(new_tree) + "\n"
                if len(source) >= len(current) or source in tried:
                    continue
                tried.add(source)
                variant += 1
                cand = prog.with_source(source, variant)
                res = check(cand)
                if res.outcome == base.outcome and signature(res) == sig:
                    tree, best, best_res, changed = ast.parse(source), cand, res, True
                    current = source
                    out(f"  [{state['checks']} checks] {len(source.splitlines())} lines")
                    break
        out(f"reduced in {state['checks']} checks:\n{best.repro()}")
        return best, best_res
    finally:
        if state["worker"] is not None:
            state["worker"].close()
        _rmtree(tmp)
