"""Compiled helpers of the tangent kernels (``ad/pushforward.py``).

``_spread(d, like)``  a new array of ``like``'s shape holding ``d`` broadcast (a scalar or an
                      array): the tangent of a result NumPy broadcast an operand up to
``_fit(e, like)``     ``e`` itself when it already has ``like``'s shape, else ``_spread``
``_vdot(g, d)``       the sum of ``g * d`` (a reverse rule's gradient dotted with a tangent)
``_binary_tangent``, ``_ternary_tangent``: an element-wise function's tangent on arrays
                      from its scalar rule's partials, in one loop (a unary one's loop is
                      written into the kernel: pushforward.elementwise_loop)

Overloads of numbarules' own functions (nothing another Numba program calls). The copies go
through ``np.broadcast_to(...).copy()``, not ``out[...] = d``: Numba's slice assignment from an
array compiles its shape-mismatch message, about 2 s on first use in a process.
"""

import numpy as np
from numba import types
from numba.extending import overload, register_jitable

from ..primitives.elementwise_adjoints import broadcast_strides


def _spread(d, like):
    return np.broadcast_to(d, np.shape(like)).copy()


def _fit(e, like):
    return e if np.shape(e) == np.shape(like) else _spread(e, like)


def _vdot(g, d):
    return float(np.sum(np.multiply(g, d))) if g is not None else 0.0


@overload(_spread)
def _spread_impl(d, like):
    if isinstance(d, (types.Float, types.Integer)):
        return lambda d, like: np.full(like.shape, d, like.dtype)
    if isinstance(d, types.Array):
        return lambda d, like: np.broadcast_to(d, like.shape).copy()
    return None


@overload(_fit)
def _fit_impl(e, like):
    if isinstance(e, types.Array) and isinstance(like, types.Array) and e.ndim == like.ndim:
        def fit(e, like):
            if e.shape == like.shape:
                return e
            return np.broadcast_to(e, like.shape).copy()
        return fit
    return lambda e, like: _spread(e, like)


@overload(_vdot)
def _vdot_impl(g, d):
    if isinstance(g, types.NoneType) or isinstance(d, types.NoneType):
        return lambda g, d: 0.0
    if isinstance(g, types.BaseTuple):
        # structs (Tangent[S]) and tuples: the sum over their items, unrolled
        terms = " + ".join(f"_vdot(g[{k}], d[{k}])" for k in range(len(g))) or "0.0"
        ns = {"_vdot": _vdot}
        exec(f"def dot(g, d):\n    return 0.0 + {terms}\n", ns)  # noqa: S102
        return ns["dot"]
    if isinstance(g, types.Array):
        def dot(g, d):
            s = 0.0
            gf = g.ravel()
            df = d.ravel()
            for i in range(gf.size):
                s += gf[i] * df[i]
            return s
        return dot
    return lambda g, d: g * d


HELPERS = {"_spread": _spread, "_fit": _fit, "_vdot": _vdot}


# --- element-wise functions of arrays: the scalar rule's partials, one pass ------------------
#
# A scalar rule's partials are written for scalars (``1.0 if x >= 0 else -1.0``), so on arrays
# they are evaluated element by element: one loop over the result, each operand walked with
# its broadcast strides, the tangent summed from the operands that have one (None: no tangent;
# Numba prunes the branches of an argument typed None). ``partials`` takes the result last
# (``with_result`` adapts a rule whose partials do not).

@register_jitable
def _flat(v):
    return np.ascontiguousarray(np.asarray(v)).ravel()


@register_jitable
def binary_tangent(a, b, y, da, db, partials):
    shape = y.shape
    nd = len(shape)
    av, bv, yv = _flat(a), _flat(b), _flat(y)
    sa = broadcast_strides(np.asarray(a).shape, shape)
    sb = broadcast_strides(np.asarray(b).shape, shape)
    dav = _flat(da) if da is not None else av
    dbv = _flat(db) if db is not None else bv
    out = np.empty(shape, y.dtype)
    o = out.reshape(out.size)
    index = np.zeros(nd, np.int64)
    ia = 0
    ib = 0
    for i in range(o.size):
        p = partials(av[ia], bv[ib], yv[i])
        t = 0.0
        if da is not None:
            t += p[0] * dav[ia]
        if db is not None:
            t += p[1] * dbv[ib]
        o[i] = t
        k = nd - 1              # the next multi-index, the last axis fastest
        while k >= 0:
            index[k] += 1
            ia += sa[k]
            ib += sb[k]
            if index[k] < shape[k]:
                break
            ia -= sa[k] * shape[k]
            ib -= sb[k] * shape[k]
            index[k] = 0
            k -= 1
    return out


