"""Arithmetic on tangents: ``nr.Tangent[S]`` values add, subtract, negate and scale field by
field (None is a zero), ``nr.zero_tangent(p)`` and ``nr.update(p, dp, step)``, in Python and in
compiled code.

A ``Tangent[S]`` is a record (a named tuple), so without these ``dp + dq`` concatenated the two
and ``0.1 * dp`` raised: a silently wrong optimiser step. In compiled code the operators and the
two functions are overloads of numbarules' own types and functions (a ``Tangent`` record type,
``zero_tangent``, ``update``): nothing another Numba program computes changes.
"""

import operator

import numpy as np
from numba import types
from numba.extending import overload

from .structs import Tangent, isstruct


# --- Python --------------------------------------------------------------------------------------

def _map2(op, a, b):
    if a is None and b is None:
        return None
    if isinstance(a, Tangent) or isinstance(b, Tangent):
        cls = type(a) if isinstance(a, Tangent) else type(b)
        fa = tuple(a) if a is not None else (None,) * len(b)
        fb = tuple(b) if b is not None else (None,) * len(a)
        if len(fa) != len(fb) or (a is not None and b is not None and type(a) is not type(b)):
            raise TypeError(f"cannot combine {type(a).__qualname__} and {type(b).__qualname__}")
        return cls(*(_map2(op, x, y) for x, y in zip(fa, fb)))
    if isinstance(a, tuple) or isinstance(b, tuple):
        fa = a if a is not None else (None,) * len(b)
        fb = b if b is not None else (None,) * len(a)
        if len(fa) != len(fb):
            raise TypeError(f"cannot combine tangents of {len(fa)} and {len(fb)} items")
        return tuple(_map2(op, x, y) for x, y in zip(fa, fb))
    if a is None:
        return op(0.0 * b, b)
    if b is None:
        return op(a, 0.0 * a)
    return op(a, b)


def _scale(t, c):
    if t is None:
        return None
    if isinstance(t, Tangent):
        return type(t)(*(_scale(x, c) for x in t))
    if isinstance(t, tuple):
        return tuple(_scale(x, c) for x in t)
    return t * c


def _check_scalar(c):
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, float, np.integer, np.floating)):
        return NotImplemented
    return c


def _add(self, other):
    if not isinstance(other, Tangent):
        return NotImplemented
    return _map2(operator.add, self, other)


def _sub(self, other):
    if not isinstance(other, Tangent):
        return NotImplemented
    return _map2(operator.sub, self, other)


def _mul(self, c):
    if _check_scalar(c) is NotImplemented:
        return NotImplemented
    return _scale(self, c)


def _neg(self):
    return _scale(self, -1.0)


ARITHMETIC = {"__add__": _add, "__sub__": _sub, "__mul__": _mul, "__rmul__": _mul,
              "__neg__": _neg}


def zero_tangent(p):
    """The zero tangent of ``p``: ``Tangent[S]`` of zeros for a struct (None where a field has
    no tangent), 0.0 for a float, zeros for a float array, a tuple of zero tangents for a tuple."""
    if isstruct(type(p)):
        return Tangent[type(p)](*(zero_tangent(x) for x in p))
    if isinstance(p, tuple):
        return tuple(zero_tangent(x) for x in p)
    if isinstance(p, np.ndarray):
        return np.zeros_like(p) if p.dtype.kind == "f" else None
    if isinstance(p, (float, np.floating)):
        return type(p)(0.0)
    return None


def update(p, dp, step):
    """``p`` moved by ``step`` times the tangent ``dp``: a new struct (or float, array, tuple)
    whose float and float-array fields are ``field + step * tangent``; fields without a tangent
    (None: integers, booleans) are kept. ``nr.update(params, grads, -lr)`` is a gradient step."""
    if isstruct(type(p)):
        if not isinstance(dp, Tangent[type(p)]):
            raise TypeError(f"nr.update: the tangent of a {type(p).__qualname__} is an "
                            f"nr.Tangent[{type(p).__qualname__}], not {type(dp).__qualname__}")
        return type(p)(*(update(x, d, step) for x, d in zip(p, dp)))
    if isinstance(p, tuple):
        return tuple(update(x, d, step) for x, d in zip(p, dp))
    if dp is None:
        return p
    return p + step * dp


# --- compiled code ---------------------------------------------------------------------------------

def _is_tangent(t):
    return isinstance(t, types.BaseNamedTuple) and issubclass(t.instance_class, Tangent)


def _record_impl(t, params, each, **ns):
    """``def impl(params): return Tangent_S(each(0), each(1), ...)`` for Tangent type ``t``,
    generated per type (Numba unrolls nothing over a record's fields by itself)."""
    items = "".join(f"{each(k)}, " for k in range(len(t)))
    ns = {"_cls": t.instance_class, **ns}
    exec(f"def impl({params}):\n    return _cls({items})\n", ns)  # noqa: S102
    return ns["impl"]


@overload(operator.add)
def _tangent_add(a, b):
    if _is_tangent(a) and _is_tangent(b) and a.instance_class is b.instance_class:
        return _record_impl(a, "a, b", lambda k: f"_add(a[{k}], b[{k}])", _add=_add_any)
    return None


