"""Checking one generated program in this process: ``check_program``. Worker processes
(workers.py) run it for the driver (runner.py), one program at a time.

Per program, at one input point:

1. ``f(*args)`` run as plain Python is the reference value; central finite differences of it in
   float64 (step ``cbrt(eps) * max(1, |x|)``) are the reference gradient;
2. ``nr.grad(f, argnums)(*args)`` (the fused driver), ``nr.pullback(f, *args)`` then ``pb(1.0)``
   (forward + pullback kernels) and ``nr.value_and_grad(f, argnums)(**by_name)`` (arguments
   passed by name) must agree with each other (to 1e-8) and with the finite differences (rtol
   1e-5, atol 1e-6 * max(1, |f|)), and the values of ``value_and_grad`` and ``pullback`` with
   the Python value (1e-9). One program in four is also checked through
   ``nr.value_and_grad(f, argnums, fastmath=True)`` (reassociated sums, vmath's exp and tanh),
   against the finite differences and the Python value at the finite differences' tolerance.

Then forward mode (check_forward.py): ``nr.jvp(f, argnums)(*args, v)`` along a random direction
``v`` must give the Python value and ``grad . v`` (to 1e-8 of the sum of the terms' magnitudes;
the gradient has just been checked against finite differences). A wrong directional
derivative is ``wrong``; a refusal (a ``NumbarulesError``) leaves the outcome as it is and is
counted apart (``Result.jvp``): forward mode does not cover every construct reverse mode does.

A point where finite differences are unreliable is re-drawn: at a kink (``abs``, ``max``, a
data-dependent branch), central differences with steps h and 2h, or the second-order one-sided
differences to the left and to the right, disagree with each other; or the lines the program
executes (``sys.settrace``) differ between x and x +- h. Such coordinates are "skipped points",
never failures; after ``MAX_ATTEMPTS`` points the last one is used and its unstable coordinates
are left out of the finite-difference comparison (the AD paths are still compared to each other).

Outcomes: ``ok``; ``wrong`` (a disagreement, a tangent of the wrong kind, None or NaN where
finite differences give a number, a wrong value, or the gradient call writing into an argument);
``refused`` (a ``NumbarulesError``: the engine declines a construct; ``expected`` when the
program contains a construct of that README refusal class); ``internal`` (any other exception, a
worker that dies, or a hang past the time limit); ``invalid`` (the generator's fault: the program
raises when run as Python, or Numba itself cannot compile it; checked only when the engine
fails); ``skipped`` (no point with finite values was found; a point where Python raises a
value-dependent error, ``math.cos(inf)`` or a division by zero, counts as one without).

A program of the ``world`` group defines ``world_change()``: after the checks above pass,
``check_program`` calls it (a method or rule of the program's generic function is added or
replaced) and checks again from step 1, adding two paths: the gradient object made before the
change (it must follow the new method) and the pullback made before it (it keeps its world:
``pb(1.0)`` gives exactly the tangents it gave before).
"""

import inspect
import importlib.util
import math
import os
import re
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

import numpy as np

from .check_forward import _check_hvp, _check_jvp
from .outcomes import Result, _first_line, refusal_class
from .reference import (AD_ATOL, AD_RTOL, ATOL, RTOL, VALUE_RTOL, _ArgWritten, _Bad, _close,
                        _describe_path, _is_struct, _same_args, _value_dependent,
                        finite_differences, get_leaf, leaves)

MAX_ATTEMPTS = 4



# --- checking one program -------------------------------------------------------------------------

