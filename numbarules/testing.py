"""Checking gradients against central finite differences: ``check_grad`` and ``check_rrule``.

    def f(x, a):
        return x * np.sum(a ** 2)

    check_grad(f, 1.5, np.array([1.0, 2.0]))    # nr.grad(f, argnums=(0, 1)); {0: ..., 1: ...}

An argument is checked through its *float leaves*: a float scalar or a float32/float64 array is
one leaf; an ``@nr.struct`` instance has the leaves of its fields, a plain tuple those of its
entries (recursively: structs in structs, tuples in structs, ...). Integers, booleans, integer
arrays, and structs or tuples holding none of the above have no leaves (and no tangent).

What is compared, per checked coordinate ``k`` of a leaf of a selected argument:

    g   = the tangent that ``grad(f, argnums=...)(*args)`` returns, element k, as float64
    fd  = (f(x + h e_k) - f(x - h e_k)) / (2 h), evaluated in float64
    h   = eps, or by default cbrt(float64 epsilon) * max(1, |x_k|)   (~6e-6 * max(1, |x_k|))

    passes        iff  |g - fd| <= atol + rtol * max(|g|, |fd|)
    relative error     |g - fd| / max(atol / rtol, |g|, |fd|)

A leaf inside a struct is perturbed by rebuilding the struct with the perturbed field
(``type(s)(*fields)``: structs are immutable), a leaf inside a tuple by rebuilding the tuple.

The relative error is on the same scale as ``rtol``: an element whose relative error is at most
``rtol`` passes, and a passing element has a relative error below ``2 * rtol``. ``check_grad``
returns the worst relative error per checked argument and raises ``AssertionError`` when any
coordinate fails.

Tangents must have the argument's structure: a float for a float, an ndarray of the same shape
and dtype for an array, an ``nr.Tangent[S]`` for a struct of class ``S`` (one entry per field,
each of its field's kind, ``None`` for a field with no leaves, a nested ``nr.Tangent[Inner]``
for a struct-valued field), a tuple of the same length for a tuple (``None`` for entries with
no leaves).

Arrays of at most 64 elements have every element perturbed. Larger arrays get 64 elements
drawn at random (seeded, so a run is reproducible) plus one random direction ``v``, compared as
``v . g`` against ``(f(x + h v) - f(x - h v)) / (2 h)``; an error anywhere in the array shows up
there. The tolerance of that comparison uses ``sum |v_k g_k|`` as its scale, since the dot
product may cancel.

float32 arguments are promoted to float64 for the finite differences (f is evaluated at the
very same points, just in higher precision). Their tangents are float32 arithmetic, so they are
compared with ``rtol >= 1e-3`` and ``atol >= 1e-5``. Where f refuses float64 inputs (a
``TypeError``, e.g. a generic function with only a ``Float32`` method), the differences run in
the arguments' own dtype with a float32-sized step, under the same looser tolerance (a struct
whose field annotations refuse float64 keeps its float32 fields, likewise).

``check_rrule`` runs a rule's pullback on random cotangents (seeded: two per check, a positive
and a negative one for a scalar output, two normal draws for an array output) and compares each
result with the finite differences of ``<dy, f(x)>``, the vector-Jacobian product the pullback
must compute.
"""
import inspect
import sys

import numba
import numpy as np

from . import kernels, rules, targets
from .ad import kinds
from .lattice import fmt_sig, typeof
from .structs import Tangent, isstruct

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_FULL_CHECK_MAX = 64
_SEED = 0
# A central difference has truncation error ~h^2 and rounding error ~epsilon/h; h ~ cbrt(epsilon)
# balances the two.
_STEP64 = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)
_STEP32 = float(np.finfo(np.float32).eps) ** (1.0 / 3.0)
_F32_RTOL = 1e-3
_F32_ATOL = 1e-5


