"""Array structure for compiled code: the block view of an axis, and what Numba 0.68 lacks.

Numba 0.68 compiles ``np.sum(x, axis)`` but not ``np.mean``, ``np.prod``, ``np.max`` or
``np.min`` with an ``axis`` argument. A rule for a call the primal cannot run is no use: a user's
method or ``nr.jit`` function calling ``np.max(x, axis=0)`` must compile without numbarules'
AD too. So the forward computations are registered here with ``numba.extending.overload`` for
exactly the signatures Numba lacks (an array and an integer axis), on functions of our own
(``mean_along_axis``, ...), never on NumPy's: plain ``@njit`` code in the same process compiles
exactly what it would without numbarules. The code numbarules compiles (users' methods, ``nr.jit``
functions, helpers, kernels) sees ``NUMPY`` in place of the ``numpy`` module (``for_numba``),
whose ``mean``, ``prod``, ``max`` and ``min`` are stand-ins: trampolines to the axis form or to
Numba's own implementation of NumPy's function.

``np.concatenate`` and ``np.stack`` take a tuple of arrays, which has no tangent type in the
engine; the frontend rewrites them into nested calls of the two-array functions below, whose
rules are in ``numpy_shapes.py``.
"""

import types as pytypes

import numpy as np
from numba import types
from numba.extending import overload, register_jitable

from .. import numba_glue
from . import numpy_names


def element_dtype(*elements):
    """The NumPy scalar type ``np.array([e0, e1, ...])`` has (compiled code only: the frontend
    writes an array literal as ``np.empty(shape, element_dtype(...))`` and a store per element,
    which the AD differentiates like any writes into a new array)."""
    return np.result_type(*elements).type


@overload(element_dtype)
def _element_dtype(*elements):
    dtype = np.result_type(*(numba_glue.as_dtype(e) for e in elements))
    scalar = dtype.type

    def impl(*elements):
        return scalar
    return impl


def join(a, b, axis):
    """``np.concatenate((a, b), axis)``: the binary form the frontend rewrites to."""
    return np.concatenate((a, b), axis)


def new_axis(x, axis):
    """``np.expand_dims(x, axis)`` (``np.stack`` is concatenation of these)."""
    return np.expand_dims(x, axis)


@register_jitable
def blocks(shape, axis):
    """(before, along, after): the sizes of ``shape`` before, at and after ``axis`` (negative
    counts from the end). A C-contiguous array of ``shape`` reshaped to these is the same data
    with the axis in the middle, so one loop nest serves every rank and axis."""
    ndim = len(shape)
    if axis < -ndim or axis >= ndim:
        raise ValueError("axis is out of bounds for the array's dimension")
    if axis < 0:
        axis += ndim
    before = 1
    after = 1
    for k in range(axis):
        before *= shape[k]
    for k in range(axis + 1, ndim):
        after *= shape[k]
    return before, shape[axis], after


def reduced_shape(shape, axis):
    """``shape`` without ``axis`` (compiled code only; see the overload)."""
    axis = axis + len(shape) if axis < 0 else axis
    return tuple(n for k, n in enumerate(shape) if k != axis)


@overload(reduced_shape)
def _reduced_shape(shape, axis):
    n = len(shape) - 1
    # A tuple's length is part of its type: spell out element j as shape[j] or shape[j + 1].
    items = "".join(f"shape[{j}] if {j} < a else shape[{j + 1}], " for j in range(n))
    ns = {}
    exec(f"def impl(shape, axis):\n    a = axis + {n + 1} if axis < 0 else axis\n"  # noqa: S102
         f"    return ({items})\n", ns)
    return ns["impl"]


_SUM, _PROD, _MAX, _MIN = 0, 1, 2, 3


