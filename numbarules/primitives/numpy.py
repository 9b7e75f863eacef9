"""Rules for NumPy in compiled code, written with the public nr.scalar_rule / nr.rrule.

Element-wise functions are scalar rules: their partials are computed element-wise on arrays as
on scalars, and the engine sums a contribution over the axes NumPy broadcast an argument along.
Reductions and products are rrules.
"""

import numpy as np

from numba.extending import register_jitable

from ..lattice import AbstractFloat, Array, Integer, Vector
from ..rules import rrule, scalar_rule
from . import vmath
from .arrays import blocks, join, new_axis


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


@register_jitable
def scatter(dy, index, shape, axis):
    """The adjoint of picking element ``index`` along ``axis`` (max, min): ``dy`` placed there."""
    before, n, after = blocks(shape, axis)
    d2 = np.ascontiguousarray(dy).reshape((before, after))
    k2 = np.ascontiguousarray(index).reshape((before, after))
    out = np.zeros((before, n, after), d2.dtype)
    for p in range(before):
        for q in range(after):
            out[p, k2[p, q], q] = d2[p, q]
    return out.reshape(shape)


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


@scalar_rule(np.exp, uses_result=True)
def _exp(x, y):
    return (y,)


@scalar_rule(np.expm1, uses_result=True)
def _expm1(x, y):
    return (y + 1.0,)


@scalar_rule(np.log)
def _log(x):
    return (1.0 / x,)


@scalar_rule(np.log1p)
def _log1p(x):
    return (1.0 / (1.0 + x),)


@scalar_rule(np.sin)
def _sin(x):
    return (np.cos(x),)


@scalar_rule(np.cos)
def _cos(x):
    return (-np.sin(x),)


@scalar_rule(np.tan, uses_result=True)
def _tan(x, y):
    return (1.0 + y * y,)


@scalar_rule(np.tanh, uses_result=True)
def _tanh(x, y):
    return (1.0 - y * y,)


@register_jitable
def tanh_adjoint(dy, y):
    """``dy * (1 - y*y)`` in one pass: the expression would make three array temporaries."""
    if dy.shape != y.shape:
        raise ValueError("tanh pullback: the tangent's shape differs from the result's")
    a, b = np.ascontiguousarray(dy).ravel(), np.ascontiguousarray(y).ravel()
    out = np.empty(y.shape, y.dtype)
    o = out.reshape(out.size)
    for i in range(o.size):
        o[i] = a[i] * (1.0 - b[i] * b[i])
    return out


# Arrays get their own rules: Numba's np.tanh / np.exp call libm once per element (this llvmlite
# has no SVML), about ten times slower than NumPy; vmath's versions vectorize.
@rrule(np.tanh, Array[AbstractFloat])
def _tanh_array(x):
    y = vmath.tanh(x)

    def tanh_pullback(dy):
        return (tanh_adjoint(dy, y),)
    return y, tanh_pullback


@rrule(np.exp, Array[AbstractFloat])
def _exp_array(x):
    y = vmath.exp(x)

    def exp_pullback(dy):
        return (dy * y,)
    return y, exp_pullback


@scalar_rule(np.sqrt, uses_result=True)
def _sqrt(x, y):
    return (0.5 / y,)


@scalar_rule(np.abs)
def _abs(x):
    return (np.sign(x),)


@scalar_rule(np.power, uses_result=True)
def _power(x, p, y):
    return (p * x ** (p - 1.0), y * np.log(x))


@scalar_rule(np.maximum)
def _maximum(a, b):
    return ((a >= b) * 1.0, (a < b) * 1.0)


@scalar_rule(np.minimum)
def _minimum(a, b):
    return ((a <= b) * 1.0, (a > b) * 1.0)


@scalar_rule(np.where)
def _where(c, a, b):
    return (0.0, c * 1.0, (c == 0) * 1.0)


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
    k = np.argmax(x, axis)   # ties: the first maximum along the axis, as without an axis

    def max_axis_pullback(dy):
        return (scatter(dy, k, x.shape, axis).astype(x.dtype), None)
    return np.max(x, axis), max_axis_pullback


@rrule(np.min, Array[AbstractFloat], Integer)
def _min_axis(x, axis):
    k = np.argmin(x, axis)

    def min_axis_pullback(dy):
        return (scatter(dy, k, x.shape, axis).astype(x.dtype), None)
    return np.min(x, axis), min_axis_pullback


@rrule(np.prod, Array[AbstractFloat], Integer)
def _prod_axis(x, axis):
    def prod_axis_pullback(dy):
        return (prod_adjoint(x, dy, axis), None)
    return np.prod(x, axis), prod_axis_pullback


@rrule(join, Array[AbstractFloat], Array[AbstractFloat], Integer)
def _concatenate(a, b, axis):
    sa, sb = a.shape, b.shape

    def concatenate_pullback(dy):
        before, n, after = blocks(dy.shape, axis)
        d3 = np.ascontiguousarray(dy).reshape((before, n, after))
        na = blocks(sa, axis)[1]
        da = np.ascontiguousarray(d3[:, :na, :]).reshape(sa)
        db = np.ascontiguousarray(d3[:, na:, :]).reshape(sb)
        return (da.astype(a.dtype), db.astype(b.dtype), None)
    return join(a, b, axis), concatenate_pullback


@rrule(new_axis, Array[AbstractFloat], Integer)
def _expand_dims(x, axis):
    shape = x.shape

    def expand_dims_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape), None)
    return new_axis(x, axis), expand_dims_pullback


@rrule(np.outer, Vector[AbstractFloat], Vector[AbstractFloat])
def _outer(a, b):
    def outer_pullback(dy):
        return (dy @ b, dy.T @ a)
    return np.outer(a, b), outer_pullback


@rrule(np.max, Array[AbstractFloat])
def _max(x):
    shape = x.shape
    k = np.argmax(x)       # ties: the first maximum takes the cotangent (as np.argmax picks it)

    def max_pullback(dy):
        dx = np.zeros(x.size)
        dx[k] = dy
        return (dx.reshape(shape),)
    return np.max(x), max_pullback


@rrule(np.min, Array[AbstractFloat])
def _min(x):
    shape = x.shape
    k = np.argmin(x)

    def min_pullback(dy):
        dx = np.zeros(x.size)
        dx[k] = dy
        return (dx.reshape(shape),)
    return np.min(x), min_pullback


@rrule(np.prod, Vector[AbstractFloat])
def _prod(x):
    n = x.shape[0]

    def prod_pullback(dy):
        # d prod / d x[i] = product of the others: prefix times suffix products (no division,
        # so zeros are exact)
        dx = np.empty(n)
        acc = 1.0
        for i in range(n):
            dx[i] = acc
            acc *= x[i]
        acc = 1.0
        for i in range(n - 1, -1, -1):
            dx[i] *= acc * dy
            acc *= x[i]
        return (dx,)
    return np.prod(x), prod_pullback


@rrule(np.cumsum, Vector[AbstractFloat])
def _cumsum(x):
    def cumsum_pullback(dy):
        return (np.cumsum(dy[::-1])[::-1].copy(),)
    return np.cumsum(x), cumsum_pullback


@rrule(np.linalg.norm, Vector[AbstractFloat])
def _norm(x):
    r = np.linalg.norm(x)

    def norm_pullback(dy):
        return (x * (dy / r),)
    return r, norm_pullback


@scalar_rule(np.clip)
def _clip(x, lo, hi):
    inside = (x >= lo) * (x <= hi) * 1.0
    return (inside, (x < lo) * 1.0, (x > hi) * 1.0)