def check_grad(f, *args, argnums=None, eps=None, rtol=1e-5, atol=1e-7, grad=None,
               boundscheck=True):
    """Check ``grad(f, argnums)(*args)`` against central finite differences of ``f``.

    ``f`` is scalar-valued and callable from Python (a generic function, a plain Python function
    or a ``numba.njit`` function). ``argnums``: ``None`` checks every argument with float leaves
    (float32/float64 scalars and arrays, structs and tuples holding them; integers, booleans and
    integer arrays are skipped); an int or a tuple of ints selects. ``eps``: ``None`` for the
    scale-aware step described in the module docstring, or one absolute step for every
    coordinate. ``rtol``/``atol``: see the module docstring; the defaults allow for the noise of
    finite differences. ``grad``: a gradient factory called as ``grad(f, argnums=tuple_of_ints)``
    whose result, called with ``*args``, returns one tangent per selected argument; default
    ``numbarules.grad``. ``boundscheck``: the default gradient's kernels check every index
    (``nr.grad(..., boundscheck=True)``), so a read past the end of an array raises IndexError
    instead of giving a plausible gradient.

    Returns ``{argnum: worst relative error}``. Raises ``AssertionError`` when a tangent has the
    wrong kind or structure (see the module docstring), when the gradient call writes into an
    argument (arrays inside structs and tuples included), or when any checked coordinate
    disagrees with finite differences; the message names f, the argument, the field or entry,
    the element, both values. The caller's arrays are never modified (perturbations happen on
    copies).
    """
    selected = _select(args, argnums)
    name = _name(f)
    tangents = _tangents(_default_grad(boundscheck) if grad is None else grad, f, args,
                         selected, name)
    return _check(f, args, selected, tangents, eps, rtol, atol, f"check_grad({name})")


def _default_grad(boundscheck):
    # The package's attribute, looked up at call time: whatever numbarules.grad is then
    # (tests and users may wrap it; a wrapper without a boundscheck parameter gets none).
    grad = sys.modules["numbarules"].grad
    try:
        takes = "boundscheck" in inspect.signature(grad).parameters
    except (TypeError, ValueError):
        takes = False
    if not (boundscheck and takes):
        return grad
    return lambda f, argnums: grad(f, argnums=argnums, boundscheck=True)


def _check(f, args, selected, tangents, eps, rtol, atol, who):
    """Kinds first (every selected argument), then finite differences; ``who`` starts messages."""
    for i, t in zip(selected, tangents):
        _check_kind(f"{who}: the tangent of argument {i}", args[i], t)
    fd_args, in_float32 = _fd_inputs(f, args, who)
    return {i: _compare(f, args, fd_args, in_float32, i, t, eps, rtol, atol, who)
            for i, t in zip(selected, tangents)}


# --- values as trees of float leaves -----------------------------------------------------------

def _is_float_arg(a):
    if isinstance(a, np.ndarray):
        return a.dtype in _FLOAT_DTYPES
    if isinstance(a, np.floating):
        return a.dtype in _FLOAT_DTYPES
    return isinstance(a, float)


def _is_struct(a):
    return isstruct(type(a))


def _is_tuple(a):
    return type(a) is tuple


def _has_leaves(a):
    if _is_float_arg(a):
        return True
    if _is_struct(a) or _is_tuple(a):
        return any(_has_leaves(e) for e in a)
    return False


def _step_name(a, j):
    return f"field {list(type(a)._nr_fields)[j]}" if _is_struct(a) else f"entry {j}"


def _leaves(a, path=()):
    """``(path, leaf)`` for every float leaf of ``a``; a path is a tuple of indices."""
    if _is_float_arg(a):
        yield path, a
    elif _is_struct(a) or _is_tuple(a):
        for j, e in enumerate(a):
            yield from _leaves(e, path + (j,))


def _arrays(a, path=()):
    """``(path, array)`` for every ndarray in ``a`` (any dtype)."""
    if isinstance(a, np.ndarray):
        yield path, a
    elif _is_struct(a) or _is_tuple(a):
        for j, e in enumerate(a):
            yield from _arrays(e, path + (j,))


def _get(a, path):
    for j in path:
        a = a[j]
    return a


def _put(a, path, x):
    """``a`` with the value at ``path`` replaced by ``x`` (structs and tuples rebuilt)."""
    if not path:
        return x
    items = list(a)
    items[path[0]] = _put(items[path[0]], path[1:], x)
    return type(a)(*items) if _is_struct(a) else tuple(items)


def _label(a, path):
    """``"field w"``, ``"entry 1, field b"``: where ``path`` leads inside ``a``."""
    parts = []
    for j in path:
        parts.append(_step_name(a, j))
        a = a[j]
    return ", ".join(parts)


