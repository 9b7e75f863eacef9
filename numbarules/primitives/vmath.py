"""Element-wise ``tanh`` and ``exp`` for arrays that LLVM's loop vectorizer can turn into SIMD.

Why: this llvmlite has no SVML, so Numba's ``np.tanh(a)`` / ``np.exp(a)`` call the scalar libm
function once per element, about ten times slower than NumPy's own SIMD loops. The functions here
use only float arithmetic, comparisons feeding selects, and integer/bit operations, all of which
the vectorizer handles (AVX2/AVX-512), so a loop over an array runs at about NumPy's speed.

Method: Cody-Waite reduction ``x = k ln2 + r`` with ``|r| <= ln2/2``; ``ln2`` is split into a high
part with trailing zero bits (so ``k * LN2_HI`` is exact) and a low part. ``exp(r) - 1`` is a
Taylor polynomial of degree 13 (truncation error below 0.04 ulp); ``2**k`` is built by writing the
exponent bits of a float64. ``exp`` scales in two steps ``2**k1 * 2**k2`` so that neither factor
leaves the normal range and results in the subnormal range are rounded once.
``tanh(a) = expm1(2a) / (expm1(2a) + 2)``. The rounding errors that dominate (of r, of the sums
that build expm1, of the denominator) are carried as low parts and put back to first order.
All constants are derived below at import time with ``decimal``.

Accuracy, max error against 50-digit ``decimal`` values over ~10^5 points: tanh 1.17 ulp, exp
0.75 ulp (0.67 outside the subnormal range); glibc's measure 2.03 and 0.50 on the same points.

The array functions take float64 or float32 arrays of any shape and layout (float32 is computed
in float64) and return a new C-contiguous array of the same shape and dtype. They are ``njit``
functions, so they can be called from Python and from other compiled functions; ``tanh1`` and
``exp1`` are the scalar versions, inlined into the caller's loop (which vectorizes only when the
caller uses ``error_model="numpy"``).
"""

import math
import struct
from decimal import Decimal, localcontext

import numba
import numpy as np
from llvmlite import ir as llir
from numba.core import types
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

from ..numba_glue import njit_unliteral

__all__ = ["tanh", "exp", "tanh1", "exp1", "exp_lane", "tanh_lane"]


def _derive_constants():
    with localcontext() as ctx:
        ctx.prec = 60
        ln2 = Decimal(2).ln()
        bits = struct.unpack("<q", struct.pack("<d", float(ln2)))[0]
        # 11 trailing zero bits: k * LN2_HI stays exact for |k| < 2**11 (exp needs |k| <= 1076).
        ln2_hi = struct.unpack("<d", struct.pack("<q", bits & ~((1 << 11) - 1)))[0]
        ln2_lo = float(ln2 - Decimal(ln2_hi))
        inv_ln2 = float(1 / ln2)
        coeffs = tuple(float(1 / Decimal(math.factorial(n))) for n in range(2, 14))
    return ln2_hi, ln2_lo, inv_ln2, coeffs


LN2_HI, LN2_LO, INV_LN2, _C = _derive_constants()
C2, C3, C4, C5, C6, C7, C8, C9, C10, C11, C12, C13 = _C

# Inputs are clamped before reduction so that k always fits; results then overflow to inf or
# underflow to 0 through ordinary rounding, with no threshold tests of their own.
_EXP_HI = 710.0  # exp(710) > DBL_MAX
_EXP_LO = -746.0  # exp(-746) < 2**-1075, rounds to 0
# tanh(22) rounds to 1.0 in float64, as does everything beyond.
_TANH_SAT = 22.0
# Needs |x / ln2| < 2**51, which the clamps above keep.
_SHIFTER = 1.5 * 2.0**52
_SHIFTER_BITS = struct.unpack("<q", struct.pack("<d", _SHIFTER))[0]


@intrinsic
def _f64_from_bits(typingctx, i):
    """The float64 whose bit pattern is the int64 ``i``."""

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], llir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def _bits_from_f64(typingctx, x):
    """The int64 bit pattern of the float64 ``x``."""

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], llir.IntType(64))

    return types.int64(types.float64), codegen


