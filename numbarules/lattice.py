"""The dispatch lattice: abstract and concrete types, ``Array[T, N]``, ``typeof`` and ``issubtype``.

Lattice types are Python classes whose metaclass is :class:`LatticeMeta`. Nominal subtyping is
class inheritance (a user's abstract type is a subclass); the one structural rule is for arrays:

    Array[T, N] <: Array[U, M]   iff   T <: U  and  (M is unspecified or N == M)

``Array[T, 1]`` also inherits from ``AbstractVector`` and ``Array[T, 2]`` from ``AbstractMatrix``.
Array types are interned, so ``Array[Float64, 2] is Matrix[Float64]``.
"""

import inspect

import numba
import numpy as np
from numba import types as nbtypes
from numba.np.numpy_support import from_dtype as nb_from_dtype

from .errors import SignatureError


class LatticeMeta(type):
    """Metaclass of every lattice type.

    A class is concrete when it says so (``_concrete = True``: the built-in leaf types, arrays
    with a concrete element type and a rank, structs); everything else is abstract. Concrete
    types are final, as in Julia.
    """

    def __new__(mcls, name, bases, ns, **kw):
        # Lattice classes never carry per-instance dicts: structs built on them stay immutable.
        ns.setdefault("__slots__", ())
        ns.setdefault("_concrete", False)
        for b in bases:
            if isinstance(b, LatticeMeta) and b.__dict__.get("_concrete"):
                raise TypeError(
                    f"cannot subclass concrete type {b!r}: concrete lattice types are final. "
                    f"Subclass an abstract type (e.g. nr.AbstractMatrix) instead."
                )
        return super().__new__(mcls, name, bases, ns, **kw)

    def __repr__(cls):
        return cls.__dict__.get("_nr_repr") or cls.__qualname__.rsplit("<locals>.", 1)[-1]

    def __getitem__(cls, params):
        family = cls.__dict__.get("_nr_array_family")
        if family is None:
            raise TypeError(f"{cls!r} takes no type parameters")
        return family(params)


def _base(name, parent, doc):
    return LatticeMeta(name, (parent,) if parent else (), {"__doc__": doc, "__module__": __name__})


Any = LatticeMeta("Any", (), {"__doc__": "Root of the lattice.", "__module__": __name__})
Number = _base("Number", Any, "Abstract numbers.")
Real = _base("Real", Number, "Abstract real numbers.")
AbstractFloat = _base("AbstractFloat", Real, "Abstract floating-point numbers.")
Integer = _base("Integer", Real, "Abstract integers.")
Signed = _base("Signed", Integer, "Abstract signed integers.")
AbstractArray = _base("AbstractArray", Any, "Abstract arrays.")
AbstractVector = _base("AbstractVector", AbstractArray, "Abstract one-dimensional arrays.")
AbstractMatrix = _base("AbstractMatrix", AbstractArray, "Abstract two-dimensional arrays.")


def _leaf(name, parent, numba_type, numpy_type):
    cls = LatticeMeta(name, (parent,), {"_concrete": True, "__module__": __name__,
                                        "__doc__": f"Concrete {name} ({numba_type})."})
    cls.numba_type = numba_type
    cls.numpy_type = numpy_type
    return cls


Float64 = _leaf("Float64", AbstractFloat, nbtypes.float64, np.float64)
Float32 = _leaf("Float32", AbstractFloat, nbtypes.float32, np.float32)
Int64 = _leaf("Int64", Signed, nbtypes.int64, np.int64)
Int32 = _leaf("Int32", Signed, nbtypes.int32, np.int32)
Bool = _leaf("Bool", Integer, nbtypes.boolean, np.bool_)

_LEAVES = (Float64, Float32, Int64, Int32, Bool)
_FROM_NUMBA = {cls.numba_type: cls for cls in _LEAVES}
_FROM_DTYPE = {np.dtype(cls.numpy_type): cls for cls in _LEAVES}
_ALIASES = {float: Float64, int: Int64, bool: Bool, object: Any}
_ALIASES.update({cls.numpy_type: cls for cls in _LEAVES})


# --- arrays ------------------------------------------------------------------------------------

_ARRAYS = {}