@register_jitable
def reduce_axis(x, axis, op):
    """``op`` (sum, prod, max, min) of ``x`` along ``axis``, as a (before, after) array."""
    before, n, after = blocks(x.shape, axis)
    if n == 0 and op >= _MAX:
        raise ValueError("zero-size array to reduction operation which has no identity")
    x3 = np.ascontiguousarray(x).reshape((before, n, after))
    out = np.empty((before, after), x.dtype)
    for p in range(before):
        for q in range(after):
            acc = x3[p, 0, q] if n > 0 else (x.dtype.type(1) if op == _PROD else x.dtype.type(0))
            for k in range(1, n):
                v = x3[p, k, q]
                if op == _SUM:
                    acc += v
                elif op == _PROD:
                    acc *= v
                elif op == _MAX:
                    acc = v if v > acc or np.isnan(v) else acc
                else:
                    acc = v if v < acc or np.isnan(v) else acc
            out[p, q] = acc
    return out


def _along(whole):
    """The compiled ``np.<whole>(a, axis)`` for an array and an integer axis (see _axis_form)."""
    def along(a, axis):
        return whole(a, axis)
    along.__name__ = along.__qualname__ = f"{whole.__name__}_along_axis"
    return along


def _axis_reduction(whole, op, scale):
    """The overload of ``np.<whole>(a, axis)`` for an array and an integer axis."""
    def typer(a, axis):
        if not _axis_form((a, axis), {}):
            return None
        if a.ndim == 1:
            def vector(a, axis):
                blocks(a.shape, axis)       # the bounds check NumPy makes
                return whole(a)
            return vector

        # np.mean keeps a float dtype (float32 stays float32) and gives float64 for integers.
        mean_type = a.dtype if isinstance(a.dtype, types.Float) else types.float64

        def array(a, axis):
            out = reduce_axis(a, axis, op)
            if scale:
                out = out.astype(mean_type) / mean_type(blocks(a.shape, axis)[1])
            return out.reshape(reduced_shape(a.shape, axis))
        return array
    return typer


def _axis_form(args, kws):
    """Whether a call of a stand-in is ``(array, integer axis)``: the form Numba lacks."""
    if set(kws) - {"axis"} or len(args) + len(kws) != 2 or len(args) == 2 and kws:
        return False
    a, axis = args[0], (args[1] if len(args) == 2 else kws["axis"])
    return isinstance(a, types.Array) and isinstance(a.dtype, (types.Float, types.Integer)) \
        and isinstance(axis, types.Integer)


# NumPy's function -> its stand-in. Registering the axis forms on np.mean itself would change what
# every @njit function in the process compiles (importing numbarules must change nothing else),
# so they are registered on stand-ins, and the code numbarules hands to Numba names the stand-ins.
STAND_INS = {np.mean: numpy_names.mean, np.prod: numpy_names.prod, np.max: numpy_names.max,
             np.min: numpy_names.min}
_BY_ID = {id(k): v for k, v in STAND_INS.items()}


def _pick(whole, along):
    return lambda args, kws: along if _axis_form(args, kws) else whole


# Each stand-in is a trampoline, not an overload: an overload's implementation would be one more
# compiled function per signature (~60 ms each) in front of Numba's own np.mean(x).
for _f, _op, _scale in ((np.mean, _SUM, True), (np.prod, _PROD, False), (np.max, _MAX, False),
                        (np.min, _MIN, False)):
    _a = _along(_f)
    overload(_a)(_axis_reduction(_f, _op, _scale))
    numba_glue.intrinsics.trampoline(STAND_INS[_f], _pick(_f, _a))


class _NumpyForNumba(pytypes.ModuleType):
    """NumPy as numbarules' compiles see it: the module itself but for the stand-ins. Numba
    types ``np.mean`` through ``getattr`` of the module a global names; the module's
    ``__name__`` stays "numpy" so Numba's passes still recognise NumPy calls (``np.empty``...)."""

    def __getattr__(self, name):
        return getattr(np, name)


NUMPY = _NumpyForNumba("numpy", np.__doc__)
for _f, _stand_in in STAND_INS.items():
    setattr(NUMPY, _f.__name__, _stand_in)


def for_numba(value):
    """What code numbarules compiles should see for a value it names: NumPy and its axis
    reductions as above, everything else as it is."""
    if value is np:
        return NUMPY
    return _BY_ID.get(id(value), value)
