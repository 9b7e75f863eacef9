"""The reference a program's gradients are checked against: central finite differences of the
program run as plain Python, and whether they can be trusted at a point.

An argument's float coordinates (floats, array elements, struct fields, tuple elements) are
addressed by paths: ``leaves`` lists them, ``get_leaf`` and ``with_leaf`` read and replace one.
Every Python run is traced (``sys.settrace``): the lines it executes and the largest float its
frames hold. ``finite_differences`` gives None for a non-finite or huge value, and marks a
coordinate unstable where differences with steps h and 2h and the one-sided ones disagree or
x +- h runs other lines than x (check.py then re-draws the point). The tolerances of every
comparison with the reference, and the check that a path left its arguments as they were, are
here too.
"""

import math
import sys
from dataclasses import dataclass

import numpy as np

RTOL, ATOL = 1e-5, 1e-6          # against finite differences; atol scaled by max(1, |f|)
AD_RTOL, AD_ATOL = 1e-8, 1e-10   # the AD paths against each other (grad, pullback, ...)
VALUE_RTOL = 1e-9                # a kernel's value against the Python value
_STEP = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)


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


def with_leaf(value, path, x, in_place=False):
    """``value`` with the leaf at ``path`` set to ``x``: arrays copied (C order), or with
    ``in_place`` written where they are, keeping their layout (a gradient compiled for a
    transposed or strided argument then runs on the result: a C copy is a new Numba type, and
    its new gradient specialization cost 1-2 s of a program's check)."""
    if not path:
        return float(x)
    kind, k = path[0]
    if kind == "e":
        a = value if in_place else np.array(value, dtype=np.float64, copy=True, order="C")
        a[np.unravel_index(k, a.shape)] = x
        return a
    items = list(value)
    items[k] = with_leaf(items[k], path[1:], x, in_place)
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


# --- comparing a result with the reference -------------------------------------------------------

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