def _array_type(eltype, ndim):
    """The interned ``Array[eltype, ndim]`` (``ndim`` None: any rank)."""
    eltype = as_lattice(eltype, what="array element type")
    if ndim is not None and (not isinstance(ndim, int) or isinstance(ndim, bool) or ndim < 0):
        raise TypeError(f"array rank must be a non-negative int or omitted, not {ndim!r}")
    key = (eltype, ndim)
    cls = _ARRAYS.get(key)
    if cls is None:
        parent = {1: AbstractVector, 2: AbstractMatrix}.get(ndim)
        # Every parametric array is a class below the bare Array, so nominal checks see it.
        bases = tuple(b for b in (Array, parent) if b is not None) or (AbstractArray,)
        concrete = ndim is not None and isconcrete(eltype)
        if ndim is None:
            label = f"Array[{eltype!r}]" if eltype is not Any else "Array"
        elif eltype is Any:
            label = {1: "Vector", 2: "Matrix"}.get(ndim, f"Array[Any, {ndim}]")
        else:
            label = {1: f"Vector[{eltype!r}]", 2: f"Matrix[{eltype!r}]"}.get(ndim, f"Array[{eltype!r}, {ndim}]")
        cls = LatticeMeta(label, bases, {
            "_concrete": concrete, "_nr_repr": label, "__module__": __name__,
            "eltype": eltype, "ndim": ndim,
            "__doc__": "Dense NumPy array: element type <: eltype, ndim dimensions (None: any).",
        })
        cls._nr_array_family = _family_for(ndim)
        _ARRAYS[key] = cls
    return cls


def _family_for(ndim):
    if ndim is None:
        def family(params):
            params = params if isinstance(params, tuple) else (params,)
            if len(params) == 1:
                return _array_type(params[0], None)
            if len(params) == 2:
                return _array_type(params[0], params[1])
            raise TypeError(f"Array takes [T] or [T, N], got {len(params)} parameters")
    else:
        def family(params):
            if isinstance(params, tuple):
                raise TypeError(f"{_array_type(Any, ndim)!r} takes one parameter, the element type")
            return _array_type(params, ndim)
    return family


Array = None  # bound at the end of the module, once as_lattice exists


def isarray(t):
    return isinstance(t, LatticeMeta) and "eltype" in t.__dict__


# --- opaque types: everything Numba can type that the lattice does not name -------------------

_OPAQUE = {}


def opaque(numba_type):
    """The concrete lattice type standing for a Numba type the lattice has no name for."""
    cls = _OPAQUE.get(numba_type)
    if cls is None:
        label = f"Opaque[{numba_type}]"
        cls = LatticeMeta(label, (Any,), {"_concrete": True, "_nr_repr": label,
                                          "__module__": __name__, "numba_type": numba_type})
        _OPAQUE[numba_type] = cls
    return cls


# --- the relation ------------------------------------------------------------------------------

def isconcrete(t):
    return isinstance(t, LatticeMeta) and bool(t.__dict__.get("_concrete"))


def issubtype(a, b):
    """``a <: b`` on lattice types (annotations such as ``float`` are accepted too)."""
    a, b = as_lattice(a), as_lattice(b)
    if a is b or b is Any:
        return True
    if isarray(b):
        return (isarray(a) and issubtype(a.eltype, b.eltype)
                and (b.ndim is None or a.ndim == b.ndim))
    return issubclass(a, b)


def meet(a, b):
    """The greatest common subtype of two lattice types where the lattice can name it, else None."""
    if issubtype(a, b):
        return a
    if issubtype(b, a):
        return b
    if isarray(a) and isarray(b) and (a.ndim is None or b.ndim is None or a.ndim == b.ndim):
        el = meet(a.eltype, b.eltype)
        if el is not None:
            return _array_type(el, a.ndim if a.ndim is not None else b.ndim)
    if isarray(a) != isarray(b):
        arr, other = (a, b) if isarray(a) else (b, a)
        rank = {AbstractVector: 1, AbstractMatrix: 2, AbstractArray: arr.ndim}.get(other)
        if other in (AbstractVector, AbstractMatrix, AbstractArray) and arr.ndim in (None, rank):
            return _array_type(arr.eltype, rank)
    return None


# --- annotations and values --------------------------------------------------------------------

