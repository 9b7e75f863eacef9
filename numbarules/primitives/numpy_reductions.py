"""Rules for NumPy's reductions in compiled code (nr.rrule), of a whole array or along axes.

``sum``, ``mean``, ``max``, ``min``, ``prod``, ``cumsum``, ``var`` and ``std``. The pullbacks are
loops of their own where formulas would make array temporaries; most view a C-contiguous array
as ``(before, along, after)`` (``arrays.blocks``), so that one loop nest serves every rank and
axis.

Conventions at ties follow JAX: ``np.max`` / ``np.min`` split the cotangent equally among the
elements equal to the result (all of a slice's NaNs when the result is NaN).
"""

import numpy as np

from numba import literal_unroll, types
from numba.extending import overload, register_jitable

from ..lattice import AbstractFloat, Any, Array, Integer, Vector
from ..rules import rrule
from .arrays import blocks


# --- helpers: one loop each where formulas would make array temporaries ----------------------

@register_jitable
def spread(dy, shape, axis, scale):
    """The adjoint of a sum along ``axis``: ``dy * scale`` repeated along it, in ``shape``."""
    before, n, after = blocks(shape, axis)
    d2 = np.ascontiguousarray(dy).reshape((before, after))
    out = np.empty((before, n, after), d2.dtype)
    for p in range(before):
        for k in range(n):
            for q in range(after):
                out[p, k, q] = d2[p, q] * scale
    return out.reshape(shape)


def axes_mask(axes, ndim):
    """Which of ``ndim`` axes ``axes`` names: None (all of them), an int or a tuple of ints,
    negative ones counting from the end (compiled code only: see the overload)."""
    mask = np.zeros(ndim, np.bool_)
    for a in range(ndim) if axes is None else np.atleast_1d(axes):
        mask[a] = True
    return mask


@overload(axes_mask)
def _axes_mask(axes, ndim):
    if isinstance(axes, (types.NoneType, types.Omitted)):
        return lambda axes, ndim: np.ones(ndim, np.bool_)
    if isinstance(axes, types.Integer):
        def one(axes, ndim):
            mask = np.zeros(ndim, np.bool_)
            mask[checked_axis(axes, ndim)] = True
            return mask
        return one
    if isinstance(axes, types.BaseTuple) and all(isinstance(t, types.Integer) for t in axes):
        def several(axes, ndim):
            mask = np.zeros(ndim, np.bool_)
            for a in literal_unroll(axes):
                mask[checked_axis(a, ndim)] = True
            return mask
        return several
    return None


@register_jitable
def checked_axis(a, ndim):
    if a < -ndim or a >= ndim:
        raise ValueError("axis is out of bounds for the array's dimension")
    return a + ndim if a < 0 else a


@register_jitable
def spread_axes(dy, shape, axes, dtype):
    """The adjoint of a sum over ``axes`` (None, an int or a tuple of ints): ``dy`` repeated
    along them."""
    ndim = len(shape)
    summed = axes_mask(axes, ndim)
    # The stride of each axis of x in dy (0 along a summed axis), C order.
    stride = np.zeros(ndim, np.int64)
    s = 1
    for k in range(ndim - 1, -1, -1):
        if not summed[k]:
            stride[k] = s
            s *= shape[k]
    d = np.asarray(dy).ravel()
    out = np.empty(shape, dtype)
    o = out.reshape(out.size)
    index = np.zeros(ndim, np.int64)
    j = 0
    for i in range(o.size):
        o[i] = d[j]
        k = ndim - 1            # the next multi-index, last axis fastest
        while k >= 0:
            index[k] += 1
            j += stride[k]
            if index[k] < shape[k]:
                break
            j -= stride[k] * shape[k]
            index[k] = 0
            k -= 1
    return out


