"""Rules for NumPy in compiled code, written with the public nr.scalar_rule / nr.rrule.

Element-wise functions are scalar rules: their partials are computed element-wise on arrays as
on scalars, and the engine sums a contribution over the axes NumPy broadcast an argument along.
Where the partials would make several array temporaries, float arrays get rrules too whose
pullback is one loop over the scalar partials function: ``unary_adjoint`` for unary functions,
``binary_adjoint`` (broadcasting included) for binary ones. Reductions, shape functions and
products are rrules. Linear algebra is in ``linalg.py``.

Conventions at kinks and ties follow JAX:

- ``abs'(0) = 1`` (``select(x >= 0, g, -g)``); ``np.sign`` has a zero derivative;
- ``np.power(x, p)``: ``d/dx`` is 0 where ``p == 0``; ``d/dp`` is ``y * log(x)`` with ``x == 0``
  replaced by 1 (so 0 there);
- ``np.maximum`` / ``np.minimum``: a tie sends half the cotangent to each argument;
  ``np.clip(x, lo, hi)`` is ``minimum(maximum(x, lo), hi)`` (so 0.5 at a bound);
- ``np.max`` / ``np.min``: the cotangent is split equally among the elements equal to the result
  (all of a slice's NaNs when the result is NaN);
- ``np.remainder(a, b)``: ``1`` and ``-floor(a / b)`` (its jumps are ignored, as everywhere).
"""

import math

import numpy as np

from numba import literal_unroll, types
from numba.extending import overload, register_jitable

from ..lattice import AbstractFloat, Any, Array, Integer, Matrix, Vector
from ..rules import non_differentiable, rrule, scalar_rule
from . import vmath
from .arrays import blocks, join, new_axis


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
def unary_adjoint(dy, x, partials):
    """``dy * partials(x)[0]`` element by element in one pass, in x's dtype and shape."""
    if dy.shape != x.shape:
        raise ValueError("element-wise pullback: the tangent's shape differs from the argument's")
    a, b = np.ascontiguousarray(dy).ravel(), np.ascontiguousarray(x).ravel()
    out = np.empty(x.shape, x.dtype)
    o = out.reshape(out.size)
    for i in range(o.size):
        o[i] = a[i] * partials(b[i])[0]
    return out


@register_jitable
def unary_adjoint_result(dy, x, y, partials):
    """``dy * partials(x, y)[0]`` (partials that read the result ``y``), in one pass."""
    if dy.shape != x.shape or y.shape != x.shape:
        raise ValueError("element-wise pullback: the tangent's shape differs from the argument's")
    a, b = np.ascontiguousarray(dy).ravel(), np.ascontiguousarray(x).ravel()
    c = np.ascontiguousarray(y).ravel()
    out = np.empty(x.shape, x.dtype)
    o = out.reshape(out.size)
    for i in range(o.size):
        o[i] = a[i] * partials(b[i], c[i])[0]
    return out


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


@register_jitable
def diagonal_start(shape, k):
    """(row, column, length) of the ``k``-th diagonal of a matrix of ``shape``."""
    r, c = (0, k) if k >= 0 else (-k, 0)
    return r, c, max(0, min(shape[0] - r, shape[1] - c))


@register_jitable
def diagonal_put(values, shape, k, dtype):
    """A zero matrix of ``shape`` with ``values`` on its ``k``-th diagonal (the adjoint of
    ``np.diag(A, k)``)."""
    out = np.zeros(shape, dtype)
    r, c, n = diagonal_start(shape, k)
    for i in range(n):
        out[r + i, c + i] = values[i]
    return out


@register_jitable
def diagonal_fill(value, shape, k, dtype):
    """A zero matrix of ``shape`` with ``value`` along its ``k``-th diagonal (``np.trace``'s
    adjoint)."""
    out = np.zeros(shape, dtype)
    r, c, n = diagonal_start(shape, k)
    for i in range(n):
        out[r + i, c + i] = value
    return out


# --- element-wise functions ------------------------------------------------------------------

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
@register_jitable
def _log1p(x):
    return (1.0 / (1.0 + x),)