@numba.njit(inline="always")
def _pow2(k):
    """2.0**k for integer k in the normal exponent range [-1022, 1023]."""
    return _f64_from_bits((k + 1023) << 52)


@numba.njit(inline="always")
def _reduce(x):
    """(k, r, r_lo, h): x = k ln2 + r + r_lo with k an integer, |r| <= ln2/2 (up to rounding
    of x / ln2) and r_lo the rounding error of r; exp(r) - 1 = r + h.

    The parts are kept apart because callers sum them with other terms at less rounding error
    than r + h would carry (r's own rounding alone costs up to 0.6 ulp in tanh); |h| < |r| / 5.
    """
    # Round to nearest by adding 1.5 * 2**52, whose ulp is 1; k is then also in the low bits of
    # the sum. math.floor and int() would convert float to int, which AVX2 does not vectorize.
    t = x * INV_LN2 + _SHIFTER
    kf = t - _SHIFTER
    k = _bits_from_f64(t) - _SHIFTER_BITS
    # Exact: kf * LN2_HI is exact and within a factor 2 of x (Sterbenz).
    r_hi = x - kf * LN2_HI
    r = r_hi - kf * LN2_LO
    r_lo = (r_hi - r) - kf * LN2_LO
    # Estrin's scheme: a dependency chain of 6 operations instead of Horner's 22.
    r2 = r * r
    r4 = r2 * r2
    b0 = (C2 + C3 * r) + (C4 + C5 * r) * r2
    b1 = (C6 + C7 * r) + (C8 + C9 * r) * r2
    b2 = (C10 + C11 * r) + (C12 + C13 * r) * r2
    p = (b0 + b1 * r4) + b2 * (r4 * r4)
    return k, r, r_lo, r2 * p


@numba.njit(inline="always")
def exp1(x):
    """exp(x) for a float64 ``x``, branch-free so that loops calling it vectorize."""
    x = np.float64(x)
    xc = _EXP_HI if x > _EXP_HI else x
    # NaN fails both tests and propagates through the arithmetic (k's bits are then garbage).
    xc = _EXP_LO if xc < _EXP_LO else xc
    k, r, r_lo, h = _reduce(xc)
    # 1 + r + h + r_lo with the rounding error of 1 + r put back (Fast2Sum, |r| < 1); r_lo's
    # own factor exp(r) is 1 to within what matters here.
    s = 1.0 + r
    p = s + ((((1.0 - s) + r) + r_lo) + h)
    k1 = k >> 1
    return (p * _pow2(k1)) * _pow2(k - k1)


@numba.njit(inline="always")
def tanh1(x):
    """tanh(x) for a float64 ``x``, branch-free so that loops calling it vectorize."""
    x = np.float64(x)
    a = abs(x)
    # Also clamps inf; NaN fails the test and propagates.
    a = _TANH_SAT if a > _TANH_SAT else a
    k, r, r_lo, h = _reduce(2.0 * a)
    s = _pow2(k)
    # e = expm1(2a) = s (r + h) + (s - 1) as e_hi + e_lo: the cancellation in the sum (k = 1)
    # would otherwise magnify the rounding of r + h to ~1.5 ulp. Each sum is a Fast2Sum with
    # its larger term first; s - 1 is exact because k <= 64.
    er = r + h
    # expm1(r + r_lo) = er + r_lo exp(r), and exp(r) = 1 + er.
    er_lo = ((r - er) + h) + (r_lo + r_lo * er)
    a_ = s * er
    e = (s - 1.0) + a_
    e_lo = (((s - 1.0) - e) + a_) + s * er_lo
    t = e + 2.0
    big = e if e > 2.0 else 2.0
    small = 2.0 if e > 2.0 else e
    d = (big - t) + small
    # (e + e_lo) / (t + d + e_lo) to first order around q = e / t, with 1 / t = (1 - q) / 2.
    q = e / t
    u = 1.0 - q
    q = q + (e_lo * u - q * d) * (0.5 * u)
    return math.copysign(q, x)


def _require_float_array(x):
    pass


