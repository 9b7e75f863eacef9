"""Small compiled helpers the generated kernels call: trip counts, tapes, zero adjoints.

Copies are written as loops or memcpy, not slice assignments: Numba's slice assignment from an
array compiles its shape-mismatch error message (f-strings over tuples) on first use in a
process, which costs seconds (docs/numba-internals.md, "What compiling costs").
"""

import math

import numba
import numba.typed
import numpy as np
from numba import types
from numba.extending import overload

from ..errors import TangentShapeError
from ..numba_glue import intrinsics, njit_unliteral
from .revolve import _rv_next, _rv_start


@numba.njit(inline="always")
def _trip(start, stop, step):
    """len(range(start, stop, step)), the trip count the reverse loop replays."""
    # conditional expressions, not max(0, n): Numba's max is an @overload compiled on its own
    if step > 0:
        n = (stop - start + step - 1) // step
    else:
        n = (start - stop - step - 1) // (-step)
    return n if n > 0 else 0


# The tapes' helpers and the adjoints' zeros are intrinsics Numba emits inline in the kernel
# that calls them (numba_glue.intrinsics): as NumPy calls, @njit helpers or @overloads each was
# a dispatcher compiled per type and per process before the first gradient (docs/numba-internals.md, "What compiling costs").
_tape = intrinsics.new_tape              # _tape(16, _np.float64): np.empty(16, np.float64)
_reserve = intrinsics.reserve_tape       # _reserve(t, used, more): t, or a copy twice as long
_zeros_like = intrinsics.zeros_like      # _zeros_like(x): np.zeros_like(x)
_empty_like = intrinsics.empty_like      # _empty_like(x): np.empty_like(x) (ad/gather.py's fresh)
_zero_part = intrinsics.zero_part        # _zero_part(a, c, n): part c of n of a's bytes zeroed
# numba.get_num_threads() as an int64 (an int32 there: a chunk count computed from it is one type
# wherever it is assigned, so the driver's typing compiles each outlined chunk function, which
# it types as it meets it, for one set of types), and code that calls it can be stored on disk
_num_threads = intrinsics.num_threads


_push_view = intrinsics.push_view      # _push_view(t, used, a): t grown, a's elements after used
_restore = intrinsics.restore_view     # _restore(a, t, used): a's elements back from t; used - a.size


@numba.njit(inline="always")
def _iadd(acc, x):
    """acc += x in place (an array field of an immutable Tangent)."""
    acc += x


def _cast(x, dtype):
    """``x`` as an array of ``dtype``, copied only when its dtype differs (compiled code)."""
    return np.asarray(x, dtype)


@overload(_cast)
def _cast_impl(x, dtype):
    if isinstance(x, types.Array) and x.dtype == getattr(dtype, "instance_type", None):
        return lambda x, dtype: x
    return lambda x, dtype: x.astype(dtype)


# Partial derivatives of a ** b where the textbook formulas give 0 * inf = nan, following JAX:
# d/da = b a**(b-1) is 0 where b == 0 (a**0 is constant), d/db = a**b log(a) is 0 where a == 0.
# Lazily typed ufuncs: scalars and broadcasting arrays alike, compiled per dtype on first use.
@numba.vectorize
def _pow_da(a, b):
    return 0.0 if b == 0 else b * a ** (b - 1.0)


@numba.vectorize
def _pow_db(a, b):
    return 0.0 if a == 0 else a ** b * math.log(a)


@numba.njit
def no_value(message, fire):
    """Raise ``ValueError(message)`` where a differentiated function returns None. Typed as a
    float (``fire`` is always True, but a run-time value keeps the return reachable for Numba)."""
    if fire:
        raise ValueError(message)
    return 0.0


_apart = intrinsics.apart               # _apart(a, b): a and b share no memory (ad/gather.py)


_copy_into = intrinsics.copy_into      # _copy_into(a, src): a checkpointed loop's LOAD


@numba.njit
def _rule_shape(tangent, arg, message):
    """A rule's ``tangent`` checked against the shape of its argument ``arg`` (NumPy would
    broadcast a wrong one without a word): a call, not a ``raise`` in the generated code, so
    that a rule's vjp stays in the language the reverse mode differentiates (second
    derivatives through rules: its result is an int, which nothing differentiates)."""
    if tangent.shape != arg.shape:
        raise TangentShapeError(message, tangent.shape, arg.shape)
    return 0