def _copy(a):
    if isinstance(a, np.ndarray):
        return a.copy()
    if _is_struct(a):
        return type(a)(*(_copy(e) for e in a))
    if _is_tuple(a):
        return tuple(_copy(e) for e in a)
    return a


# --- which arguments, and what their tangents must look like -----------------------------------

def _is_float32(a):
    return isinstance(a, (np.ndarray, np.floating)) and a.dtype == np.float32


def _describe(a):
    if isinstance(a, np.ndarray):
        return f"{a.dtype} array of shape {a.shape}"
    if isinstance(a, Tangent):
        return f"{type(a)!r}"
    if _is_struct(a):
        return getattr(type(a), "_nr_display_name", type(a).__name__)
    if _is_tuple(a):
        return f"tuple of {len(a)}"
    return type(a).__name__


def _select(args, argnums):
    if argnums is None:
        selected = tuple(i for i, a in enumerate(args) if _has_leaves(a))
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
        if not _has_leaves(args[i]):
            raise TypeError(f"check_grad: argnums selects argument {i}, a {_describe(args[i])}; "
                            "only float scalars, float32/float64 arrays, and structs and tuples "
                            "holding them can be checked")
        selected.append(i)
    return tuple(selected)


def _name(f):
    return getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or repr(f)


def _tangents(grad, f, args, selected, name):
    snapshots = [(i, path, a, a.copy()) for i, arg in enumerate(args) for path, a in _arrays(arg)]
    tangents = grad(f, argnums=selected)(*args)
    for i, path, a, before in snapshots:
        if not np.array_equal(a, before, equal_nan=True):
            a[...] = before
            where = f", {_label(args[i], path)}," if path else ""
            raise AssertionError(f"check_grad({name}): the gradient call wrote into argument {i}"
                                 f"{where} (restored); differentiating must leave the inputs as "
                                 "they were")
    if not isinstance(tangents, (tuple, list)) or len(tangents) != len(selected):
        raise AssertionError(f"check_grad({name}): grad(f, argnums={selected}) should return a "
                             f"tuple of {len(selected)} tangents, got {tangents!r}")
    return tangents


def _check_kind(base, arg, t):
    """That ``t`` is a tangent of ``arg``'s structure; ``base`` names where it is."""
    where = f"{base} ({_describe(arg)})"
    if _is_float_arg(arg) and not isinstance(arg, np.ndarray):
        if isinstance(t, np.ndarray) or not isinstance(t, (float, np.floating)):
            raise AssertionError(f"{where} should be a float, got {_describe(t)}: {t!r}")
        return
    if isinstance(arg, np.ndarray):
        if not isinstance(t, np.ndarray):
            raise AssertionError(f"{where} should be an ndarray, got {_describe(t)}: {t!r}")
        if t.shape != arg.shape or t.dtype != arg.dtype:
            raise AssertionError(f"{where} should be a {_describe(arg)}, got a {_describe(t)}")
        return
    if _is_struct(arg):
        want = Tangent[type(arg)]
        if type(t) is not want:
            raise AssertionError(f"{where} should be an nr.{want!r}, got {_describe(t)}: "
                                 f"{t!r:.200}")
    elif _is_tuple(arg):
        if type(t) is not tuple or len(t) != len(arg):
            raise AssertionError(f"{where} should be a tuple of {len(arg)} tangents, got "
                                 f"{_describe(t)}: {t!r:.200}")
    for j, (a, u) in enumerate(zip(arg, t)):
        inner = f"{base}, {_step_name(arg, j)}"
        if _has_leaves(a):
            _check_kind(inner, a, u)
        elif u is not None:
            raise AssertionError(f"{inner} ({_describe(a)}) should be None (it has no float "
                                 f"leaves), got {_describe(u)}: {u!r:.200}")


# --- finite differences -------------------------------------------------------------------------

def _fresh(args):
    # Each evaluation gets its own arrays, so neither f nor a perturbation leaks into another.
    return [_copy(a) for a in args]


def _scalar(y, who):
    if np.ndim(y) != 0 or not np.isrealobj(y):
        raise TypeError(f"{who}: f must return a real scalar, got {y!r}")
    return float(y)


