"""Checking generated programs: in process (``check_program``) and in worker processes with a
per-program wall-clock limit (``run``).

Per program, at one input point:

1. ``f(*args)`` run as plain Python is the reference value; central finite differences of it in
   float64 (step ``cbrt(eps) * max(1, |x|)``) are the reference gradient;
2. ``nr.grad(f, argnums)(*args)`` (the fused driver), ``nr.pullback(f, *args)`` then ``pb(1.0)``
   (forward + pullback kernels) and ``nr.value_and_grad(f, argnums)(*args)`` must agree with each
   other (to 1e-8) and with the finite differences (rtol 1e-5, atol 1e-6 * max(1, |f|)), and
   the values of ``value_and_grad`` and ``pullback`` with the Python value (1e-9).

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

A program of the ``world`` group defines ``world_change()``: after the checks above pass, the
runner calls it (a method or rule of the program's generic function is added or replaced) and
checks again from step 1, adding two paths: the gradient object made before the change (it must
follow the new method) and the pullback made before it (it keeps its world: ``pb(1.0)`` gives
exactly the tangents it gave before).
"""

import importlib
import importlib.util
import json
import math
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from .generator import FEATURES, REFUSAL_CLASSES, generate

MAX_ATTEMPTS = 4
RTOL, ATOL = 1e-5, 1e-6          # against finite differences; atol scaled by max(1, |f|)
AD_RTOL, AD_ATOL = 1e-8, 1e-10   # grad against pullback against value_and_grad
VALUE_RTOL = 1e-9
_STEP = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)
OUTCOMES = ("ok", "wrong", "refused", "internal", "invalid", "skipped")


# --- leaves: the float coordinates of an argument -------------------------------------------------

def _is_struct(v):
    return isinstance(v, tuple) and hasattr(type(v), "_nr_fields")


def leaves(value, path=()):
    """Paths to the float coordinates of ``value``: () for a float, ("e", k) array elements
    (flat C order), ("f", k) fields of structs and elements of tuples."""
    if isinstance(value, bool) or isinstance(value, (int, np.integer)):
        return []
    if isinstance(value, (float, np.floating)):
        return [path]
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "f":
            return []
        return [path + (("e", k),) for k in range(value.size)]
    if isinstance(value, tuple):
        out = []
        for k, v in enumerate(value):
            out += leaves(v, path + (("f", k),))
        return out
    return []


def get_leaf(value, path):
    for kind, k in path:
        if value is None:
            return None
        if kind == "e":
            return float(np.asarray(value).ravel(order="C")[k]) if isinstance(value, np.ndarray) \
                else _Bad(f"an array expected, got {type(value).__name__}")
        if not isinstance(value, tuple) or k >= len(value):
            return _Bad(f"a tuple or struct tangent expected, got {type(value).__name__}")
        value = value[k]
    if value is None:
        return None
    if isinstance(value, (float, np.floating)) and not isinstance(value, bool):
        return float(value)
    return _Bad(f"a float expected, got {type(value).__name__}: {value!r:.60}")


class _Bad:
    def __init__(self, why):
        self.why = why


def with_leaf(value, path, x):
    if not path:
        return float(x)
    kind, k = path[0]
    if kind == "e":
        a = np.array(value, dtype=np.float64, copy=True, order="C")
        a.reshape(-1)[k] = x
        return a
    items = list(value)
    items[k] = with_leaf(items[k], path[1:], x)
    return type(value)(*items) if _is_struct(value) else tuple(items)


def _fresh(args):
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def _describe_path(args_spec, i, path):
    name = args_spec[i].name
    out = name
    for kind, k in path:
        out += f"[{k}]" if kind == "e" else f".{k}"
    return out


# --- tracing: the lines a Python run executes -----------------------------------------------------

class _Tracer:
    """Hashes the lines a run executes, and records the largest magnitude of a float the
    program's frames hold (``big``): past ``BIG`` a sum like ``s + (x - s)`` absorbs ``x``
    entirely (fuzz seed 20261401 #31: s = 4e58, the derivative is 1 and finite differences
    see 0), so finite differences say nothing there and the point is re-drawn."""

    def __init__(self, files):
        self.files = files
        self.h = 0
        self.big = 0.0

    def __call__(self, frame, event, arg):
        if frame.f_code.co_filename not in self.files:
            return None
        if event == "line":
            self.h = hash((self.h, frame.f_code.co_name, frame.f_lineno))
            for v in frame.f_locals.values():
                if isinstance(v, float) and abs(v) > self.big:   # np.float64 too
                    self.big = abs(v)
        return self