@register_jitable
def ternary_tangent(a, b, c, y, da, db, dc, partials):
    shape = y.shape
    nd = len(shape)
    av, bv, cv, yv = _flat(a), _flat(b), _flat(c), _flat(y)
    sa = broadcast_strides(np.asarray(a).shape, shape)
    sb = broadcast_strides(np.asarray(b).shape, shape)
    sc = broadcast_strides(np.asarray(c).shape, shape)
    dav = _flat(da) if da is not None else av
    dbv = _flat(db) if db is not None else bv
    dcv = _flat(dc) if dc is not None else cv
    out = np.empty(shape, y.dtype)
    o = out.reshape(out.size)
    index = np.zeros(nd, np.int64)
    ia = 0
    ib = 0
    ic = 0
    for i in range(o.size):
        p = partials(av[ia], bv[ib], cv[ic], yv[i])
        t = 0.0
        if da is not None:
            t += p[0] * dav[ia]
        if db is not None:
            t += p[1] * dbv[ib]
        if dc is not None:
            t += p[2] * dcv[ic]
        o[i] = t
        k = nd - 1
        while k >= 0:
            index[k] += 1
            ia += sa[k]
            ib += sb[k]
            ic += sc[k]
            if index[k] < shape[k]:
                break
            ia -= sa[k] * shape[k]
            ib -= sb[k] * shape[k]
            ic -= sc[k] * shape[k]
            index[k] = 0
            k -= 1
    return out


HELPERS.update(_binary_tangent=binary_tangent, _ternary_tangent=ternary_tangent)

# The reverse mode differentiating a tangent kernel (nr.hvp) refuses these by name (targets):
# their partials argument is a function value, which it cannot follow.
for _helper in (binary_tangent, ternary_tangent):
    _helper._nr_refusal = (
        "second derivatives (nr.hvp, nr.hessian, nr.grad of a gradient) through a NumPy "
        "element-wise function of two or three arrays (np.maximum(x, y), np.power(x, p), ...) "
        "are not supported yet. Hint: write that step with a loop over the elements.")


_ADAPTED = {}


def with_result(partials, n):
    """``partials`` (compiled, of ``n`` arguments) as a function that also takes the result,
    last, and ignores it: the helpers above call every rule's partials that way."""
    key = (id(partials), n)
    hit = _ADAPTED.get(key)
    if hit is None or hit[0] is not partials:
        import numba
        params = ", ".join(f"a{i}" for i in range(n))
        ns = {"_partials": partials}
        exec(f"def adapted({params}, y):\n    return _partials({params})\n", ns)  # noqa: S102
        hit = _ADAPTED[key] = (partials, numba.njit(ns["adapted"]))
    return hit[1]


def _register_reverse_rules():
    """Reverse rules for the helpers a tangent kernel calls, so that the reverse mode can
    differentiate the kernel (nr.hvp): broadcasting's adjoint sums over the broadcast axes."""
    from ..lattice import AbstractFloat, Any, Array
    from ..rules import rrule
    from .runtime import _ub

    @rrule(_spread, Any, Any)
    def _spread_rule(d, like):
        def spread_pullback(dy):
            return (_ub(dy, d), None)
        return _spread(d, like), spread_pullback

    @rrule(_fit, Any, Any)
    def _fit_rule(e, like):
        def fit_pullback(dy):
            return (_ub(dy, e), None)
        return _fit(e, like), fit_pullback

    @rrule(_vdot, Array[AbstractFloat], Array[AbstractFloat])
    def _vdot_arrays(g, d):
        def vdot_pullback(dy):
            return (dy * d, dy * g)
        return _vdot(g, d), vdot_pullback

    @rrule(_vdot, AbstractFloat, AbstractFloat)
    def _vdot_floats(g, d):
        def vdot_floats_pullback(dy):
            return (dy * d, dy * g)
        return _vdot(g, d), vdot_floats_pullback