@overload(operator.sub)
def _tangent_sub(a, b):
    if _is_tangent(a) and _is_tangent(b) and a.instance_class is b.instance_class:
        return _record_impl(a, "a, b", lambda k: f"_sub(a[{k}], b[{k}])", _sub=_sub_any)
    return None


@overload(operator.mul)
def _tangent_mul(a, b):
    if _is_tangent(a) and isinstance(b, (types.Float, types.Integer)):
        return _record_impl(a, "a, b", lambda k: f"_scale(a[{k}], b)", _scale=_scale_any)
    if _is_tangent(b) and isinstance(a, (types.Float, types.Integer)):
        return _record_impl(b, "a, b", lambda k: f"_scale(b[{k}], a)", _scale=_scale_any)
    return None


@overload(operator.neg)
def _tangent_neg(a):
    if _is_tangent(a):
        return _record_impl(a, "a", lambda k: f"_scale(a[{k}], -1.0)", _scale=_scale_any)
    return None


def _add_any(a, b):
    return _map2(operator.add, a, b)


def _sub_any(a, b):
    return _map2(operator.sub, a, b)


def _scale_any(t, c):
    return _scale(t, c)


def _plain_tuple(t):
    return isinstance(t, types.BaseTuple) and not _is_tangent(t)


def _itemwise(n, expr, name, params="a, b", **ns):
    """``def name(params): return (expr(0), expr(1), ...)``: a plain tuple's tangents item by
    item (``+`` on tuples would concatenate them). The parameters are named as the overloaded
    function's, as Numba requires of an overload's implementation."""
    items = "".join(f"{expr(k)}, " for k in range(n))
    ns = dict(ns)
    exec(f"def {name}({params}):\n    return ({items})\n", ns)  # noqa: S102
    return ns[name]


@overload(_add_any)
def _add_any_impl(a, b):
    if isinstance(a, types.NoneType) and isinstance(b, types.NoneType):
        return lambda a, b: None
    if isinstance(a, types.NoneType):
        return (lambda a, b: b) if isinstance(b, types.BaseTuple) else (lambda a, b: b + 0.0 * b)
    if isinstance(b, types.NoneType):
        return (lambda a, b: a) if isinstance(a, types.BaseTuple) else (lambda a, b: a + 0.0 * a)
    if _plain_tuple(a):
        return _itemwise(len(a), lambda k: f"_add(a[{k}], b[{k}])", "add", _add=_add_any)
    return lambda a, b: a + b


@overload(_sub_any)
def _sub_any_impl(a, b):
    if isinstance(a, types.NoneType) and isinstance(b, types.NoneType):
        return lambda a, b: None
    if isinstance(a, types.NoneType):
        return lambda a, b: _scale_any(b, -1.0)
    if isinstance(b, types.NoneType):
        return (lambda a, b: a) if isinstance(a, types.BaseTuple) else (lambda a, b: a + 0.0 * a)
    if _plain_tuple(a):
        return _itemwise(len(a), lambda k: f"_sub(a[{k}], b[{k}])", "sub", _sub=_sub_any)
    return lambda a, b: a - b


@overload(_scale_any)
def _scale_any_impl(t, c):
    if isinstance(t, types.NoneType):
        return lambda t, c: None
    if _plain_tuple(t):
        return _itemwise(len(t), lambda k: f"_scale(t[{k}], c)", "scale", "t, c",
                         _scale=_scale_any)
    if isinstance(c, types.NoneType):        # negation
        return lambda t, c: -t
    return lambda t, c: t * c


@overload(zero_tangent)
def _zero_tangent_impl(p):
    if isinstance(p, types.BaseNamedTuple) and isstruct(p.instance_class):
        cls = Tangent[p.instance_class]
        ns = {"_cls": cls, "_zero": zero_tangent}
        items = ", ".join(f"_zero(p[{k}])" for k in range(len(p)))
        exec(f"def zero(p):\n    return _cls({items}{',' if len(p) == 1 else ''})\n", ns)  # noqa: S102
        return ns["zero"]
    if isinstance(p, types.Array) and isinstance(p.dtype, types.Float):
        return lambda p: np.zeros_like(p)
    if isinstance(p, types.Float):
        return lambda p: p * 0.0
    if isinstance(p, types.BaseTuple):
        ns = {"_zero": zero_tangent}
        items = "".join(f"_zero(p[{k}]), " for k in range(len(p)))
        exec(f"def zero(p):\n    return ({items})\n", ns)  # noqa: S102
        return ns["zero"]
    return lambda p: None


@overload(update)
def _update_impl(p, dp, step):
    if isinstance(p, types.BaseNamedTuple) and isstruct(p.instance_class):
        ns = {"_cls": p.instance_class, "_update": update}
        items = ", ".join(f"_update(p[{k}], dp[{k}], step)" for k in range(len(p)))
        exec(f"def upd(p, dp, step):\n    return _cls({items}{',' if len(p) == 1 else ''})\n",  # noqa: S102
             ns)
        return ns["upd"]
    if isinstance(dp, types.NoneType):
        return lambda p, dp, step: p
    if isinstance(p, types.BaseTuple):
        ns = {"_update": update}
        items = "".join(f"_update(p[{k}], dp[{k}], step), " for k in range(len(p)))
        exec(f"def upd(p, dp, step):\n    return ({items})\n", ns)  # noqa: S102
        return ns["upd"]
    return lambda p, dp, step: p + step * dp