def _to_float64(a):
    """``a`` with its float32 leaves in float64 (``a`` itself when it has none). A struct whose
    field annotations refuse the promotion keeps its float32 fields."""
    if isinstance(a, np.ndarray) and a.dtype == np.float32:
        return a.astype(np.float64)
    if isinstance(a, np.float32):
        return float(a)
    if _is_struct(a) or _is_tuple(a):
        items = [_to_float64(e) for e in a]
        if all(p is e for p, e in zip(items, a)):
            return a
        if _is_tuple(a):
            return tuple(items)
        try:
            return type(a)(*items)
        except TypeError:
            return a
    return a


def _fd_inputs(f, args, who):
    """The arguments the differences perturb (float32 promoted to float64 where f accepts it), and
    whether the differences run in float32 because f refused the promotion."""
    promoted = [_to_float64(a) for a in args]
    if all(p is a for p, a in zip(promoted, args)):
        _scalar(f(*_fresh(args)), who)
        return list(args), False
    try:
        _scalar(f(*_fresh(promoted)), who)
    except TypeError:
        _scalar(f(*_fresh(args)), who)
        return list(args), True
    return promoted, False


def _evaluate(f, args, i, path, x, who):
    work = _fresh(args)
    work[i] = _put(work[i], path, x)
    return _scalar(f(*work), who)


def _central(f, args, i, path, x_plus, x_minus, width, who):
    return (_evaluate(f, args, i, path, x_plus, who)
            - _evaluate(f, args, i, path, x_minus, who)) / width


def _coordinate(f, args, i, path, k, eps, step, who):
    """Central difference along element ``k`` (flat index) of the leaf at ``path`` of argument
    ``i``."""
    x = _get(args[i], path)
    if not isinstance(x, np.ndarray):
        h = eps if eps is not None else step * max(1.0, abs(float(x)))
        xp, xm = x + h, x - h
        return _central(f, args, i, path, xp, xm, float(xp) - float(xm), who)
    h = eps if eps is not None else step * max(1.0, abs(float(x.flat[k])))
    xp, xm = x.copy(), x.copy()
    xp.flat[k] += h
    xm.flat[k] -= h
    # Divide by the step actually taken, after rounding to the array's dtype.
    return _central(f, args, i, path, xp, xm, float(xp.flat[k]) - float(xm.flat[k]), who)


def _direction(f, args, i, path, v, eps, step, who):
    x = _get(args[i], path)
    h = eps if eps is not None else step * max(1.0, float(np.max(np.abs(x))))
    xp = (x + h * v.reshape(x.shape)).astype(x.dtype)
    xm = (x - h * v.reshape(x.shape)).astype(x.dtype)
    return _central(f, args, i, path, xp, xm, 2.0 * h, who)


def _compare(f, args, fd_args, in_float32, i, t, eps, rtol, atol, who):
    """Worst relative error over every checked coordinate of every leaf of argument ``i``."""
    labels, ad, fd, scale, rtols, atols = [], [], [], [], [], []
    for path, leaf in _leaves(args[i]):
        fd_leaf = _get(fd_args[i], path)
        loose = in_float32 or _is_float32(leaf)
        step = _STEP32 if in_float32 or _is_float32(fd_leaf) else _STEP64
        where = _label(args[i], path)
        n = len(ad)
        if not isinstance(leaf, np.ndarray):
            labels.append(where or "the scalar")
            ad.append(float(_get(t, path)))
            fd.append(_coordinate(f, fd_args, i, path, 0, eps, step, who))
            scale.append(0.0)
        else:
            _array_leaf(f, fd_args, i, path, np.asarray(_get(t, path), dtype=np.float64).ravel(),
                        where, eps, step, who, labels, ad, fd, scale)
        rtols += [max(rtol, _F32_RTOL) if loose else rtol] * (len(ad) - n)
        atols += [max(atol, _F32_ATOL) if loose else atol] * (len(ad) - n)
    return _judge(who, i, labels, ad, fd, scale, np.asarray(rtols), np.asarray(atols))


