"""Forward mode and second derivatives of one program (check.py runs them after the gradient
paths agree with finite differences): ``nr.jvp`` along a random direction against the Python
value and ``grad . v``; ``nr.hvp`` along two directions, symmetric (``w . H v = v . H w``) and
against central differences of ``nr.grad`` where those agree with themselves.
"""

import math
import traceback

import numpy as np

from .outcomes import _first_line
from .reference import (AD_ATOL, VALUE_RTOL, _ArgWritten, _close, _is_struct, _same_args,
                        get_leaf, leaves, with_leaf)


HVP_RTOL = 1e-8      # its symmetry: w . H v against v . H w
HVP_FD_RTOL = 1e-4   # against central differences of the gradient


def _check_hvp(prog, f, attempt, argnums):
    """("ok" | "refused" | "wrong" | "internal", message) for nr.hvp along two random
    directions: ``w . H v = v . H w`` to rounding, and ``H v`` against central differences of
    ``nr.grad`` where those agree with themselves at steps h and h / 2 (not at a kink). Every
    kind of argument (floats, arrays, tuples, structs: their float leaves)."""
    import numbarules as nr

    args = prog.args(attempt)
    rng = np.random.default_rng([prog.seed, prog.index, attempt, 2])
    v = tuple(_direction(args[i], rng) for i in argnums)
    w = tuple(_direction(args[i], rng) for i in argnums)
    paths = [(j, p) for j, i in enumerate(argnums) for p in leaves(args[i])]

    def flat(t):
        out = []
        for j, p in paths:
            x = get_leaf(t[j], p)
            out.append(float(x) if isinstance(x, float) else 0.0)
        return np.array(out)
    try:
        product = nr.hvp(f, tuple(argnums))
        hv = product(*prog.args(attempt), v)
        hw = product(*prog.args(attempt), w)
    except nr.NumbarulesError as exc:
        return "refused", f"{type(exc).__name__}: {exc}"
    except Exception as exc:   # noqa: BLE001 - anything else is the engine's failure
        return "internal", f"{_first_line(exc)}\n{traceback.format_exc()}"
    hv, hw, fv, fw = flat(hv), flat(hw), flat(v), flat(w)
    if not (np.all(np.isfinite(hv)) and np.all(np.isfinite(hw))):
        return "ok", "not checked"          # a point where the second derivative is infinite
    a, b = float(fw @ hv), float(fv @ hw)
    scale = float(np.abs(fw) @ np.abs(hv) + np.abs(fv) @ np.abs(hw))
    if abs(a - b) > AD_ATOL + HVP_RTOL * max(scale, 1.0):
        return "wrong", f"the Hessian is not symmetric: w . H v = {a!r}, v . H w = {b!r}"
    grad = nr.grad(f, tuple(argnums))
    size = max([1.0] + [abs(float(get_leaf(args[argnums[j]], p))) for j, p in paths])

    def differences(h):
        # fresh arguments (the layouts of args) written in place: the gradient compiled above
        up, down = list(prog.args(attempt)), list(prog.args(attempt))
        for j, p in paths:
            i, d = argnums[j], get_leaf(v[j], p)
            x = get_leaf(args[i], p)
            up[i] = with_leaf(up[i], p, x + h * d, in_place=True)
            down[i] = with_leaf(down[i], p, x - h * d, in_place=True)
        return (flat(grad(*up)) - flat(grad(*down))) / (2 * h)
    try:
        h = 1e-4 * size
        fd1, fd2 = differences(h), differences(h / 2)
    except Exception:   # noqa: BLE001 - the gradient fails off the point: no reference
        return "ok", ""
    tol = 1e-6 * max(1.0, float(np.max(np.abs(hv), initial=0.0))) + HVP_FD_RTOL * np.abs(fd2)
    steady = np.abs(fd1 - fd2) <= tol
    off = steady & (np.abs(hv - fd2) > tol)
    if np.any(off):
        k = int(np.argmax(off))
        return "wrong", (f"H v at {paths[k]} is {hv[k]!r}; differences of nr.grad give "
                         f"{fd2[k]!r} (and {fd1[k]!r} at twice the step)")
    return "ok", ""


JVP_RTOL = 1e-8


def _direction(value, rng):
    """A random tangent of the kind of ``value`` (None where it carries none)."""
    if isinstance(value, bool) or isinstance(value, (int, np.integer)):
        return None
    if isinstance(value, (float, np.floating)):
        return float(rng.uniform(-1.0, 1.0))
    if isinstance(value, np.ndarray):
        return rng.uniform(-1.0, 1.0, value.shape) if value.dtype.kind == "f" else None
    if _is_struct(value):
        from numbarules import Tangent
        return Tangent[type(value)](*(_direction(v, rng) for v in value))
    if isinstance(value, tuple):
        return tuple(_direction(v, rng) for v in value)
    return None


def _check_jvp(prog, f, attempt, argnums, grads, y_ref):
    """("ok" | "refused" | "wrong" | "internal", message): nr.jvp along a random direction
    against the value and ``grad . v``."""
    import numbarules as nr

    rng = np.random.default_rng([prog.seed, prog.index, attempt])
    args = prog.args(attempt)
    dirs = {i: _direction(args[i], rng) for i in argnums}
    tangent = dirs[argnums[0]] if len(argnums) == 1 and not isinstance(prog.argnums, tuple) \
        else tuple(dirs[i] for i in argnums)
    try:
        y, dy = nr.jvp(f, prog.argnums)(*args, tangent)
        _same_args(prog, attempt, args, "nr.jvp")
    except _ArgWritten as exc:
        return "wrong", str(exc)
    except nr.NumbarulesError as exc:
        return "refused", f"{type(exc).__name__}: {exc}"
    except RecursionError as exc:
        return "internal", f"RecursionError: {exc}"
    except Exception as exc:   # noqa: BLE001 - anything else is the engine's failure
        return "internal", f"{_first_line(exc)}\n{traceback.format_exc()}"
    if not _close(y, y_ref, VALUE_RTOL, VALUE_RTOL):
        return "wrong", f"the value is {y!r}, Python gives {y_ref!r}"
    want, scale = 0.0, 0.0
    for i in argnums:
        for p in leaves(args[i]):
            gi, vi = get_leaf(grads[i], p), get_leaf(dirs[i], p)
            if isinstance(gi, float) and isinstance(vi, float):
                want += gi * vi
                scale += abs(gi * vi)
    try:
        dy = float(dy)
    except (TypeError, ValueError):
        return "wrong", f"the tangent is {dy!r:.100}, not a float"
    if not math.isfinite(dy) or abs(dy - want) > AD_ATOL + JVP_RTOL * max(scale, abs(want)):
        return "wrong", (f"the directional derivative is {dy!r}, grad . v gives {want!r} "
                         f"(direction {tangent!r:.200})")
    return "ok", ""