#: Intermediate values past this make finite differences unreliable (absorption); see _Tracer.
BIG = 1e8


def _run_traced(f, args, files):
    """(the result, the hash of the lines run, the largest float magnitude seen)."""
    tr = _Tracer(files)
    sys.settrace(tr)
    try:
        y = f(*_fresh(args))
    finally:
        sys.settrace(None)
    return y, tr.h, tr.big


# --- finite differences ---------------------------------------------------------------------------

@dataclass
class _FD:
    value: float
    grads: dict          # (argnum, path) -> float (stable coordinates)
    unstable: list       # (argnum, path) with unreliable differences


def _as_float(y):
    if isinstance(y, (bool, np.bool_)):
        raise TypeError(f"f returned a bool {y!r}")
    return float(y)


def _value_dependent(exc):
    """Whether the program raised because of the values it met, not because it is malformed:
    a math function outside its domain (``math.cos(inf)``, ``math.sqrt(-1.0)``), an overflow, a
    division by zero. Such a point is skipped like one with non-finite values."""
    return isinstance(exc, (OverflowError, ZeroDivisionError)) or (
        type(exc) is ValueError and "math domain error" in str(exc))


def finite_differences(f, args, diff_args, files):
    y0, trace0, big = _run_traced(f, args, files)
    y0 = _as_float(y0)
    if not math.isfinite(y0) or abs(y0) > BIG or big > BIG:
        return None
    atol = ATOL * max(1.0, abs(y0))
    grads, unstable = {}, []
    for i in diff_args:
        for path in leaves(args[i]):
            x = get_leaf(args[i], path)
            h = _STEP * max(1.0, abs(x))
            vals, same = {}, True
            for m in (-2, -1, 1, 2):
                xs = list(args)
                xs[i] = with_leaf(args[i], path, x + m * h)
                y, tr, _ = _run_traced(f, xs, files)
                vals[m] = _as_float(y)
                same = same and tr == trace0
            hh = ((x + h) - (x - h)) / 2.0      # the step actually taken, after rounding
            c1 = (vals[1] - vals[-1]) / (2 * hh)
            c2 = (vals[2] - vals[-2]) / (4 * hh)
            fw = (-3 * y0 + 4 * vals[1] - vals[2]) / (2 * hh)
            bw = (3 * y0 - 4 * vals[-1] + vals[-2]) / (2 * hh)
            est = (c1, c2, fw, bw)
            if not all(math.isfinite(e) for e in est):
                unstable.append((i, path))
                continue
            scale = max(abs(e) for e in est)
            spread = max(est) - min(est)
            if not same or spread > 0.25 * (atol + RTOL * scale):
                unstable.append((i, path))
                continue
            grads[(i, path)] = c1
    return _FD(y0, grads, unstable)


# --- checking one program -------------------------------------------------------------------------

@dataclass
class Result:
    seed: int
    index: int
    outcome: str
    features: tuple = ()
    used: tuple = ()
    error: str = ""
    detail: str = ""
    source: str = ""
    repro: str = ""
    refusal_class: str = ""
    expected: bool = False       # refused, in a class the program may legitimately get
    skipped_points: int = 0
    skipped_coordinates: int = 0
    checked_coordinates: int = 0
    seconds: float = 0.0
    stream: list = None          # generate()'s features argument: reproduce with it
    stages: dict = field(default_factory=dict)   # seconds per stage (fd, grad, pullback, ...)
    disk_hits: int = 0       # specializations loaded from numbarules' disk cache by the check
    loaded: bool = False     # the check of ``run(disk_cache=True)``'s second process

    def to_json(self):
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text):
        d = json.loads(text)
        known = cls.__dataclass_fields__
        d = {k: v for k, v in d.items() if k in known}
        d["features"] = tuple(d.get("features", ()))
        d["used"] = tuple(d.get("used", ()))
        return cls(**d)


