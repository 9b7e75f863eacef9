"""``@nr.struct`` and ``nr.Tangent[S]``: immutable records usable in Python, njit and CUDA code.

A struct is a ``typing.NamedTuple``-style class, the one record flavour that Numba passes in,
builds, returns and dispatches on in njit code and in CUDA code alike. It is also a concrete
lattice type, a subclass of the abstract types it names as bases.

Numba's dispatcher keys NamedTuple arguments on the class's ``__name__`` and field names only, so
two struct classes with the same name and fields would be confused by compiled code (the second
would come back as the first). Each struct class therefore gets a unique ``__name__`` (``Point``,
then ``Point_2``, ...) while ``__qualname__``, ``repr`` and error messages keep the user's name.
"""

import collections
import inspect

from .lattice import Any, LatticeMeta, annotation_type, issubtype, typeof
from . import numba_glue
from .errors import SignatureError

_NAME_COUNTS = collections.Counter()


def _unique_name(name):
    _NAME_COUNTS[name] += 1
    n = _NAME_COUNTS[name]
    return name if n == 1 else f"{name}_{n}"


def _make_record(display_name, module, qualname, fields, bases, ns, checks, ident=None):
    """Build the record class: a namedtuple base for storage, lattice bases for dispatch."""
    storage = collections.namedtuple(_unique_name(ident or display_name), fields)
    params = [inspect.Parameter(f, inspect.Parameter.POSITIONAL_OR_KEYWORD) for f in fields]

    def __new__(cls, *args, **kwargs):
        self = storage.__new__(cls, *args, **kwargs)
        for name, want, value in zip(fields, checks, self):
            if want is not None and not issubtype(typeof(value), want):
                raise TypeError(f"{display_name}.{name} must be {want!r}, got {typeof(value)!r} "
                                f"({value!r:.60})")
        return self

    def __repr__(self):
        inner = ", ".join(f"{f}={v!r}" for f, v in zip(fields, self))
        return f"{display_name}({inner})"

    body = dict(ns)
    body.update({
        "__new__": __new__, "__repr__": __repr__, "__slots__": (), "_concrete": True,
        "__signature__": inspect.Signature(params), "__module__": module,
        "_nr_display_name": display_name,
    })
    cls = LatticeMeta(storage.__name__, (storage,) + bases, body)
    cls.__qualname__ = qualname
    return cls


def struct(cls):
    """Make ``cls`` an immutable struct: a concrete subtype of its (abstract) lattice bases.

    >>> @nr.struct
    ... class Diagonal(nr.AbstractMatrix):
    ...     diag: nr.Vector[nr.Float64]
    """
    if not isinstance(cls, type):
        raise TypeError("@nr.struct decorates a class")
    annotations = cls.__dict__.get("__annotations__", {})
    bases = tuple(b for b in cls.__bases__ if b is not object) or (Any,)
    for b in bases:
        if not isinstance(b, LatticeMeta) or b.__dict__.get("_concrete"):
            raise SignatureError(
                f"struct {cls.__qualname__}: base {b!r} is not an abstract lattice type; "
                f"a struct may only subclass abstract types such as nr.AbstractMatrix",
                function=cls)
    fields, checks = [], []
    for name, ann in annotations.items():
        if name in cls.__dict__:
            raise SignatureError(
                f"struct {cls.__qualname__}: field '{name}' has a default value; struct fields "
                f"have no defaults (Numba could not build the struct without it)",
                function=cls, parameter=name)
        fields.append(name)
        checks.append(annotation_type(cls, name, ann) if not _is_any(ann) else None)
    if not fields:
        raise SignatureError(f"struct {cls.__qualname__} declares no fields (write `name: type`)",
                             function=cls)
    ns = {k: v for k, v in cls.__dict__.items()
          if k not in ("__dict__", "__weakref__", "__annotations__", "__slots__", "__module__",
                       "__qualname__")}
    record = _make_record(cls.__name__, cls.__module__, cls.__qualname__, fields, bases, ns, checks)
    record._nr_fields = dict(zip(fields, checks))
    return record


def _is_any(ann):
    return ann is Any or ann is object


def isstruct(t):
    return isinstance(t, LatticeMeta) and "_nr_fields" in t.__dict__


class _TangentMeta(LatticeMeta):
    def __getitem__(cls, s):
        if not isstruct(s):
            raise TypeError(f"Tangent[...] takes a @nr.struct class, not {s!r}")
        t = _TANGENTS.get(s)
        if t is None:
            from .tangent_arith import ARITHMETIC      # +, -, * by a float, unary -
            t = _make_record(f"Tangent[{s._nr_display_name}]", s.__module__,
                             f"Tangent[{s.__qualname__}]", list(s._nr_fields), (Tangent,),
                             dict(ARITHMETIC, __reduce__=_reduce_tangent), [None] * len(s._nr_fields),
                             ident=f"Tangent_{s.__name__}")
            t.primal = s
            t._nr_fields = dict.fromkeys(s._nr_fields)
            _TANGENTS[s] = t
        return t


def _reduce_tangent(t):
    # as Tangent[S] of its struct, which pickle names (or cloudpickle tracks): a copy of the
    # record class itself would be a new class in the receiving process, not Tangent[S] there
    return (_tangent_of, (type(t).primal, tuple(t)))


def _tangent_of(s, values):
    return Tangent[s](*values)


class Tangent(Any, metaclass=_TangentMeta):
    """``Tangent[S]``: the tangent of struct ``S``; one tangent per field, ``None`` for none."""


_TANGENTS = {}
numba_glue.register_family(_TangentMeta, Tangent, lambda s: Tangent[s])
