"""Rules for NumPy's element-wise functions in compiled code (nr.scalar_rule / nr.rrule).

Element-wise functions are scalar rules: their partials are computed element-wise on arrays as
on scalars, and the engine sums a contribution over the axes NumPy broadcast an argument along.
Where the partials would make several array temporaries, float arrays get rrules too whose
pullback is one loop over the scalar partials function (``elementwise_adjoints.py``):
``unary_adjoint`` for unary functions, ``binary_adjoint`` (broadcasting included) for binary
ones. Reductions are in ``numpy_reductions.py``, shape functions and products in
``numpy_shapes.py``, linear algebra in ``linalg.py``.

Conventions at kinks and ties follow JAX:

- ``abs'(0) = 1`` (``select(x >= 0, g, -g)``); ``np.sign`` has a zero derivative;
- ``np.power(x, p)``: ``d/dx`` is 0 where ``p == 0``; ``d/dp`` is ``y * log(x)`` with ``x == 0``
  replaced by 1 (so 0 there);
- ``np.maximum`` / ``np.minimum``: a tie sends half the cotangent to each argument;
  ``np.clip(x, lo, hi)`` is ``minimum(maximum(x, lo), hi)`` (so 0.5 at a bound);
- ``np.remainder(a, b)``: ``1`` and ``-floor(a / b)`` (its jumps are ignored, as everywhere).
"""

import math

import numpy as np

from numba import types
from numba.extending import overload, register_jitable

from ..lattice import AbstractFloat, Array
from ..rules import non_differentiable, rrule, scalar_rule
from . import vmath
from .elementwise_adjoints import binary_adjoint, unary_adjoint, unary_adjoint_result


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


# Its partials are piecewise constant in every argument (0, 0.5 or 1): their derivative is 0
# wherever it exists, which is what a second derivative through np.clip needs (as in JAX).
non_differentiable(clip_partials)


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