def _array_leaf(f, args, i, path, g, where, eps, step, who, labels, ad, fd, scale):
    rng = np.random.default_rng(_SEED)
    size = g.size
    if size <= _FULL_CHECK_MAX:
        flat = range(size)
    else:
        flat = rng.choice(size, _FULL_CHECK_MAX, replace=False)
    shape = _get(args[i], path).shape
    prefix = f"{where}, " if where else ""
    labels += [f"{prefix}element {tuple(int(j) for j in np.unravel_index(k, shape))}"
               for k in flat]
    ad += [float(g[k]) for k in flat]
    fd += [_coordinate(f, args, i, path, k, eps, step, who) for k in flat]
    scale += [0.0] * len(flat)
    if size > _FULL_CHECK_MAX:
        v = rng.standard_normal(size)
        v /= np.linalg.norm(v)
        labels.append(f"{prefix}a random direction v (seed {_SEED}), as v . g")
        ad.append(float(v @ g))
        fd.append(_direction(f, args, i, path, v, eps, step, who))
        scale.append(float(np.abs(v) @ np.abs(g)))


def _judge(who, i, labels, ad, fd, scale, rtol, atol):
    """Worst relative error over the checked coordinates; raises on any failing one.
    ``rtol``/``atol``: one per coordinate."""
    ad, fd = np.asarray(ad, dtype=np.float64), np.asarray(fd, dtype=np.float64)
    size = np.maximum(np.maximum(np.abs(ad), np.abs(fd)), np.asarray(scale, dtype=np.float64))
    diff = np.abs(ad - fd)
    floor = np.where(rtol > 0, atol / np.where(rtol > 0, rtol, 1.0), atol)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(diff == 0.0, 0.0, np.nan_to_num(diff / (atol + rtol * size), nan=np.inf))
        rel = np.where(diff == 0.0, 0.0, np.nan_to_num(diff / np.maximum(floor, size), nan=np.inf))
    if np.all(ratio <= 1.0):
        return float(np.max(rel))
    w = int(np.argmax(ratio))
    r, a = float(rtol[w]), float(atol[w])
    raise AssertionError(
        f"{who}: the gradient for argument {i} disagrees with central finite "
        f"differences at {labels[w]}:\n"
        f"  AD  = {float(ad[w])!r}\n"
        f"  FD  = {float(fd[w])!r}\n"
        f"  |AD - FD| = {diff[w]:.3e} > atol + rtol * {size[w]:.3e} = {a + r * size[w]:.3e}"
        f" (atol={a:g}, rtol={r:g}); relative error {rel[w]:.3e}\n"
        f"  {int(np.sum(ratio > 1.0))} of {len(ad)} checked coordinates fail")


# --- rules ----------------------------------------------------------------------------------------

def check_rrule(f, *args, rtol=1e-5, atol=1e-7, eps=None):
    """Check the rule that a call ``f(*args)`` uses, the way Mooncake's ``test_rule`` does:

    - a rule applies (``nr.rule_for``) and it is really the code the AD engine runs for this call
      (not a more specific method's derived gradient: the rule rule);
    - its forward returns ``f(*args)``;
    - its pullback returns one tangent per argument, of the argument's structure (see the module
      docstring): None for integers and booleans, a float for a float, an array of the
      argument's shape for an array, an ``nr.Tangent[S]`` for a struct, a tuple for a tuple
      (None for a float, an array or a struct means zero);
    - for two random cotangents ``dy`` of the output's kind (seeded: a positive and a negative
      float for a scalar output, two normal arrays of the output's shape for an array output),
      the tangents agree with central finite differences of ``<dy, f(x)>`` (``check_grad``'s
      tolerances), every float leaf of every argument included.

    Returns ``{argnum: worst relative error}`` over the cotangents; raises ``AssertionError``
    naming what failed.
    """
    name = _name(f)
    sig = fmt_sig(tuple(typeof(a) for a in args))
    rule = rules.rule_for(f, *args)
    if rule is None:
        raise AssertionError(f"check_rrule({name}): no rule applies to {name}{sig}")
    argtypes = tuple(numba.typeof(a) for a in args)
    target, _ = targets.target_for(f, argtypes)
    if target is not rule:
        raise AssertionError(f"check_rrule({name}): the AD engine would not run {rule!r} for "
                             f"{name}{sig}; it uses {target!r}")
    mask = tuple(kinds.differentiable(t) for t in argtypes)
    spec = kernels.specialize(rule, argtypes, mask)
    y, _ = spec.fwd(*_fresh(args))
    primal = f(*_fresh(args))
    if not _close(y, primal):
        raise AssertionError(f"check_rrule({name}): the rule's forward returns {y!r}, but "
                             f"{name}{sig} returns {primal!r}")
    checked = tuple(i for i, a in enumerate(args) if _has_leaves(a))
    rng = np.random.default_rng(_SEED)
    report = {}
    for sign in (1.0, -1.0):
        dy = _cotangent(y, spec.return_type, rng, sign)
        what = _cotangent_words(dy)
        who = f"check_rrule({name}) with {what}"
        _, residuals = spec.fwd(*_fresh(args))       # a fresh forward for every pullback call
        tangents = spec.bwd(residuals, dy)
        for i, (a, t) in enumerate(zip(args, tangents)):
            if _is_struct(a) and _has_leaves(a) and t is not None and \
                    type(t) is not Tangent[type(a)]:
                raise AssertionError(f"check_rrule({name}): argument {i} is a {_describe(a)}; "
                                     f"its tangent must be nr.Tangent[{_describe(a)}] or None, "
                                     f"not {t!r}")
            if not _has_leaves(a) and t is not None:
                raise AssertionError(f"check_rrule({name}): argument {i} ({_describe(a)}) carries "
                                     f"no tangent, but the pullback returns {t!r}; return None")
        if not checked:
            return {}
        chosen = tuple(_zeros_for_none(args[i], tangents[i]) for i in checked)

        def vjp(*a, dy=dy):
            return _inner(dy, f(*a))
        errors = _check(vjp, args, checked, chosen, eps, rtol, atol, who)
        for i, err in errors.items():
            report[i] = max(report.get(i, 0.0), err)
    return report