def _load(prog, directory):
    path = os.path.join(directory, prog.module_name + ".py")
    with open(path, "w") as fh:
        fh.write(prog.source)
    spec = importlib.util.spec_from_file_location(prog.module_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[prog.module_name] = mod
    spec.loader.exec_module(mod)
    return mod, path


def _call(obj, prog, f, args, by_name=False):
    """``obj(*args)`` as the fuzzer checks it: the arguments whose defaults are their values left
    out (``Program.omitting_call``), and with ``by_name`` every argument by its name, where
    ``f``'s gradients take names (Numba's C dispatcher binds them)."""
    names = _keywords(f, len(args))
    if not names:
        return obj(*args)
    if by_name:
        return obj(**{names[k]: a for k, a in enumerate(args) if not prog.args_spec[k].omit})
    call = prog.omitting_call()
    if call is None:
        return obj(*args)
    first, named = call
    return obj(*args[:first], **{names[k]: args[k] for k in named})


def _keywords(f, n):
    """``f``'s parameter names when a gradient of it takes its arguments by name (a plain
    function of ``n`` plain parameters), else None."""
    import numbarules as nr
    if isinstance(f, nr.GenericFunction):
        return None
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return None
    if len(params) != n or any(p.kind != p.POSITIONAL_OR_KEYWORD or p.name.startswith("_")
                               for p in params):
        return None
    return [p.name for p in params]


def check_program(prog, directory=None):
    """Check ``prog`` (a ``generator.Program``) in this process; returns a ``Result``."""
    from . import pool

    t0 = time.perf_counter()
    res = Result(prog.seed, prog.index, "ok", prog.features, prog.used, source=prog.source,
                 stream=list(prog.stream) if prog.stream else None)
    own_dir = directory is None
    directory = directory or tempfile.mkdtemp(prefix="nrfuzz-")
    try:
        try:
            mod, path = _load(prog, directory)
        except Exception as exc:   # noqa: BLE001 - a generated module that does not import
            return _done(res, "invalid", "the generated module does not import: "
                         + _first_line(exc), traceback.format_exc(), t0)
        f = getattr(mod, prog.entry)
        files = {path, pool.__file__}
        hits = _disk_hits()
        try:
            res, first = _check_paths(prog, mod, f, files, res, t0)
            if res.outcome != "ok" or not hasattr(mod, "world_change"):
                return res
            # the world changes (a method or rule is added): Python now runs the new method, so
            # the references are drawn again; the old gradient object must follow the change
            # and the old pullback must keep its world (the same tangents, nothing recompiled)
            mod.world_change()
            res, _ = _check_paths(prog, mod, f, files, res, t0, first)
            return res
        finally:
            res.disk_hits = _disk_hits() - hits
    finally:
        sys.modules.pop(prog.module_name, None)
        if own_dir:
            _rmtree(directory)


def _disk_hits():
    import numbarules as nr
    return nr.cache_info()["disk_hits"]


@dataclass
class _Paths:
    """What a first check leaves for the check after ``world_change()``."""
    grad: object         # the gradient object
    pb: object           # the pullback
    t_pb: tuple          # pb(1.0)


def _check_paths(prog, mod, f, files, res, t0, before=None):
    """Steps 1-3 of ``check_program``; ``before``: the first check's ``_Paths``, when this one
    runs after ``world_change()``. Returns (res, _Paths or None)."""
    import numbarules as nr

    when = "" if before is None else "after world_change: "
    key = "" if before is None else "world "
    diff_args = tuple(i for i, a in enumerate(prog.args_spec) if a.diff)

    # 1. a point where Python gives finite values and finite differences are reliable
    t_fd = time.perf_counter()
    fd, attempt = None, 0
    res.skipped_points = 0
    value_error = None
    for attempt in range(MAX_ATTEMPTS):
        args = prog.args(attempt)
        try:
            cand = finite_differences(f, args, diff_args, files)
        except Exception as exc:   # noqa: BLE001 - the program fails as plain Python
            if not _value_dependent(exc):
                return _done(res, "invalid", when + "the program raises when run as Python: "
                             + _first_line(exc), traceback.format_exc(), t0, prog, attempt), None
            # values grew out of a function's domain at this point (cos(inf)): another point
            value_error, cand = exc, None
        if cand is None:
            res.skipped_points += 1
            continue
        fd = cand
        if not cand.unstable:
            break
        res.skipped_points += 1
    if fd is None:
        why = "" if value_error is None else f" (Python raised {_first_line(value_error)})"
        return _done(res, "skipped", when + "no point with finite, moderate values" + why, "",
                     t0), None
    res.skipped_coordinates = len(fd.unstable)
    res.checked_coordinates += len(fd.grads)
    res.repro = prog.repro(attempt)

    # 2. the three AD paths (and after a world change, the old gradient object and pullback)
    argnums = prog.argnums
    res.stages[key + "fd"] = time.perf_counter() - t_fd
    stage = "nr.grad"
    g_old = None
    try:
        t1 = time.perf_counter()
        args = prog.args(attempt)
        grad = nr.grad(f, argnums=argnums)
        g = _call(grad, prog, f, args)
        _same_args(prog, attempt, args, "nr.grad")
        stage = "nr.pullback"
        t2 = time.perf_counter()
        res.stages[key + "grad"] = t2 - t1
        args = prog.args(attempt)
        y_pb, pb = nr.pullback(f, *args)
        t_pb = pb(1.0)
        _same_args(prog, attempt, args, "nr.pullback")
        stage = "nr.value_and_grad"
        t3 = time.perf_counter()
        res.stages[key + "pullback"] = t3 - t2
        args = prog.args(attempt)
        vg = nr.value_and_grad(f, argnums=argnums)
        y_vg, g_vg = _call(vg, prog, f, args, by_name=True)
        _same_args(prog, attempt, args, "nr.value_and_grad")
        res.stages[key + "value_and_grad"] = time.perf_counter() - t3
        y_fm = g_fm = None
        if checks_fastmath(prog):
            stage = "nr.value_and_grad(fastmath=True)"
            t5 = time.perf_counter()
            args = prog.args(attempt)
            y_fm, g_fm = nr.value_and_grad(f, argnums=argnums, fastmath=True)(*args)
            _same_args(prog, attempt, args, stage)
            res.stages[key + "fastmath"] = time.perf_counter() - t5
        if before is not None:
            stage = "the gradient object made before world_change"
            args = prog.args(attempt)
            g_old = _call(before.grad, prog, f, args)
            _same_args(prog, attempt, args, stage)
            stage = "the pullback made before world_change"
            t_old = before.pb(1.0)
    except _ArgWritten as exc:
        return _done(res, "wrong", when + str(exc), "", t0), None
    except nr.NumbarulesError as exc:
        msg = str(exc)
        cls = refusal_class(msg)
        res.refusal_class = cls
        res.expected = cls in prog.may_refuse
        out = "refused"
        if getattr(exc, "numba_failure", None) is not None:
            # Numba failed generating code the engine accepted: the engine's failure unless
            # Numba cannot compile the program itself (numba_glue.located.code_generation_error)
            res.expected = False
            out = _invalid_or(prog, mod, attempt, "internal")
        elif not res.expected:
            out = _invalid_or(prog, mod, attempt, "refused")
        temp = _INTERNAL_NAME.search(msg)
        if temp:        # generated programs name nothing `_x1`: the engine's own temporary
            return _done(res, "internal", f"{when}{stage}: the refusal names the engine's "
                         f"temporary {temp.group(0)}: {type(exc).__name__}: {msg}",
                         traceback.format_exc(), t0), None
        return _done(res, out, f"{when}{stage}: {type(exc).__name__}: {msg}",
                     traceback.format_exc(), t0), None
    except RecursionError as exc:
        return _done(res, "internal", f"{when}{stage}: RecursionError: {exc}",
                     traceback.format_exc(limit=-12), t0), None
    except Exception as exc:   # noqa: BLE001 - anything else is the engine's failure
        out = _invalid_or(prog, mod, attempt, "internal")
        return _done(res, out, f"{when}{stage}: {_first_line(exc)}", traceback.format_exc(),
                     t0), None

    # 3. compare
    problems = []
    y_ref = fd.value
    for what, y in (("value_and_grad", y_vg), ("pullback", y_pb)):
        if not _close(y, y_ref, VALUE_RTOL, VALUE_RTOL):
            problems.append(f"primal value: {what} gives {y!r}, Python gives {y_ref!r}")
    g = (g,) if not isinstance(argnums, tuple) else g
    if g_old is not None:
        g_old = (g_old,) if not isinstance(argnums, tuple) else g_old
    if y_fm is not None and not _close(y_fm, y_ref, RTOL, ATOL * max(1.0, abs(y_ref))):
        problems.append(f"primal value: value_and_grad(fastmath=True) gives {y_fm!r}, Python "
                        f"gives {y_ref!r}")
    if g_fm is not None:
        g_fm = (g_fm,) if not isinstance(argnums, tuple) else g_fm
    if not isinstance(g, tuple) or len(g) != len(argnums):
        problems.append(f"nr.grad returned {g!r:.200}, expected {len(argnums)} tangents")
    elif not isinstance(t_pb, tuple) or len(t_pb) != len(prog.args_spec):
        problems.append(f"pb(1.0) returned {t_pb!r:.200}, expected {len(prog.args_spec)} "
                        "tangents")
    else:
        problems += _compare(prog, args, fd, dict(zip(argnums, g)), t_pb,
                             dict(zip(argnums, g_vg)),
                             None if g_fm is None else dict(zip(argnums, g_fm)))
        if g_old is not None:
            if not isinstance(g_old, tuple) or len(g_old) != len(argnums):
                problems.append(f"the old gradient object returned {g_old!r:.200}")
            else:
                problems += [p.replace(" grad ", " the old gradient object ")
                             for p in _compare(prog, args, fd, dict(zip(argnums, g_old)),
                                               t_pb, dict(zip(argnums, g_old)))]
            if not _same_tangents(t_old, before.t_pb):
                problems.append("the pullback made before world_change does not keep its "
                                f"world: pb(1.0) gave {before.t_pb!r:.120} before the change, "
                                f"{t_old!r:.120} after")
    if problems:
        out = "wrong"
        if any(p.startswith("primal value") for p in problems):
            out = _invalid_or(prog, mod, attempt, "wrong", value=y_ref)
        return _done(res, out, when + problems[0], "\n".join(problems[:12]), t0), None

    # 4. forward mode against the gradient just checked
    t4 = time.perf_counter()
    outcome, why = _check_jvp(prog, f, attempt, argnums, dict(zip(argnums, g)), y_ref)
    res.stages[key + "jvp"] = time.perf_counter() - t4
    if outcome == "refused":
        res.jvp = f"refused: {why.splitlines()[0][:200]}"
    elif outcome != "ok":
        return _done(res, outcome, f"{when}nr.jvp: {why.splitlines()[0]}", why, t0), None
    else:
        res.jvp = "ok"
        if prog.index % HVP_EVERY == 0:
            t5 = time.perf_counter()
            outcome, why = _check_hvp(prog, f, attempt, argnums)
            res.stages[key + "hvp"] = time.perf_counter() - t5
            if outcome == "refused":
                res.hvp = f"refused: {why.splitlines()[0][:200]}"
            elif outcome != "ok":
                return _done(res, outcome, f"{when}nr.hvp: {why.splitlines()[0]}", why, t0), None
            elif outcome == "ok" and why != "not checked":
                res.hvp = "ok"
    return _done(res, "ok", "", "", t0), _Paths(grad, pb, t_pb)


HVP_EVERY = 3        # the Hessian-vector product is checked on every third program
#: A quoted name of the normalisation's temporaries (``_t2``, ``_j1``) in a message.
_INTERNAL_NAME = re.compile(r"'_[A-Za-z]*\d+'|\b_t\d+\b")


def _same_tangents(a, b):
    """Exactly the same tangents (floats, arrays, tuples, Tangents, None)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                and a.shape == b.shape and np.array_equal(a, b, equal_nan=True))
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and all(_same_tangents(x, y) for x, y in zip(a, b)))
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


def checks_fastmath(prog):
    """Whether ``prog`` is also checked through ``nr.value_and_grad(f, fastmath=True)``: one
    program in four (a fifth compile; reassociated sums agree with the others to rounding, so
    that path is held to the finite differences' tolerance, not to the paths' 1e-8)."""
    return prog.index % 4 == 1


def _compare(prog, args, fd, grads, t_pb, g_vg, g_fm=None):
    problems = []
    atol = ATOL * max(1.0, abs(fd.value))
    for i, spec in enumerate(prog.args_spec):
        if not spec.diff:
            continue
        paths = leaves(args[i])
        kind_problem = _kind(args[i], t_pb[i], "pb(1.0)") or (
            _kind(args[i], grads[i], "nr.grad") if i in grads else None)
        if kind_problem:
            # None where every difference is exactly zero: no influence, no tangent, accepted
            zero = all(fd.grads.get((i, p), 1.0) == 0.0 for p in paths)
            if not (zero and "is None" in kind_problem):
                problems.append(f"{spec.name}: {kind_problem}")
            continue
        for p in paths:
            where = _describe_path(prog.args_spec, i, p)
            ref = fd.grads.get((i, p))
            got = {"pullback": get_leaf(t_pb[i], p)}
            if i in grads:
                got["grad"] = get_leaf(grads[i], p)
                got["value_and_grad"] = get_leaf(g_vg[i], p)
            if g_fm is not None and i in g_fm:
                got["fastmath"] = get_leaf(g_fm[i], p)
            for name, v in got.items():
                if isinstance(v, _Bad):
                    problems.append(f"{where}: {name} tangent: {v.why}")
                elif v is None:
                    if ref is not None and ref != 0.0:
                        problems.append(f"{where}: {name} gives None, finite differences {ref!r}")
                elif math.isnan(v) or math.isinf(v):
                    problems.append(f"{where}: {name} gives {v!r}, finite differences {ref!r}")
                elif ref is not None and not _close(v, ref, RTOL, atol):
                    problems.append(f"{where}: {name} gives {v!r}, finite differences {ref!r}")
            vals = [v for k, v in got.items()
                    if k != "fastmath" and isinstance(v, float) and math.isfinite(v)]
            spread = max(vals) - min(vals) if vals else 0.0
            if len(vals) > 1 and spread > AD_ATOL + AD_RTOL * max(abs(v) for v in vals):
                problems.append(f"{where}: the AD paths disagree: "
                                + ", ".join(f"{k} {v!r}" for k, v in got.items()))
    # order: AD disagreements and None/NaN first, they are the most telling
    return problems


def _kind(arg, t, who):
    """Why tangent ``t`` has the wrong kind for argument ``arg``, or None."""
    if t is None:
        return f"{who} tangent is None"
    if isinstance(arg, np.ndarray):
        if not isinstance(t, np.ndarray):
            return f"{who} tangent is a {type(t).__name__}, not an array"
        if t.shape != arg.shape:
            return f"{who} tangent has shape {t.shape}, the argument {arg.shape}"
        return None
    if isinstance(arg, (float, np.floating)):
        if not isinstance(t, (float, np.floating)):
            return f"{who} tangent is a {type(t).__name__}: {t!r:.80}, not a float"
        return None
    if isinstance(arg, tuple):
        if not isinstance(t, tuple) or len(t) != len(arg):
            return f"{who} tangent is {t!r:.80}, not a tuple of {len(arg)}"
        if _is_struct(arg) and "Tangent" not in type(t).__name__:
            return f"{who} tangent is a {type(t).__name__}, not a Tangent"
        for a, s in zip(arg, t):
            if s is None:
                continue
            why = _kind(a, s, who)
            if why:
                return why
    return None


def _invalid_or(prog, mod, attempt, outcome, value=None):
    """``outcome``, or "invalid" when Numba cannot compile the program's primal (or computes a
    different value than Python: then the program's semantics differ and it is no test)."""
    try:
        y = numba_primal(mod, prog.entry)(*prog.args(attempt))
    except Exception:   # noqa: BLE001 - Numba refuses the program itself
        return "invalid"
    if value is not None and not _close(y, value, VALUE_RTOL, VALUE_RTOL):
        return "invalid"
    return outcome


def numba_primal(mod, entry):
    """``mod.entry`` compiled by plain ``numba.njit``, with the plain Python helpers it reaches
    (local and pool) compiled by njit too: whether Numba itself accepts the program."""
    import types

    import numba

    from . import pool

    cache = {}

    def world(g):
        ns = {}
        for k, v in g.items():
            if isinstance(v, types.FunctionType) and getattr(v, "__module__", "") in (
                    mod.__name__, pool.__name__):
                ns[k] = convert(v)
            else:
                ns[k] = v
        return ns

    def convert(fn):
        key = (fn.__module__, fn.__name__)
        if key in cache:
            return cache[key]
        g = {}
        new = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
        disp = numba.njit(new)
        cache[key] = disp
        g.update(world(fn.__globals__))
        return disp

    return convert(getattr(mod, entry))


def _done(res, outcome, error, detail, t0, prog=None, attempt=0):
    res.outcome = outcome
    res.error = error
    res.detail = detail
    if prog is not None and not res.repro:
        res.repro = prog.repro(attempt)
    res.seconds = time.perf_counter() - t0
    return res


def _rmtree(path):
    import shutil
    shutil.rmtree(path, ignore_errors=True)