# ``A.T @ B`` and ``A @ B.T``, the adjoints of a matrix product (adjoints._matmul_adjoint). BLAS
# multiplies a transposed operand where it lies; a C-contiguous copy of the transpose first (a
# strided gather) doubled the product's time: ``X.T @ dA`` for X 4096x256 took 16.4 ms with the
# copy, 8.7 without. Library code from Numba's disk cache (cache=True, keyed on the optimisation
# level): Numba's product of a Fortran-ordered operand is a compile of its own (0.4-0.5 s per
# pair of layouts), paid once per machine, not per process.

@njit_unliteral(cache=True)
def _matmul_tn(a, b):
    """``a.T @ b`` without copying ``a.T``."""
    return a.T @ b


@njit_unliteral(cache=True)
def _matmul_nt(a, b):
    """``a @ b.T`` without copying ``b.T``."""
    return a @ b.T


HELPERS = {"_List": numba.typed.List, "_copy_into": _copy_into, "_rv_start": _rv_start, "_rv_next": _rv_next, "_pow_da": _pow_da, "_pow_db": _pow_db, "_cast": _cast, "_rule_shape": _rule_shape,
           "_trip": _trip, "_apart": _apart, "_reserve": _reserve, "_tape": _tape, "_iadd": _iadd,
           "_push_view": _push_view, "_restore": _restore, "_zeros_like": _zeros_like, "_empty_like": _empty_like,
           "_zero_part": _zero_part, "_matmul_tn": _matmul_tn, "_matmul_nt": _matmul_nt,
           "_np": np,
           # a prange loop's parallel schedule (ad/parallel.py)
           "_prange": numba.prange, "_num_threads": _num_threads}


def _ub(x, like):
    """``x`` reduced to the shape of ``like``: the adjoint of NumPy broadcasting ``like`` up to
    ``x``'s shape (sums over the axes that were broadcast). This is the Python meaning; compiled
    code uses the ``overload`` below."""
    if np.ndim(like) == 0:
        return np.sum(x)
    while x.ndim > np.ndim(like):
        x = x.sum(axis=0)
    for k, n in enumerate(np.shape(like)):
        if n == 1 and x.shape[k] != 1:
            x = x.sum(axis=k, keepdims=True)
    return x


@overload(_ub)
def _ub_impl(x, like):
    if isinstance(like, (types.Float, types.Integer)):
        return lambda x, like: np.sum(x)
    if not (isinstance(like, types.Array) and isinstance(x, types.Array)):
        return None
    if x.ndim == like.ndim == 1:
        def same_rank_1(x, like):
            if x.shape[0] == like.shape[0]:
                return x
            return np.full(like.shape, np.sum(x))
        return same_rank_1
    if x.ndim == 2 and like.ndim == 2:
        def same_rank_2(x, like):
            if x.shape[0] == like.shape[0] and x.shape[1] == like.shape[1]:
                return x
            out = np.zeros(like.shape, x.dtype)
            for i in range(x.shape[0]):
                for j in range(x.shape[1]):
                    out[i if like.shape[0] > 1 else 0, j if like.shape[1] > 1 else 0] += x[i, j]
            return out
        return same_rank_2
    if x.ndim == 2 and like.ndim == 1:
        def row_broadcast(x, like):
            out = np.zeros(like.shape, x.dtype)
            for i in range(x.shape[0]):
                for j in range(x.shape[1]):
                    out[j if like.shape[0] > 1 else 0] += x[i, j]
            return out
        return row_broadcast
    if x.ndim == like.ndim:
        def same_rank(x, like):
            if x.shape == like.shape:
                return x
            return _ub_any_rank(x, like)
        return same_rank
    if x.ndim > like.ndim:
        return lambda x, like: _ub_any_rank(x, like)
    return None


@numba.njit
def _ub_any_rank(x, like):
    """Any ranks: walk ``x`` in C order and add each element into the element of ``like`` it was
    broadcast from (leading axes dropped, axes of length 1 pinned to 0)."""
    out = np.zeros(like.shape, x.dtype)
    flat_out = out.reshape(out.size)
    lead = x.ndim - like.ndim
    xc = np.ascontiguousarray(x).reshape(x.size)
    for i in range(x.size):
        rest = i
        pos = 0
        stride = 1
        for k in range(x.ndim - 1, lead - 1, -1):
            c = rest % x.shape[k]
            rest //= x.shape[k]
            n = like.shape[k - lead]
            pos += (c if n > 1 else 0) * stride
            stride *= n
        flat_out[pos] += xc[i]
    return out


HELPERS["_ub"] = _ub