@register_jitable
def prod_adjoint(x, dy, axis):
    """d prod / d x along ``axis``: the product of the others, as prefix times suffix products
    (no division, so zeros are exact), times ``dy``."""
    before, n, after = blocks(x.shape, axis)
    x3 = np.ascontiguousarray(x).reshape((before, n, after))
    d2 = np.ascontiguousarray(dy).reshape((before, after))
    out = np.empty((before, n, after), x.dtype)
    for p in range(before):
        for q in range(after):
            acc = x.dtype.type(1)
            for k in range(n):
                out[p, k, q] = acc
                acc *= x3[p, k, q]
            acc = x.dtype.type(1)
            for k in range(n - 1, -1, -1):
                out[p, k, q] *= acc * d2[p, q]
                acc *= x3[p, k, q]
    return out.reshape(x.shape)


@register_jitable
def extreme_adjoint(x, y, dy, axis):
    """The adjoint of ``max``/``min`` along ``axis`` with result ``y``: each slice's cotangent
    split equally among its elements equal to the result (its NaNs when the result is NaN)."""
    before, n, after = blocks(x.shape, axis)
    x3 = np.ascontiguousarray(x).reshape((before, n, after))
    y2 = np.ascontiguousarray(y).reshape((before, after))
    d2 = np.ascontiguousarray(dy).reshape((before, after))
    count = np.zeros((before, after), np.int64)
    for p in range(before):
        for k in range(n):
            for q in range(after):
                v, m = x3[p, k, q], y2[p, q]
                if v == m or (m != m and v != v):
                    count[p, q] += 1
    out = np.zeros((before, n, after), x.dtype)
    for p in range(before):
        for k in range(n):
            for q in range(after):
                v, m = x3[p, k, q], y2[p, q]
                if v == m or (m != m and v != v):
                    out[p, k, q] = d2[p, q] / count[p, q]
    return out.reshape(x.shape)


@register_jitable
def reverse_cumsum(dy, axis):
    """The adjoint of ``cumsum`` along ``axis``: sums of ``dy`` from each position to the end."""
    before, n, after = blocks(dy.shape, axis)
    d3 = np.ascontiguousarray(dy).reshape((before, n, after))
    out = np.empty((before, n, after), d3.dtype)
    for p in range(before):
        for k in range(n - 1, -1, -1):
            for q in range(after):
                out[p, k, q] = d3[p, k, q] + (out[p, k + 1, q] if k + 1 < n else 0.0)
    return out.reshape(dy.shape)


@register_jitable
def centered_adjoint(x, scale):
    """``scale * (x - mean(x))`` in one pass (the adjoint of var and std, up to the scale)."""
    m = np.mean(x)
    b = np.ascontiguousarray(x).ravel()
    out = np.empty(x.shape, x.dtype)
    o = out.reshape(out.size)
    for i in range(o.size):
        o[i] = scale * (b[i] - m)
    return out


# --- reductions ------------------------------------------------------------------------------

@rrule(np.sum, Array[AbstractFloat])
def _sum(x):
    shape = x.shape

    def sum_pullback(dy):
        return (np.full(shape, dy),)
    return np.sum(x), sum_pullback


@rrule(np.mean, Array[AbstractFloat])
def _mean(x):
    shape = x.shape
    n = x.size

    def mean_pullback(dy):
        return (np.full(shape, dy / n),)
    return np.mean(x), mean_pullback


@rrule(np.sum, AbstractFloat)
def _sum_scalar(x):
    # np.sum of a reduction's scalar result (a vector reduced along its axis) is the identity
    def sum_scalar_pullback(dy):
        return (dy,)
    return np.sum(x), sum_scalar_pullback


@rrule(np.sum, Vector[AbstractFloat], Integer)
def _sum_vector_axis(x, axis):
    n = x.shape[0]

    def sum_vector_axis_pullback(dy):
        return (np.full(n, dy, x.dtype), None)
    return np.sum(x, axis), sum_vector_axis_pullback


@rrule(np.sum, Array[AbstractFloat], Integer)
def _sum_axis(x, axis):
    shape = x.shape

    def sum_axis_pullback(dy):
        return (spread(dy, shape, axis, 1.0).astype(x.dtype), None)
    return np.sum(x, axis), sum_axis_pullback


