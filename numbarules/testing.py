"""Checking gradients against central finite differences: ``check_grad``.

    def f(x, a):
        return x * np.sum(a ** 2)

    check_grad(f, 1.5, np.array([1.0, 2.0]))    # nr.grad(f, argnums=(0, 1)); {0: ..., 1: ...}

What is compared, per checked coordinate ``k`` of a selected argument:

    g   = the tangent that ``grad(f, argnums=...)(*args)`` returns, element k, as float64
    fd  = (f(x + h e_k) - f(x - h e_k)) / (2 h), evaluated in float64
    h   = eps, or by default cbrt(float64 epsilon) * max(1, |x_k|)   (~6e-6 * max(1, |x_k|))

    passes        iff  |g - fd| <= atol + rtol * max(|g|, |fd|)
    relative error     |g - fd| / max(atol / rtol, |g|, |fd|)

The relative error is on the same scale as ``rtol``: an element whose relative error is at most
``rtol`` passes, and a passing element has a relative error below ``2 * rtol``. ``check_grad``
returns the worst relative error per checked argument and raises ``AssertionError`` when any
coordinate fails.

Arrays of at most 64 elements have every element perturbed. Larger arrays get 64 elements
drawn at random (seeded, so a run is reproducible) plus one random direction ``v``, compared as
``v . g`` against ``(f(x + h v) - f(x - h v)) / (2 h)``; an error anywhere in the array shows up
there. The tolerance of that comparison uses ``sum |v_k g_k|`` as its scale, since the dot
product may cancel.

float32 arguments are promoted to float64 for the finite differences (f is evaluated at the
very same points, just in higher precision). Their tangents are float32 arithmetic, so they are
compared with ``rtol >= 1e-3`` and ``atol >= 1e-5``. Where f refuses float64 inputs (a
``TypeError``, e.g. a generic function with only a ``Float32`` method), the differences run in
the arguments' own dtype with a float32-sized step, under the same looser tolerance.
"""
import sys

import numba
import numpy as np

from . import kernels, rules
from .ad import analysis
from .lattice import fmt_sig, typeof
from .structs import Tangent

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_FULL_CHECK_MAX = 64
_SEED = 0
# A central difference has truncation error ~h^2 and rounding error ~epsilon/h; h ~ cbrt(epsilon)
# balances the two.
_STEP64 = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)
_STEP32 = float(np.finfo(np.float32).eps) ** (1.0 / 3.0)
_F32_RTOL = 1e-3
_F32_ATOL = 1e-5


def check_grad(f, *args, argnums=None, eps=None, rtol=1e-5, atol=1e-7, grad=None):
    """Check ``grad(f, argnums)(*args)`` against central finite differences of ``f``.

    ``f`` is scalar-valued and callable from Python (a generic function, a plain Python function
    or a ``numba.njit`` function). ``argnums``: ``None`` checks every float, float32/float64 scalar
    and float32/float64 array argument (integers, booleans and integer arrays are skipped); an
    int or a tuple of ints selects. ``eps``: ``None`` for the scale-aware step described in the
    module docstring, or one absolute step for every coordinate. ``rtol``/``atol``: see the
    module docstring; the defaults allow for the noise of finite differences. ``grad``: a
    gradient factory called as ``grad(f, argnums=tuple_of_ints)`` whose result, called with
    ``*args``, returns one tangent per selected argument; default ``numbarules.grad``.

    Returns ``{argnum: worst relative error}``. Raises ``AssertionError`` when a tangent has the
    wrong kind (a float for a float, an ndarray of the argument's shape and dtype for an array),
    when the gradient call writes into an argument, or when any checked coordinate disagrees
    with finite differences; the message names f, the argument, the element, both values.
    The caller's arrays are never modified (perturbations happen on copies).
    """
    selected = _select(args, argnums)
    name = _name(f)
    tangents = _tangents(_default_grad() if grad is None else grad, f, args, selected, name)
    fd_args, in_float32 = _fd_inputs(f, args, name)
    step = _STEP32 if in_float32 else _STEP64
    report = {}
    for i, t in zip(selected, tangents):
        _check_kind(name, i, args[i], t)
        loose = in_float32 or _is_float32(args[i])
        r = max(rtol, _F32_RTOL) if loose else rtol
        a = max(atol, _F32_ATOL) if loose else atol
        report[i] = _compare(f, fd_args, i, t, eps, step, r, a, name)
    return report