@overload(_require_float_array)
def _require_float_array_typing(x):
    if not (isinstance(x, types.Array) and x.dtype in (types.float32, types.float64)):
        raise TypingError(f"numbarules vmath expects a float32 or float64 array, got {x}")
    return lambda x: None


@numba.njit(inline="always")
def _output_for(x):
    """(out, src, flat): a new C-contiguous array of x's shape and dtype, x's elements as a 1-d
    array, and out as a 1-d view, for a loop ``flat[i] = f(src[i])``.

    No contiguous copy of x when it is C-contiguous: a second large temporary per call made glibc
    hand its memory back and page-fault it in again (3x slower). Otherwise the copy is the output,
    computed in place. x.copy() rather than out[...] = x: slice assignment from an array compiles
    Numba's shape-mismatch message on first use, seconds per process."""
    _require_float_array(x)
    if x.flags.c_contiguous:
        out = np.empty(x.shape, x.dtype)
        src = np.ascontiguousarray(x).ravel()  # a view: no copy for C-contiguous x
    else:
        out = x.copy()
        src = out.ravel()
    return out, src, out.reshape(out.size)


# The two array functions are written out rather than made by one factory: Numba's disk cache
# (cache=True) keys a closure on its cells' contents, which differ in every process, so a closure
# would never be loaded from it. One loop each: the scalar function is inlined, and a second copy
# of it doubles the compile time. error_model="numpy": Python's would guard each division with a
# ZeroDivisionError branch, which stops the loop from vectorizing. cache=True: these are library
# code, the same in every process; the first process that uses a signature compiles it (about a
# second) and later ones load it (docs/numba-internals.md), at the same NUMBA_OPT only.

@njit_unliteral(error_model="numpy", cache=True)
def tanh(x):
    """Element-wise tanh of a float32 or float64 array of any shape and layout (0-d too).

    Returns a new C-contiguous array of x's shape and dtype; float32 is computed in float64."""
    out, src, flat = _output_for(x)
    for i in range(flat.size):
        flat[i] = tanh1(src[i])
    return out


@njit_unliteral(error_model="numpy", cache=True)
def tanh_adjoint(dy, y):
    """``dy * (1 - y*y)`` in one pass (the pullback of ``tanh``): the expression would make
    three array temporaries. Library code like the two functions around it, from Numba's disk
    cache: compiled in a process it was 0.3-0.5 s of the MLP's first gradient."""
    if dy.shape != y.shape:
        raise ValueError("tanh pullback: the tangent's shape differs from the result's")
    a, b = np.ascontiguousarray(dy).ravel(), np.ascontiguousarray(y).ravel()
    out = np.empty(y.shape, y.dtype)
    o = out.reshape(out.size)
    for i in range(o.size):
        o[i] = a[i] * (1.0 - b[i] * b[i])
    return out


@njit_unliteral(error_model="numpy", cache=True)
def exp(x):
    """Element-wise exp of a float32 or float64 array of any shape and layout (0-d too).

    Returns a new C-contiguous array of x's shape and dtype; float32 is computed in float64."""
    out, src, flat = _output_for(x)
    for i in range(flat.size):
        flat[i] = exp1(src[i])
    return out


# The scalar functions as separately compiled functions, for the generated kernels of a
# ``fastmath=True`` gradient (ad/fastmath.py). Not inlined by Numba: the kernels are compiled
# with Numba's fastmath={"reassoc"}, which would flag the inlined arithmetic too and let LLVM
# reorder the compensated sums above (Fast2Sum's ``(1.0 - s) + r`` is 0 reassociated). LLVM
# inlines them into the kernel's loops with their own, unflagged, instructions, and the loops
# vectorise. error_model="numpy": tanh1's division must not carry a ZeroDivisionError branch.
# From Numba's disk cache, as the array functions above.

@njit_unliteral(error_model="numpy", cache=True)
def exp_lane(x):
    """``exp1`` compiled on its own (see above)."""
    return exp1(x)


@njit_unliteral(error_model="numpy", cache=True)
def tanh_lane(x):
    """``tanh1`` compiled on its own (see above)."""
    return tanh1(x)