@scalar_rule(np.sin)
def _sin(x):
    return (np.cos(x),)


@scalar_rule(np.cos)
def _cos(x):
    return (-np.sin(x),)


@scalar_rule(np.tan, uses_result=True)
@register_jitable
def _tan(x, y):
    return (1.0 + y * y,)


@scalar_rule(np.tanh, uses_result=True)
def _tanh(x, y):
    return (1.0 - y * y,)


# Arrays get their own rules: Numba's np.tanh / np.exp call libm once per element (this llvmlite
# has no SVML), about ten times slower than NumPy; vmath's versions vectorize.
@rrule(np.tanh, Array[AbstractFloat])
def _tanh_array(x):
    y = vmath.tanh(x)

    def tanh_pullback(dy):
        return (vmath.tanh_adjoint(dy, y),)
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
@register_jitable
def _abs(x):
    return (1.0 if x >= 0 else -1.0,)     # abs'(0) = 1, as JAX


@scalar_rule(np.where)
def _where(c, a, b):
    return (0.0, c * 1.0, (c == 0) * 1.0)


def clip_partials(x, lo, hi):
    """The partials of ``np.clip(x, lo, hi)``, either bound None (compiled code: the overload)."""
    raise NotImplementedError("clip_partials runs in compiled code")


@overload(clip_partials)
def _clip_partials(x, lo, hi):
    # minimum(maximum(x, lo), hi), as JAX: each comparison splits a tie 0.5 / 0.5
    no_lo, no_hi = isinstance(lo, types.NoneType), isinstance(hi, types.NoneType)
    if no_lo and no_hi:
        return None                 # NumPy refuses two missing bounds too
    if no_lo:
        return lambda x, lo, hi: ((x < hi) * 0.5 + (x <= hi) * 0.5, 0.0,
                                  (hi < x) * 0.5 + (hi <= x) * 0.5)
    if no_hi:
        return lambda x, lo, hi: ((x > lo) * 0.5 + (x >= lo) * 0.5,
                                  (lo > x) * 0.5 + (lo >= x) * 0.5, 0.0)

    def both(x, lo, hi):
        m = np.maximum(x, lo)
        below = (m < hi) * 0.5 + (m <= hi) * 0.5
        return (below * ((x > lo) * 0.5 + (x >= lo) * 0.5),
                below * ((lo > x) * 0.5 + (lo >= x) * 0.5),
                (hi < m) * 0.5 + (hi <= m) * 0.5)
    return both


@scalar_rule(np.clip)
def _clip(x, lo, hi):
    return clip_partials(x, lo, hi)


@register_jitable
def clip_adjoint(x, lo, hi, dy):
    """The three tangents of ``np.clip(x, lo, hi)`` for scalar bounds, in one pass."""
    if dy.shape != x.shape:
        raise ValueError("clip pullback: the tangent's shape differs from the argument's")
    a, b = np.ascontiguousarray(x).ravel(), np.ascontiguousarray(dy).ravel()
    out = np.empty(x.shape, x.dtype)
    o = out.reshape(out.size)
    dlo = 0.0
    dhi = 0.0
    for i in range(o.size):
        v, g = a[i], b[i]
        m = v if v > lo or v != v else lo       # np.maximum(v, lo): NaN propagates
        below = 1.0 if m < hi else (0.5 if m == hi else 0.0)
        gm = g * below
        o[i] = gm * (1.0 if v > lo else (0.5 if v == lo else 0.0))
        dlo += gm * (1.0 if lo > v else (0.5 if v == lo else 0.0))
        dhi += g * (1.0 if hi < m else (0.5 if m == hi else 0.0))
    return out, dlo, dhi


@rrule(np.clip, Array[AbstractFloat], AbstractFloat, AbstractFloat)
def _clip_array(x, lo, hi):
    def clip_pullback(dy):
        return clip_adjoint(x, lo, hi, dy)
    return np.clip(x, lo, hi), clip_pullback


@scalar_rule(np.negative)
def _negative(x):
    return (-1.0,)


