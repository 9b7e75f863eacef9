"""Compiled helpers of the tangent kernels (``ad/pushforward.py``).

``_spread(d, like)``  a new array of ``like``'s shape holding ``d`` broadcast (a scalar or an
                      array): the tangent of a result NumPy broadcast an operand up to
``_fit(e, like)``     ``e`` itself when it already has ``like``'s shape, else ``_spread``
``_vdot(g, d)``       the sum of ``g * d`` (a reverse rule's gradient dotted with a tangent)
(An element-wise function's tangent on arrays is a loop written into the kernel from its
scalar rule's partials: pushforward.elementwise_loop.)

Overloads of numbarules' own functions (nothing another Numba program calls). The copies go
through ``np.broadcast_to(...).copy()``, not ``out[...] = d``: Numba's slice assignment from an
array compiles its shape-mismatch message, about 2 s on first use in a process.
"""

import numpy as np
from numba import types
from numba.extending import overload



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