def refusal_class(message):
    for name, pattern in REFUSAL_CLASSES.items():
        if re.search(pattern, message):
            return name
    return "unlisted"


def _load(prog, directory):
    path = os.path.join(directory, prog.module_name + ".py")
    with open(path, "w") as fh:
        fh.write(prog.source)
    spec = importlib.util.spec_from_file_location(prog.module_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[prog.module_name] = mod
    spec.loader.exec_module(mod)
    return mod, path


def _first_line(exc):
    text = f"{type(exc).__name__}: {exc}"
    return text


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
        g = grad(*args)
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
        y_vg, g_vg = nr.value_and_grad(f, argnums=argnums)(*args)
        _same_args(prog, attempt, args, "nr.value_and_grad")
        res.stages[key + "value_and_grad"] = time.perf_counter() - t3
        if before is not None:
            stage = "the gradient object made before world_change"
            args = prog.args(attempt)
            g_old = before.grad(*args)
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
        if not res.expected:
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
    if not isinstance(g, tuple) or len(g) != len(argnums):
        problems.append(f"nr.grad returned {g!r:.200}, expected {len(argnums)} tangents")
    elif not isinstance(t_pb, tuple) or len(t_pb) != len(prog.args_spec):
        problems.append(f"pb(1.0) returned {t_pb!r:.200}, expected {len(prog.args_spec)} "
                        "tangents")
    else:
        problems += _compare(prog, args, fd, dict(zip(argnums, g)), t_pb,
                             dict(zip(argnums, g_vg)))
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
    return _done(res, "ok", "", "", t0), _Paths(grad, pb, t_pb)


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


class _ArgWritten(Exception):
    pass


def _same_args(prog, attempt, args, what):
    ref = prog.args(attempt)
    for a, b, spec in zip(args, ref, prog.args_spec):
        for path in leaves(b):
            if get_leaf(a, path) != get_leaf(b, path):
                raise _ArgWritten(f"{what} wrote into argument {spec.name}")


def _close(a, b, rtol, atol):
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return False
    if math.isnan(a) or math.isnan(b):
        return False
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def _compare(prog, args, fd, grads, t_pb, g_vg):
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
            vals = [v for v in got.values() if isinstance(v, float) and math.isfinite(v)]
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


# --- worker processes -----------------------------------------------------------------------------

def worker_main():
    """A worker: reads one JSON request per line on stdin, answers one JSON result per line.

    Protocol output goes to the original stdout; anything the program or Numba prints goes to
    stderr. Requests: {"seed", "index", "features", "dir"} or {"setup": "module:function"}.
    """
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import numbarules  # noqa: F401 - the import cost before the first program
    from . import pool  # noqa: F401
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
                res = check_program(prog, req.get("dir"))
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
            [sys.executable, "-c", "from numbarules.fuzz.runner import worker_main; worker_main()"],
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


# --- the summary ----------------------------------------------------------------------------------

@dataclass
class Summary:
    seed: int
    features: tuple
    results: list = field(default_factory=list)
    seconds: float = 0.0

    def count(self, outcome):
        return sum(r.outcome == outcome for r in self.results)

    @property
    def ok(self):
        return self.count("ok")

    @property
    def wrong(self):
        return self.count("wrong")

    @property
    def refused(self):
        return self.count("refused")

    @property
    def internal(self):
        return self.count("internal")

    @property
    def invalid(self):
        return self.count("invalid")

    @property
    def skipped(self):
        return self.count("skipped")

    @property
    def unexpected_refusals(self):
        return [r for r in self.results if r.outcome == "refused" and not r.expected]

    @property
    def failures(self):
        """Programs the engine got wrong: wrong, internal, and refusals outside the README's
        refused classes for what the program contains (invalid: the fuzzer's own bugs)."""
        return [r for r in self.results if r.outcome in ("wrong", "internal", "invalid")
                or (r.outcome == "refused" and not r.expected)]

    @property
    def skipped_points(self):
        return sum(r.skipped_points for r in self.results)

    def feature_hits(self):
        hits = {}
        for r in self.results:
            for u in r.used:
                hits[u] = hits.get(u, 0) + 1
        return hits

    def classes(self):
        """Failures grouped by a normalised error signature: {signature: [results]}."""
        groups = {}
        for r in self.failures:
            groups.setdefault(signature(r), []).append(r)
        return groups

    def table(self):
        n = len(self.results)
        lines = [f"numbarules fuzz: seed {self.seed}, {n} programs in {self.seconds:.1f} s"
                 + (f", features {', '.join(self.features)}" if self.features else "")]
        for o in OUTCOMES:
            c = self.count(o)
            extra = ""
            if o == "refused" and c:
                extra = f" ({c - len(self.unexpected_refusals)} in README refused classes)"
            lines.append(f"  {o:9s} {c}{extra}")
        lines.append(f"  skipped points (finite differences unreliable, re-drawn): "
                     f"{self.skipped_points}; coordinates left unchecked: "
                     f"{sum(r.skipped_coordinates for r in self.results)} of "
                     f"{sum(r.checked_coordinates + r.skipped_coordinates for r in self.results)}")
        loaded = [r for r in self.results if r.loaded]
        if loaded:
            lines.append(f"  checked again in another process from the disk cache: {len(loaded)} "
                         f"programs, {sum(r.disk_hits for r in loaded)} specializations loaded")
        return "\n".join(lines)

    def report(self, sources=True):
        out = [self.table()]
        groups = self.classes()
        if groups:
            drawn, failed = {}, {}
            for r in self.results:
                for f in r.features:
                    drawn[f] = drawn.get(f, 0) + 1
                    failed[f] = failed.get(f, 0) + (r in self.failures)
            rates = sorted(drawn, key=lambda f: -failed[f] / drawn[f])
            out.append("\nfailing programs per feature group drawn: "
                       + ", ".join(f"{f} {failed[f]}/{drawn[f]}" for f in rates))
            out.append(f"\n{len(groups)} failure classes:")
            for sig, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                ids = ", ".join(f"{r.index}" for r in rs[:12]) + (" ..." if len(rs) > 12 else "")
                out.append(f"  [{len(rs)}x] {sig}\n      programs: {ids}")
        expected = [r for r in self.results if r.outcome in ("refused", "skipped")
                    and r not in self.failures]
        if expected:
            out.append("\nrefused in a README refused class the program contains, or skipped:")
            for r in expected:
                first = r.error.splitlines()[0] if r.error else ""
                cls = f" [{r.refusal_class}]" if r.refusal_class else ""
                out.append(f"  program {r.index}: {r.outcome}{cls} {first[:140]}")
        for r in self.failures if sources else []:
            out.append(describe(r))
        return "\n".join(out)

    def __str__(self):
        return self.report()


def signature(r):
    msg = r.error.splitlines()[0] if r.error else ""
    msg = re.sub(r"nrfuzz_\d+_\d+", "M", msg)
    msg = re.sub(r"'[^']*'", "'_'", msg)
    msg = re.sub(r"\b[a-zA-Z]+\d+(\.\w+)?(\[\d+\])*", "_", msg)
    msg = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", msg)
    msg = re.sub(r"line N", "line", msg)
    msg = re.sub(r"\s+", " ", msg)[:160]
    extra = f" [{r.refusal_class}]" if r.outcome == "refused" else ""
    return f"{r.outcome}: {msg}{extra}"


def describe(r):
    bar = "=" * 78
    head = (f"{bar}\n{r.outcome.upper()}: seed {r.seed}, program {r.index} "
            f"(reproduce: numbarules.fuzz.generate({r.seed}, {r.index}"
            + (f", {list(r.stream)!r}" if r.stream else "") + "); "
            f"numbarules fuzz --seed {r.seed} --start {r.index} --n 1"
            + (f" --features {','.join(r.stream)}" if r.stream else "") + ")\n")
    body = f"error: {r.error}\n"
    if r.detail and r.detail != r.error:
        body += "detail:\n" + _indent(r.detail[-3000:]) + "\n"
    src = r.repro or r.source
    return head + body + "program:\n" + _indent(src) + "\n"


def _indent(text):
    return "\n".join("    " + line for line in text.rstrip().splitlines())


# --- the public entry point -----------------------------------------------------------------------

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