# The lattice has no tuple types: ``Any`` stands for the tuple of axes (or None) here; integer
# axes take the more specific rules above, and what Numba's np.sum refuses fails in its forward.
@rrule(np.sum, Array[AbstractFloat], Any)
def _sum_axes(x, axes):
    shape = x.shape

    def sum_axes_pullback(dy):
        return (spread_axes(dy, shape, axes, x.dtype), None)
    return np.sum(x, axes), sum_axes_pullback


@rrule(np.mean, Vector[AbstractFloat], Integer)
def _mean_vector_axis(x, axis):
    n = x.shape[0]

    def mean_vector_axis_pullback(dy):
        return (np.full(n, dy / n, x.dtype), None)
    return np.mean(x, axis), mean_vector_axis_pullback


@rrule(np.mean, Array[AbstractFloat], Integer)
def _mean_axis(x, axis):
    shape = x.shape
    n = blocks(shape, axis)[1]

    def mean_axis_pullback(dy):
        return (spread(dy, shape, axis, 1.0 / n).astype(x.dtype), None)
    return np.mean(x, axis), mean_axis_pullback


@rrule(np.max, Array[AbstractFloat], Integer)
def _max_axis(x, axis):
    y = np.max(x, axis)

    def max_axis_pullback(dy):
        return (extreme_adjoint(x, y, dy, axis), None)
    return y, max_axis_pullback


@rrule(np.min, Array[AbstractFloat], Integer)
def _min_axis(x, axis):
    y = np.min(x, axis)

    def min_axis_pullback(dy):
        return (extreme_adjoint(x, y, dy, axis), None)
    return y, min_axis_pullback


@rrule(np.max, Array[AbstractFloat])
def _max(x):
    y = np.max(x)

    def max_pullback(dy):
        flat = np.ascontiguousarray(x).reshape(x.size)
        return (extreme_adjoint(flat, y, dy, 0).reshape(x.shape),)
    return y, max_pullback


@rrule(np.min, Array[AbstractFloat])
def _min(x):
    y = np.min(x)

    def min_pullback(dy):
        flat = np.ascontiguousarray(x).reshape(x.size)
        return (extreme_adjoint(flat, y, dy, 0).reshape(x.shape),)
    return y, min_pullback


@rrule(np.prod, Array[AbstractFloat], Integer)
def _prod_axis(x, axis):
    def prod_axis_pullback(dy):
        return (prod_adjoint(x, dy, axis), None)
    return np.prod(x, axis), prod_axis_pullback


@rrule(np.prod, Array[AbstractFloat])
def _prod(x):
    def prod_pullback(dy):
        flat = np.ascontiguousarray(x).reshape(x.size)
        return (prod_adjoint(flat, dy, 0).reshape(x.shape),)
    return np.prod(x), prod_pullback


@rrule(np.cumsum, Array[AbstractFloat])
def _cumsum(x):
    # without an axis NumPy sums the flattened array (C order)
    def cumsum_pullback(dy):
        return (reverse_cumsum(dy, 0).reshape(x.shape),)
    return np.cumsum(x), cumsum_pullback


@rrule(np.cumsum, Array[AbstractFloat], Integer)
def _cumsum_axis(x, axis):
    def cumsum_axis_pullback(dy):
        return (reverse_cumsum(dy, axis), None)
    return np.cumsum(x, axis), cumsum_axis_pullback


@rrule(np.var, Array[AbstractFloat])
def _var(x):
    def var_pullback(dy):
        return (centered_adjoint(x, 2.0 * dy / x.size),)
    return np.var(x), var_pullback


@rrule(np.std, Array[AbstractFloat])
def _std(x):
    y = np.std(x)

    def std_pullback(dy):
        # std = sqrt(var): NaN where std == 0, as sqrt'(0) * 0 in JAX
        return (centered_adjoint(x, dy / (x.size * y)),)
    return y, std_pullback