def _default_grad():
    # The package's attribute, looked up at call time: whatever numbarules.grad is then
    # (tests and users may wrap it).
    return sys.modules["numbarules"].grad


# --- which arguments, and what their tangents must look like -----------------------------------

def _is_float_arg(a):
    if isinstance(a, np.ndarray):
        return a.dtype in _FLOAT_DTYPES
    if isinstance(a, np.floating):
        return a.dtype in _FLOAT_DTYPES
    return isinstance(a, float)


def _is_float32(a):
    return isinstance(a, (np.ndarray, np.floating)) and a.dtype == np.float32


def _describe(a):
    if isinstance(a, np.ndarray):
        return f"{a.dtype} array of shape {a.shape}"
    return type(a).__name__


def _select(args, argnums):
    if argnums is None:
        selected = tuple(i for i, a in enumerate(args) if _is_float_arg(a))
        if not selected:
            raise ValueError("check_grad: no float or float-array argument to check among "
                             f"({', '.join(_describe(a) for a in args)})")
        return selected
    requested = (argnums,) if isinstance(argnums, (int, np.integer)) else tuple(argnums)
    selected = []
    for i in requested:
        if not -len(args) <= i < len(args):
            raise ValueError(f"check_grad: argnums {argnums!r} selects argument {i}, but f gets "
                             f"{len(args)} arguments")
        i = int(i) % len(args)
        if not _is_float_arg(args[i]):
            raise TypeError(f"check_grad: argnums selects argument {i}, a {_describe(args[i])}; "
                            "only float scalars and float32/float64 arrays can be checked")
        selected.append(i)
    return tuple(selected)


def _name(f):
    return getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or repr(f)


def _tangents(grad, f, args, selected, name):
    snapshots = {i: a.copy() for i, a in enumerate(args) if isinstance(a, np.ndarray)}
    tangents = grad(f, argnums=selected)(*args)
    for i, before in snapshots.items():
        if not np.array_equal(args[i], before, equal_nan=True):
            args[i][...] = before
            raise AssertionError(f"check_grad({name}): the gradient call wrote into argument {i} "
                                 "(restored); differentiating must leave the inputs as they were")
    if not isinstance(tangents, (tuple, list)) or len(tangents) != len(selected):
        raise AssertionError(f"check_grad({name}): grad(f, argnums={selected}) should return a "
                             f"tuple of {len(selected)} tangents, got {tangents!r}")
    return tangents


def _check_kind(name, i, arg, t):
    where = f"check_grad({name}): the tangent of argument {i} ({_describe(arg)})"
    if not isinstance(arg, np.ndarray):
        if isinstance(t, np.ndarray) or not isinstance(t, (float, np.floating)):
            raise AssertionError(f"{where} should be a float, got {_describe(t)}: {t!r}")
        return
    if not isinstance(t, np.ndarray):
        raise AssertionError(f"{where} should be an ndarray, got {_describe(t)}: {t!r}")
    if t.shape != arg.shape or t.dtype != arg.dtype:
        raise AssertionError(f"{where} should be a {_describe(arg)}, got a {_describe(t)}")


# --- finite differences -------------------------------------------------------------------------

def _fresh(args):
    # Each evaluation gets its own arrays, so neither f nor a perturbation leaks into another.
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _scalar(y, name):
    if np.ndim(y) != 0 or not np.isrealobj(y):
        raise TypeError(f"check_grad({name}): f must return a real scalar, got {y!r}")
    return float(y)