non_differentiable(np.sign)


@scalar_rule(np.sinh)
def _sinh(x):
    return (np.cosh(x),)


@scalar_rule(np.cosh)
def _cosh(x):
    return (np.sinh(x),)


@scalar_rule(np.degrees)
def _degrees(x):
    return (180.0 / math.pi,)


@scalar_rule(np.radians)
def _radians(x):
    return (math.pi / 180.0,)


@scalar_rule(np.square)
def _square(x):
    return (2.0 * x,)


@scalar_rule(np.exp2, uses_result=True)
def _exp2(x, y):
    return (y * math.log(2.0),)


# --- binary element-wise functions ---------------------------------------------------------
#
# Each has a scalar rule (partials of two scalars and the result; it also serves arrays mixed
# with integers, through the engine's broadcasting) and rrules for float arrays mixed with
# arrays or floats, whose pullback is one loop over the broadcast result (binary_adjoint).

@register_jitable
def broadcast_strides(shape, out_shape):
    """Strides, in elements of a C-ordered array of ``shape``, for walking ``out_shape`` it is
    broadcast to: 0 along the axes it is repeated along (and the axes it lacks)."""
    nd, k = len(out_shape), len(shape)
    stride = np.zeros(nd, np.int64)
    s = 1
    for j in range(k - 1, -1, -1):
        if shape[j] != 1:
            stride[nd - k + j] = s
        s *= shape[j]
    return stride


@register_jitable
def binary_adjoint(dy, a, b, y, partials):
    """The flat tangents (in a's and b's dtypes) of ``y = f(a, b)`` (NumPy broadcasting) for
    cotangent ``dy``: ``dy * partials(a, b, y)``, summed where an operand was broadcast."""
    shape = dy.shape
    g = np.ascontiguousarray(dy).ravel()
    av, bv = np.ascontiguousarray(a).ravel(), np.ascontiguousarray(b).ravel()
    yv = np.ascontiguousarray(y).ravel()
    if a.shape == shape and b.shape == shape:
        da, db = np.empty(av.size, a.dtype), np.empty(bv.size, b.dtype)
        for i in range(g.size):
            pa, pb = partials(av[i], bv[i], yv[i])
            da[i] = g[i] * pa
            db[i] = g[i] * pb
        return da, db
    nd = len(shape)
    sa, sb = broadcast_strides(a.shape, shape), broadcast_strides(b.shape, shape)
    da, db = np.zeros(av.size, a.dtype), np.zeros(bv.size, b.dtype)
    index = np.zeros(nd, np.int64)
    ia = 0
    ib = 0
    for i in range(g.size):
        pa, pb = partials(av[ia], bv[ib], yv[i])
        da[ia] += g[i] * pa
        db[ib] += g[i] * pb
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
    return da, db


def broadcasting_rules(f, partials):
    """Register the rrules of binary element-wise ``f`` for a float array with a float array, a
    float array with a float, and a float with a float array."""
    @rrule(f, Array[AbstractFloat], Array[AbstractFloat])
    def _arrays(a, b):
        y = f(a, b)

        def arrays_pullback(dy):
            da, db = binary_adjoint(dy, a, b, y, partials)
            return (da.reshape(a.shape), db.reshape(b.shape))
        return y, arrays_pullback

    @rrule(f, Array[AbstractFloat], AbstractFloat)
    def _array_scalar(a, b):
        y = f(a, b)

        def array_scalar_pullback(dy):
            da, db = binary_adjoint(dy, a, np.asarray(b), y, partials)
            return (da.reshape(a.shape), db[0])
        return y, array_scalar_pullback

    @rrule(f, AbstractFloat, Array[AbstractFloat])
    def _scalar_array(a, b):
        y = f(a, b)

        def scalar_array_pullback(dy):
            da, db = binary_adjoint(dy, np.asarray(a), b, y, partials)
            return (da[0], db.reshape(b.shape))
        return y, scalar_array_pullback


@scalar_rule(np.multiply, uses_result=True)
@register_jitable
def _multiply(a, b, y):
    return (b, a)


