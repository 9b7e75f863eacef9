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
from numba.core import cgutils
from numba.extending import intrinsic, overload
from numba.np.arrayobj import _empty_nd_impl, make_array


@numba.njit(inline="always")
def _trip(start, stop, step):
    """len(range(start, stop, step)), the trip count the reverse loop replays."""
    # conditional expressions, not max(0, n): Numba's max is an @overload compiled on its own
    if step > 0:
        n = (stop - start + step - 1) // step
    else:
        n = (start - stop - step - 1) // (-step)
    return n if n > 0 else 0


# The tapes' helpers and the adjoints' zeros are intrinsics: Numba emits them inline in the
# kernel that calls them. As @njit functions or @overloads (np.empty, np.zeros_like, a copy
# loop, max) each was a dispatcher of its own, compiled per type and per process before the
# first gradient: 0.4-0.6 s of a 1 s first gradient (docs/numba-internals.md, "What compiling
# costs"). Numba's own allocation helper (the one np.empty lowers to) builds the arrays.

@intrinsic
def _tape(typingctx, capacity, dtype):
    """``np.empty(capacity, dtype)``: a new tape (``dtype`` a NumPy scalar class, ``_np.float64``)."""
    eltype = getattr(dtype, "instance_type", None)
    if not isinstance(eltype, (types.Number, types.Boolean)):
        return None
    result = types.Array(eltype, 1, "C")

    def codegen(context, builder, sig, args):
        n = context.cast(builder, args[0], sig.args[0], types.intp)
        return _empty_nd_impl(context, builder, result, [n])._getvalue()
    return result(capacity, dtype), codegen


@intrinsic
def _reserve(typingctx, buf, used, more):
    """A tape with room for ``more`` pushes after ``used``: ``buf`` itself when it has room,
    else a copy of its first ``used`` entries in one of twice the capacity (or ``used + more``
    when that is more): grows at most once per loop entry."""
    if not (isinstance(buf, types.Array) and buf.ndim == 1 and buf.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        aty = sig.args[0]
        value, used, more = args
        used = context.cast(builder, used, sig.args[1], types.intp)
        more = context.cast(builder, more, sig.args[2], types.intp)
        old = make_array(aty)(context, builder, value=value)
        capacity = builder.extract_value(old.shape, 0)
        need = builder.add(used, more)
        out = cgutils.alloca_once(builder, value.type)
        with builder.if_else(builder.icmp_signed("<=", need, capacity), likely=True) as (
                fits, grows):
            with fits:
                context.nrt.incref(builder, aty, value)     # returned: a new reference
                builder.store(value, out)
            with grows:
                doubled = builder.mul(capacity, capacity.type(2))
                size = builder.select(builder.icmp_signed(">", doubled, need), doubled, need)
                new = _empty_nd_impl(context, builder, aty, [size])
                cgutils.raw_memcpy(builder, new.data, old.data, used,
                                   context.get_abi_sizeof(context.get_data_type(aty.dtype)))
                builder.store(new._getvalue(), out)
        return builder.load(out)
    return buf(buf, used, more), codegen


@intrinsic
def _zeros_like(typingctx, a):
    """``np.zeros_like(a)`` for an array ``a``, emitted inline in the kernel that calls it.

    Every adjoint array starts as this. ``np.zeros_like`` itself is three @overload
    implementations (zeros_like, empty_like, _zero_fill), each a dispatcher compiled on its own,
    per array type and per process: about 0.4 s before the first gradient of each new array
    type (docs/numba-internals.md, "What compiling costs"). Numba's allocation helper plus a
    memset here cost nothing extra to compile. The result type is ``np.zeros_like``'s: the
    same layout (C for a non-contiguous ``a``), writable.
    """
    if not isinstance(a, types.Array):
        return None
    result = a.copy(layout=a.layout if a.layout in "CF" else "C", readonly=False)

    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, value=args[0])
        shapes = cgutils.unpack_tuple(builder, src.shape, count=sig.args[0].ndim)
        out = _empty_nd_impl(context, builder, sig.return_type, shapes)
        cgutils.memset(builder, out.data, builder.mul(out.itemsize, out.nitems), 0)
        return out._getvalue()
    return result(a), codegen


@numba.njit
def _push_view(buf, used, view):
    """``buf`` with the elements of ``view`` (any layout, C order) written after ``used``."""
    flat = view.ravel()
    buf = _reserve(buf, used, flat.size)
    for i in range(flat.size):
        buf[used + i] = flat[i]
    return buf


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


HELPERS = {"_List": numba.typed.List, "_pow_da": _pow_da, "_pow_db": _pow_db, "_cast": _cast, "_trip": _trip, "_reserve": _reserve, "_tape": _tape, "_iadd": _iadd,
           "_push_view": _push_view, "_zeros_like": _zeros_like, "_np": np}


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