def _to_float64(a):
    if isinstance(a, np.ndarray) and a.dtype == np.float32:
        return a.astype(np.float64)
    if isinstance(a, np.float32):
        return float(a)
    return a


def _fd_inputs(f, args, name):
    """The arguments the differences perturb (float32 promoted to float64 where f accepts it), and
    whether the differences run in float32 because f refused the promotion."""
    promoted = [_to_float64(a) for a in args]
    if all(p is a for p, a in zip(promoted, args)):
        _scalar(f(*_fresh(args)), name)
        return list(args), False
    try:
        _scalar(f(*_fresh(promoted)), name)
    except TypeError:
        _scalar(f(*_fresh(args)), name)
        return list(args), True
    return promoted, False


def _evaluate(f, args, i, x, name):
    work = _fresh(args)
    work[i] = x
    return _scalar(f(*work), name)


def _central(f, args, i, x_plus, x_minus, width, name):
    return (_evaluate(f, args, i, x_plus, name) - _evaluate(f, args, i, x_minus, name)) / width


def _coordinate(f, args, i, k, eps, step, name):
    """Central difference along element ``k`` (flat index) of argument ``i``."""
    x = args[i]
    if not isinstance(x, np.ndarray):
        h = eps if eps is not None else step * max(1.0, abs(float(x)))
        xp, xm = x + h, x - h
        return _central(f, args, i, xp, xm, float(xp) - float(xm), name)
    h = eps if eps is not None else step * max(1.0, abs(float(x.flat[k])))
    xp, xm = x.copy(), x.copy()
    xp.flat[k] += h
    xm.flat[k] -= h
    # Divide by the step actually taken, after rounding to the array's dtype.
    return _central(f, args, i, xp, xm, float(xp.flat[k]) - float(xm.flat[k]), name)


def _direction(f, args, i, v, eps, step, name):
    x = args[i]
    h = eps if eps is not None else step * max(1.0, float(np.max(np.abs(x))))
    xp = (x + h * v.reshape(x.shape)).astype(x.dtype)
    xm = (x - h * v.reshape(x.shape)).astype(x.dtype)
    return _central(f, args, i, xp, xm, 2.0 * h, name)


def _compare(f, args, i, t, eps, step, rtol, atol, name):
    if not isinstance(args[i], np.ndarray):
        fd = _coordinate(f, args, i, 0, eps, step, name)
        return _judge(name, i, ["the scalar"], [float(t)], [fd], [0.0], rtol, atol)
    g = np.asarray(t, dtype=np.float64).ravel()
    rng = np.random.default_rng(_SEED)
    size = g.size
    if size <= _FULL_CHECK_MAX:
        flat = range(size)
    else:
        flat = rng.choice(size, _FULL_CHECK_MAX, replace=False)
    shape = args[i].shape
    labels = [f"element {tuple(int(j) for j in np.unravel_index(k, shape))}" for k in flat]
    ad = [float(g[k]) for k in flat]
    fd = [_coordinate(f, args, i, k, eps, step, name) for k in flat]
    scale = [0.0] * len(ad)
    if size > _FULL_CHECK_MAX:
        v = rng.standard_normal(size)
        v /= np.linalg.norm(v)
        labels.append(f"a random direction v (seed {_SEED}), as v . g")
        ad.append(float(v @ g))
        fd.append(_direction(f, args, i, v, eps, step, name))
        scale.append(float(np.abs(v) @ np.abs(g)))
    return _judge(name, i, labels, ad, fd, scale, rtol, atol)