@scalar_rule(np.divide, uses_result=True)      # np.true_divide is np.divide
@register_jitable
def _divide(a, b, y):
    r = 1.0 / b
    return (r, -y * r)


@scalar_rule(np.power, uses_result=True)
@register_jitable
def _power(x, p, y):
    # JAX: d/dx is 0 where p == 0 (x ** 0 is 1 there, never inf), and d/dp reads log(x) with
    # x == 0 replaced by 1 (so it is 0 there). No np.where: these serve scalars too.
    return (p * x ** (p - 1.0 + (p == 0)), y * np.log(x + (x == 0)))


@scalar_rule(np.maximum, uses_result=True)
@register_jitable
def _maximum(a, b, y):
    # a tie sends half to each (JAX); a NaN operand gets none of it
    return ((a > b) * 0.5 + (a >= b) * 0.5, (b > a) * 0.5 + (b >= a) * 0.5)


@scalar_rule(np.minimum, uses_result=True)
@register_jitable
def _minimum(a, b, y):
    return ((a < b) * 0.5 + (a <= b) * 0.5, (b < a) * 0.5 + (b <= a) * 0.5)


@scalar_rule(np.remainder, uses_result=True)   # np.mod is np.remainder
@register_jitable
def _remainder(a, b, y):
    # a - floor(a / b) * b; its jumps (where a / b is an integer) are ignored
    return (1.0, -np.floor(a / b))


@scalar_rule(np.arctan2, uses_result=True)
@register_jitable
def _arctan2(y, x, r):
    r2 = x * x + y * y
    return (x / r2, -y / r2)


@scalar_rule(np.hypot, uses_result=True)
@register_jitable
def _hypot(x, y, r):
    if r == 0.0:  # JAX's convention at the origin, as math.hypot
        return (0.5, 0.5)
    return (x / r, y / r)


for _f, _partials in ((np.multiply, _multiply), (np.divide, _divide), (np.power, _power),
                      (np.maximum, _maximum), (np.minimum, _minimum),
                      (np.remainder, _remainder), (np.arctan2, _arctan2), (np.hypot, _hypot)):
    broadcasting_rules(_f, _partials)


# Unary functions whose derivative is a formula of several operations: the scalar rule serves
# scalars (and is the partials function), a float array gets one loop over it.

@scalar_rule(np.reciprocal, uses_result=True)
@register_jitable
def _reciprocal(x, y):
    return (-(y * y),)


@scalar_rule(np.arcsin)
@register_jitable
def _arcsin(x):
    return (1.0 / np.sqrt(1.0 - x * x),)


@scalar_rule(np.arccos)
@register_jitable
def _arccos(x):
    return (-1.0 / np.sqrt(1.0 - x * x),)


@scalar_rule(np.arctan)
@register_jitable
def _arctan(x):
    return (1.0 / (1.0 + x * x),)


@scalar_rule(np.arcsinh)
@register_jitable
def _arcsinh(x):
    return (1.0 / np.sqrt(x * x + 1.0),)


@scalar_rule(np.arccosh)
@register_jitable
def _arccosh(x):
    return (1.0 / np.sqrt((x - 1.0) * (x + 1.0)),)


@scalar_rule(np.arctanh)
@register_jitable
def _arctanh(x):
    return (1.0 / (1.0 - x * x),)


@scalar_rule(np.log2)
@register_jitable
def _log2(x):
    return (1.0 / (x * math.log(2.0)),)


@scalar_rule(np.log10)
@register_jitable
def _log10(x):
    return (1.0 / (x * math.log(10.0)),)


@scalar_rule(np.cbrt, uses_result=True)
@register_jitable
def _cbrt(x, y):
    return (1.0 / (3.0 * y * y),)


@rrule(np.abs, Array[AbstractFloat])
def _abs_array(x):
    def abs_pullback(dy):
        return (unary_adjoint(dy, x, _abs),)
    return np.abs(x), abs_pullback


@rrule(np.log1p, Array[AbstractFloat])
def _log1p_array(x):
    def log1p_pullback(dy):
        return (unary_adjoint(dy, x, _log1p),)
    return np.log1p(x), log1p_pullback


