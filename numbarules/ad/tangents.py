"""Tangents of aggregates (structs and tuples, nested) in compiled code.

The tangent of a struct ``S`` is a ``Tangent[S]``, of a tuple a tuple, with one entry per field
or item: a float for a float, an array for a float array, a tangent for a nested aggregate and
``None`` for what carries none (integers, booleans). Tangents are immutable records, so a float
entry is updated by building a new record; their arrays are shared and updated in place. The
generated kernels combine them with four helpers, each unrolled per type at compile time:

    tadd(a, b)          floats a + b; arrays a += b in place (b's arrays are separate ones)
    tmerge(a, b)        floats a + b; arrays a's (b shares them: a tangent bound to a's field)
    tfloats_zeroed(a)   floats 0; arrays a's
    tadd_at(a, i, g)    a tuple of floats with g added to item i (a run-time index)

These are ``overload``s of numbarules' own functions: nothing another Numba program calls.
"""

from numba import types
from numba.extending import overload

from ..structs import Tangent


def tadd(a, b):
    raise NotImplementedError("compiled code only")


def tmerge(a, b):
    raise NotImplementedError("compiled code only")


def tfloats_zeroed(a):
    raise NotImplementedError("compiled code only")


def tadd_at(a, i, g):
    raise NotImplementedError("compiled code only")


HELPERS = {"_tadd": tadd, "_tmerge": tmerge, "_tfloats_zeroed": tfloats_zeroed,
           "_tadd_at": tadd_at}


def _aggregate(t):
    return isinstance(t, types.BaseTuple)


def _builder(t):
    """(the namespace the impl needs, a function making the constructor expression of parts)."""
    if isinstance(t, types.BaseNamedTuple):
        cls = t.instance_class
        return {"_cls": cls}, lambda parts: f"_cls({', '.join(parts)})"
    return {}, lambda parts: "(" + "".join(p + ", " for p in parts) + ")"


def _compile(params, body, ns):
    src = f"def impl({params}):\n    return {body}\n"
    scope = dict(HELPERS)
    scope.update(ns)
    exec(compile(src, "<numbarules tangent helper>", "exec"), scope)  # noqa: S102
    return scope["impl"]


def _combine(name, a, b, array_part):
    """impl of ``name(a, b)`` for the types a, b: item by item."""
    if isinstance(a, types.NoneType) or isinstance(b, types.NoneType):
        return lambda a, b: a
    if isinstance(a, types.Array):
        return array_part
    if isinstance(a, types.Float):
        return lambda a, b: a + b
    if _aggregate(a) and _aggregate(b) and len(a) == len(b):
        ns, build = _builder(a)
        parts = [f"{name}(a[{k}], b[{k}])" for k in range(len(a))]
        return _compile("a, b", build(parts), ns)
    return None


def _add_arrays(a, b):
    a += b
    return a


@overload(tadd)
def _tadd(a, b):
    return _combine("_tadd", a, b, _add_arrays)


@overload(tmerge)
def _tmerge(a, b):
    return _combine("_tmerge", a, b, lambda a, b: a)


@overload(tfloats_zeroed)
def _tfloats_zeroed(a):
    if isinstance(a, types.Float):
        zero = a.cast_python_value(0.0)
        return lambda a: zero
    if isinstance(a, (types.Array, types.NoneType)):
        return lambda a: a
    if _aggregate(a):
        ns, build = _builder(a)
        return _compile("a", build([f"_tfloats_zeroed(a[{k}])" for k in range(len(a))]), ns)
    return None


@overload(tadd_at)
def _tadd_at(a, i, g):
    if isinstance(a, types.UniTuple) and isinstance(a.dtype, types.Float):
        parts = [f"a[{k}] + g if i == {k} else a[{k}]" for k in range(len(a))]
        return _compile("a, i, g", "(" + "".join(f"{p}, " for p in parts) + ")", {})
    return None


def tangent_class(struct_type):
    """``Tangent[S]`` for the Numba type of struct ``S``."""
    return Tangent[struct_type.instance_class]