def _judge(name, i, labels, ad, fd, scale, rtol, atol):
    """Worst relative error over the checked coordinates; raises on any failing one."""
    ad, fd = np.asarray(ad, dtype=np.float64), np.asarray(fd, dtype=np.float64)
    size = np.maximum(np.maximum(np.abs(ad), np.abs(fd)), np.asarray(scale, dtype=np.float64))
    diff = np.abs(ad - fd)
    floor = atol / rtol if rtol > 0 else atol
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(diff == 0.0, 0.0, np.nan_to_num(diff / (atol + rtol * size), nan=np.inf))
        rel = np.where(diff == 0.0, 0.0, np.nan_to_num(diff / np.maximum(floor, size), nan=np.inf))
    if np.all(ratio <= 1.0):
        return float(np.max(rel))
    w = int(np.argmax(ratio))
    raise AssertionError(
        f"check_grad({name}): the gradient for argument {i} disagrees with central finite "
        f"differences at {labels[w]}:\n"
        f"  AD  = {float(ad[w])!r}\n"
        f"  FD  = {float(fd[w])!r}\n"
        f"  |AD - FD| = {diff[w]:.3e} > atol + rtol * {size[w]:.3e} = {atol + rtol * size[w]:.3e}"
        f" (atol={atol:g}, rtol={rtol:g}); relative error {rel[w]:.3e}\n"
        f"  {int(np.sum(ratio > 1.0))} of {len(ad)} checked coordinates fail")


def check_rrule(f, *args, rtol=1e-5, atol=1e-7, eps=None):
    """Check the rule that a call ``f(*args)`` uses, the way Mooncake's ``test_rule`` does:

    - a rule applies (``nr.rule_for``) and it is really the code the AD engine runs for this call
      (not a more specific method's derived gradient: the rule rule);
    - its forward returns ``f(*args)``;
    - its pullback returns one tangent per argument: None for integers and booleans, a float for
      a float, an array of the argument's shape for an array (None for a float means zero);
    - the tangents agree with central finite differences (``check_grad``'s tolerances).

    Returns ``{argnum: worst relative error}``; raises ``AssertionError`` naming what failed.
    """
    name = _name(f)
    sig = fmt_sig(tuple(typeof(a) for a in args))
    rule = rules.rule_for(f, *args)
    if rule is None:
        raise AssertionError(f"check_rrule({name}): no rule applies to {name}{sig}")
    argtypes = tuple(numba.typeof(a) for a in args)
    target, _ = kernels.target_for(f, argtypes)
    if target is not rule:
        raise AssertionError(f"check_rrule({name}): the AD engine would not run {rule!r} for "
                             f"{name}{sig}; it uses {target!r}")
    mask = tuple(analysis.differentiable(t) for t in argtypes)
    spec = kernels.specialize(rule, argtypes, mask)
    y, residuals = spec.fwd(*args)
    primal = f(*args)
    if not np.allclose(y, primal, rtol=1e-12, atol=0.0):
        raise AssertionError(f"check_rrule({name}): the rule's forward returns {y!r}, but "
                             f"{name}{sig} returns {primal!r}")
    tangents = spec.bwd(residuals, 1.0)
    for i, (a, t) in enumerate(zip(args, tangents)):
        if analysis.is_float_struct(argtypes[i]):
            if t is not None and type(t) is not Tangent[type(a)]:
                raise AssertionError(f"check_rrule({name}): argument {i} is a {type(a).__name__}; "
                                     f"its tangent must be nr.Tangent[{type(a).__name__}] or None, "
                                     f"not {t!r}")
            continue
        if not _is_float_arg(a) and t is not None:
            raise AssertionError(f"check_rrule({name}): argument {i} ({_describe(a)}) carries "
                                 f"no tangent, but the pullback returns {t!r}; return None")
    checked = tuple(i for i, a in enumerate(args) if _is_float_arg(a))
    if not checked:
        return {}
    zero = {i: (np.zeros_like(args[i]) if isinstance(args[i], np.ndarray) else 0.0)
            for i in checked}
    chosen = tuple(zero[i] if tangents[i] is None else tangents[i] for i in checked)

    def rule_grad(fn, argnums):
        return lambda *a: chosen
    return check_grad(f, *args, argnums=checked, eps=eps, rtol=rtol, atol=atol, grad=rule_grad)