def as_lattice(t, *, what="type"):
    """Turn an annotation into a lattice type, or raise TypeError saying what is accepted."""
    if isinstance(t, LatticeMeta):
        return t
    if t is inspect.Parameter.empty:
        return Any
    try:
        alias = _ALIASES.get(t)
    except TypeError:  # unhashable annotation
        alias = None
    if alias is not None:
        return alias
    raise TypeError(
        f"{t!r} is not a numbarules {what}: use a lattice type (nr.Float64, nr.Real, "
        f"nr.Matrix[nr.Float64], a @nr.struct class, ...), float, int, bool or a NumPy scalar type"
    )


def annotation_type(func, name, annotation):
    """The lattice type of one annotated parameter of ``func``; errors name the function."""
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, getattr(func, "__globals__", {}))  # noqa: S307 - PEP 563
        except Exception as exc:
            raise _signature_error(func, name, f"its annotation {annotation!r} could not be "
                                               f"evaluated ({exc})") from None
    try:
        return as_lattice(annotation)
    except TypeError as exc:
        raise _signature_error(func, name, str(exc)) from None


def _signature_error(func, name, why):
    file, line = source_location(func)
    return SignatureError(
        f"parameter '{name}' of {getattr(func, '__qualname__', func)} ({file}:{line}): {why}",
        function=func, parameter=name, file=file, line=line)


def source_location(func):
    code = getattr(func, "__code__", None)
    if code is None:
        return "<unknown>", 0
    return code.co_filename, code.co_firstlineno


def typeof(value):
    """The concrete lattice type of a Python value."""
    t = type(value)
    hit = _PY_TYPES.get(t)
    if hit is not None:
        return hit
    if t is np.ndarray:
        return _array_type(from_dtype(value.dtype), value.ndim)
    if isinstance(t, LatticeMeta):  # a struct instance
        return t
    if isinstance(value, np.generic):
        return from_dtype(value.dtype)
    nbt = numba.typeof(value)
    if nbt is None:
        raise TypeError(f"numbarules cannot type the value {value!r} of type {t.__name__}")
    return from_numba(nbt)


_PY_TYPES = {float: Float64, int: Int64, bool: Bool}


def from_dtype(dtype):
    hit = _FROM_DTYPE.get(dtype)
    if hit is not None:
        return hit
    return opaque(nb_from_dtype(dtype))


def from_numba(t):
    """The lattice type of a Numba type. Layouts (C/F/A) and read-only flags do not matter."""
    t = nbtypes.unliteral(t)
    hit = _FROM_NUMBA.get(t)
    if hit is not None:
        return hit
    if isinstance(t, nbtypes.Array):
        return _array_type(from_numba(t.dtype), t.ndim)
    if isinstance(t, nbtypes.BaseNamedTuple) and isinstance(t.instance_class, LatticeMeta):
        return t.instance_class
    return opaque(t)


def fmt_sig(sig):
    return "(" + ", ".join(f"::{t!r}" for t in sig) + ")"


Array = _array_type(Any, None)
Vector = _array_type(Any, 1)
Matrix = _array_type(Any, 2)


# --- pickling: parametric types by name -------------------------------------------------------

def __getattr__(name):
    """``Vector[Float64]`` and the like, looked up by name on this module.

    A parametric array type is named by its ``repr`` (``__qualname__``) in this module, so pickle
    (and cloudpickle, Dask) stores it by reference, as it does ``Float64``; this builds the same
    interned type in the loading process (PEP 562). Without it cloudpickle would copy the class
    by value, and the copy would be a new type, not ``Vector[Float64]``."""
    parsed = _parse_type(name)
    if parsed is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return parsed


def _parse_type(text):
    text = text.strip()
    simple = globals().get(text)
    if isinstance(simple, LatticeMeta):
        return simple
    if not text.endswith("]") or "[" not in text:
        return None
    head, inner = text[:-1].split("[", 1)
    params, depth, cur = [], 0, ""
    for ch in inner:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            params.append(cur)
            cur = ""
        else:
            cur += ch
    params.append(cur)
    rank = {"Vector": 1, "Matrix": 2}.get(head.strip())
    if head.strip() not in ("Array", "Vector", "Matrix"):
        return None
    eltype = _parse_type(params[0])
    if eltype is None:
        return None
    if rank is not None:
        return _array_type(eltype, rank) if len(params) == 1 else None
    if len(params) == 1:
        return _array_type(eltype, None)
    if len(params) == 2 and params[1].strip().isdigit():
        return _array_type(eltype, int(params[1]))
    return None