def _cotangent(y, rtype, rng, sign):
    """A random cotangent of output ``y`` (``rtype``: its Numba type)."""
    if isinstance(y, np.ndarray):
        if y.dtype not in _FLOAT_DTYPES:
            return np.zeros_like(y)
        return rng.standard_normal(y.shape).astype(y.dtype)
    if _is_struct(y):
        parts = [_cotangent(e, None, rng, sign) if _has_leaves(e) else None for e in y]
        return Tangent[type(y)](*parts)
    if _is_tuple(y):
        return tuple(_cotangent(e, None, rng, sign) if _has_leaves(e) else None for e in y)
    dy = sign * float(rng.uniform(0.5, 2.0))
    if isinstance(y, np.float32) or rtype == numba.float32:
        return np.float32(dy)
    return dy


def _cotangent_words(dy):
    if isinstance(dy, np.ndarray):
        return f"a random cotangent of shape {dy.shape} (seed {_SEED})"
    if isinstance(dy, tuple):
        return f"a random cotangent {dy!r:.120} (seed {_SEED})"
    return f"the cotangent dy = {float(dy)!r}"


def _inner(dy, y):
    """``<dy, y>`` in float64: the sum over the float leaves of the products."""
    if dy is None:
        return 0.0
    if isinstance(y, np.ndarray):
        return float(np.sum(np.asarray(dy, dtype=np.float64) * np.asarray(y, dtype=np.float64)))
    if _is_struct(y) or _is_tuple(y):
        return float(sum(_inner(d, e) for d, e in zip(dy, y)))
    return float(dy) * float(y)


def _close(y, primal):
    if (_is_struct(y) or _is_tuple(y)) and type(primal) is type(y) and len(primal) == len(y):
        return all(_close(a, b) for a, b in zip(y, primal))
    try:
        return bool(np.allclose(y, primal, rtol=1e-12, atol=0.0))
    except (TypeError, ValueError):
        return False


def _zeros_for_none(arg, t):
    """The rule's tangent with None (zero, by the rule convention) for a float leaf, an array or
    a struct replaced by zeros of the argument's structure."""
    if not _has_leaves(arg):
        return t
    if t is None:
        if isinstance(arg, np.ndarray):
            return np.zeros_like(arg)
        if _is_float_arg(arg):
            return type(arg)(0.0) if isinstance(arg, np.floating) else 0.0
        parts = [_zeros_for_none(a, None) for a in arg]
        return Tangent[type(arg)](*parts) if _is_struct(arg) else tuple(parts)
    if _is_struct(arg) and type(t) is Tangent[type(arg)]:
        return type(t)(*(_zeros_for_none(a, u) for a, u in zip(arg, t)))
    if _is_tuple(arg) and type(t) is tuple and len(t) == len(arg):
        return tuple(_zeros_for_none(a, u) for a, u in zip(arg, t))
    return t