@rrule(np.tan, Array[AbstractFloat])
def _tan_array(x):
    y = np.tan(x)

    def tan_pullback(dy):
        return (unary_adjoint_result(dy, x, y, _tan),)
    return y, tan_pullback


@rrule(np.reciprocal, Array[AbstractFloat])
def _reciprocal_array(x):
    y = np.reciprocal(x)

    def reciprocal_pullback(dy):
        return (unary_adjoint_result(dy, x, y, _reciprocal),)
    return y, reciprocal_pullback


@rrule(np.arcsin, Array[AbstractFloat])
def _arcsin_array(x):
    def arcsin_pullback(dy):
        return (unary_adjoint(dy, x, _arcsin),)
    return np.arcsin(x), arcsin_pullback


@rrule(np.arccos, Array[AbstractFloat])
def _arccos_array(x):
    def arccos_pullback(dy):
        return (unary_adjoint(dy, x, _arccos),)
    return np.arccos(x), arccos_pullback


@rrule(np.arctan, Array[AbstractFloat])
def _arctan_array(x):
    def arctan_pullback(dy):
        return (unary_adjoint(dy, x, _arctan),)
    return np.arctan(x), arctan_pullback


@rrule(np.arcsinh, Array[AbstractFloat])
def _arcsinh_array(x):
    def arcsinh_pullback(dy):
        return (unary_adjoint(dy, x, _arcsinh),)
    return np.arcsinh(x), arcsinh_pullback


@rrule(np.arccosh, Array[AbstractFloat])
def _arccosh_array(x):
    def arccosh_pullback(dy):
        return (unary_adjoint(dy, x, _arccosh),)
    return np.arccosh(x), arccosh_pullback


@rrule(np.arctanh, Array[AbstractFloat])
def _arctanh_array(x):
    def arctanh_pullback(dy):
        return (unary_adjoint(dy, x, _arctanh),)
    return np.arctanh(x), arctanh_pullback


@rrule(np.log2, Array[AbstractFloat])
def _log2_array(x):
    def log2_pullback(dy):
        return (unary_adjoint(dy, x, _log2),)
    return np.log2(x), log2_pullback


@rrule(np.log10, Array[AbstractFloat])
def _log10_array(x):
    def log10_pullback(dy):
        return (unary_adjoint(dy, x, _log10),)
    return np.log10(x), log10_pullback


@rrule(np.cbrt, Array[AbstractFloat])
def _cbrt_array(x):
    y = np.cbrt(x)

    def cbrt_pullback(dy):
        return (unary_adjoint_result(dy, x, y, _cbrt),)
    return y, cbrt_pullback


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


# --- products --------------------------------------------------------------------------------

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


@rrule(np.outer, Vector[AbstractFloat], Vector[AbstractFloat])
def _outer(a, b):
    def outer_pullback(dy):
        return (dy @ b, dy.T @ a)
    return np.outer(a, b), outer_pullback


# --- shape functions -------------------------------------------------------------------------

@rrule(new_axis, Array[AbstractFloat], Integer)
def _new_axis(x, axis):
    shape = x.shape

    def new_axis_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape), None)
    return new_axis(x, axis), new_axis_pullback


@rrule(np.expand_dims, Array[AbstractFloat], Integer)
def _expand_dims(x, axis):
    shape = x.shape

    def expand_dims_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape), None)
    return np.expand_dims(x, axis), expand_dims_pullback


@rrule(np.atleast_1d, Array[AbstractFloat])
def _atleast_1d(x):
    shape = x.shape

    def atleast_1d_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape),)
    return np.atleast_1d(x), atleast_1d_pullback


@rrule(np.atleast_2d, Array[AbstractFloat])
def _atleast_2d(x):
    shape = x.shape

    def atleast_2d_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape),)
    return np.atleast_2d(x), atleast_2d_pullback


@rrule(np.atleast_3d, Array[AbstractFloat])
def _atleast_3d(x):
    shape = x.shape

    def atleast_3d_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape),)
    return np.atleast_3d(x), atleast_3d_pullback


@rrule(np.flipud, Array[AbstractFloat])
def _flipud(x):
    def flipud_pullback(dy):
        return (np.flipud(dy),)
    return np.flipud(x), flipud_pullback


@rrule(np.fliplr, Array[AbstractFloat])
def _fliplr(x):
    def fliplr_pullback(dy):
        return (np.fliplr(dy),)
    return np.fliplr(x), fliplr_pullback


@rrule(np.diag, Vector[AbstractFloat])
def _diag_vector(v):
    def diag_vector_pullback(dy):
        return (np.diag(dy),)
    return np.diag(v), diag_vector_pullback


@rrule(np.diag, Vector[AbstractFloat], Integer)
def _diag_vector_k(v, k):
    def diag_vector_k_pullback(dy):
        return (np.diag(dy, k), None)
    return np.diag(v, k), diag_vector_k_pullback


@rrule(np.diag, Matrix[AbstractFloat])
def _diag_matrix(A):
    shape = A.shape

    def diag_matrix_pullback(dy):
        return (diagonal_put(dy, shape, 0, A.dtype),)
    return np.diag(A), diag_matrix_pullback


@rrule(np.diag, Matrix[AbstractFloat], Integer)
def _diag_matrix_k(A, k):
    shape = A.shape

    def diag_matrix_k_pullback(dy):
        return (diagonal_put(dy, shape, k, A.dtype), None)
    return np.diag(A, k), diag_matrix_k_pullback


@rrule(np.trace, Matrix[AbstractFloat])
def _trace(A):
    shape = A.shape

    def trace_pullback(dy):
        return (diagonal_fill(dy, shape, 0, A.dtype),)
    return np.trace(A), trace_pullback


@rrule(np.trace, Matrix[AbstractFloat], Integer)
def _trace_offset(A, k):
    shape = A.shape

    def trace_offset_pullback(dy):
        return (diagonal_fill(dy, shape, k, A.dtype), None)
    return np.trace(A, k), trace_offset_pullback


# np.triu / np.tril keep or zero each element by its position: the same mask on the cotangent.
# A vector is broadcast to a square matrix first (its rows), so its adjoint sums the rows.

@rrule(np.triu, Array[AbstractFloat])
def _triu(x):
    def triu_pullback(dy):
        return (np.triu(dy),)
    return np.triu(x), triu_pullback


@rrule(np.triu, Array[AbstractFloat], Integer)
def _triu_k(x, k):
    def triu_k_pullback(dy):
        return (np.triu(dy, k), None)
    return np.triu(x, k), triu_k_pullback


@rrule(np.tril, Array[AbstractFloat])
def _tril(x):
    def tril_pullback(dy):
        return (np.tril(dy),)
    return np.tril(x), tril_pullback


@rrule(np.tril, Array[AbstractFloat], Integer)
def _tril_k(x, k):
    def tril_k_pullback(dy):
        return (np.tril(dy, k), None)
    return np.tril(x, k), tril_k_pullback


@rrule(np.triu, Vector[AbstractFloat])
def _triu_vector(x):
    def triu_vector_pullback(dy):
        return (np.sum(np.triu(dy), 0),)
    return np.triu(x), triu_vector_pullback


@rrule(np.triu, Vector[AbstractFloat], Integer)
def _triu_vector_k(x, k):
    def triu_vector_k_pullback(dy):
        return (np.sum(np.triu(dy, k), 0), None)
    return np.triu(x, k), triu_vector_k_pullback


@rrule(np.tril, Vector[AbstractFloat])
def _tril_vector(x):
    def tril_vector_pullback(dy):
        return (np.sum(np.tril(dy), 0),)
    return np.tril(x), tril_vector_pullback


@rrule(np.tril, Vector[AbstractFloat], Integer)
def _tril_vector_k(x, k):
    def tril_vector_k_pullback(dy):
        return (np.sum(np.tril(dy, k), 0), None)
    return np.tril(x, k), tril_vector_k_pullback
