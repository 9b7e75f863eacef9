"""Forward mode from Python: ``nr.jvp(f, argnums)(*args, tangent) -> (y, dy)``.

The tangent kernel of a call of ``f`` itself (``tangent_kernels.specialize(..., entry_of=f)``:
a rule of ``f`` applies there as it would inside another function) computes the value and the
directional derivative in one pass, with no tape.
"""

import inspect
import re
import numbers

import numba
import numpy as np

from . import api, function_values, kernels, pullbacks, registry, tangent_kernels, targets
from .ad import kinds
from .dispatch import GenericFunction
from .structs import Tangent, isstruct


class Jvp:
    """``nr.jvp(f, argnums)``."""

    def __init__(self, f, argnums):
        if not callable(f):
            raise TypeError(f"nr.jvp differentiates a function, not {f!r}")
        if isinstance(argnums, bool) or not isinstance(argnums, (int, tuple)) or (
                isinstance(argnums, tuple) and not all(isinstance(a, int) for a in argnums)):
            raise TypeError(f"argnums must be an int or a tuple of ints, not {argnums!r}")
        self.f, self.argnums = f, argnums
        self._specs = {}        # (argument types, argnums) -> the entry's tangent kernel
        self._arity = None      # f's number of parameters, where calls need no binding
        name = getattr(f, "__qualname__", getattr(f, "__name__", "f"))
        self.__qualname__ = f"jvp({name})"
        self.__name__ = re.sub(r"\W", "_", f"jvp_{getattr(f, '__name__', 'f')}")

    def __repr__(self):
        return f"<nr.{self.__qualname__}, argnums={self.argnums!r}>"

    def __call__(self, *args):
        if not args:
            raise TypeError(f"{self.__qualname__} takes the arguments of "
                            f"{getattr(self.f, '__name__', 'f')}, then the tangent")
        *primal, tangent = args
        if len(primal) != self._arity:
            primal = api._positional(self.f, tuple(primal), "jvp")
        else:
            primal = function_values.arguments(tuple(primal))
        nums = kernels.positions(self.argnums, len(primal))
        if isinstance(self.argnums, int):
            tangents = (tangent,)
        else:
            if not isinstance(tangent, tuple) or len(tangent) != len(nums):
                raise ValueError(f"{self.__qualname__}: argnums is {self.argnums!r}, so the "
                                 f"tangent must be a tuple of {len(nums)} tangents, one per "
                                 f"differentiated argument, not {pullbacks.describe(tangent)}")
            tangents = tangent
        spec = self._entry(primal, nums)
        given = [None] * len(primal)
        for k, t in zip(nums, tangents):
            given[k] = self._tangent(k, primal[k], t, spec)
        return spec.jvp(*primal, *(given[k] for k in sorted(set(nums))))

    def _entry(self, primal, nums):
        """The tangent kernel of a call of f with these arguments, tangents for ``nums``."""
        try:
            argtypes = tuple(numba.typeof(a) for a in primal)
        except ValueError:
            argtypes = None
        if argtypes is None or any(isinstance(t, numba.types.PyObject) for t in argtypes):
            raise api._argument_error(self, primal)
        spec = self._specs.get((argtypes, nums))
        if spec is None or not spec.alive:
            mask = tuple(i in nums for i in range(len(primal)))
            targets.check_arguments(self.f, argtypes, mask)
            spec = self._specs[(argtypes, nums)] = _spec(self.f, argtypes, mask)
            self._arity = _arity(self.f)
        return spec

    def _tangent(self, k, arg, t, spec):
        return _tangent(self.__qualname__, f"the tangent of argument {k}", arg, t,
                        spec.writes_arguments)


def _arity(f):
    """The number of parameters of ``f`` when every call must pass them all (no defaults), so
    that a call with that many arguments needs no binding; else None."""
    try:
        params = inspect.signature(api._python_function(f)).parameters.values()
    except (TypeError, ValueError):
        return None
    plain = all(p.kind == p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in params)
    return len(params) if plain and not isinstance(f, GenericFunction) else None


def _spec(f, argtypes, mask):
    return tangent_kernels.specialize(f, argtypes, mask, entry_of=f)


def _tangent(name, what, arg, t, copy=False):
    """``t`` checked against the argument ``arg`` it is a tangent of, converted to its kind."""
    def refuse(expected):
        raise ValueError(f"{name}: {what} must be {expected}, like the argument, not "
                         f"{pullbacks.describe(t)}")
    if isinstance(arg, np.ndarray):
        if arg.dtype.kind != "f":
            return None
        if not isinstance(t, np.ndarray) or t.shape != arg.shape or t.dtype.kind not in "fiu":
            refuse(f"an array of shape {arg.shape}")
        order = "F" if arg.flags.f_contiguous and not arg.flags.c_contiguous else "C"
        # a copy where the kernel writes into the tangent (of an argument the function writes
        # into): the caller's array is left as it was
        return np.array(t, dtype=arg.dtype, order=order, copy=True if copy else None)
    if isinstance(arg, (float, np.floating)):
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, numbers.Real):
            refuse("a real number")
        return np.float32(t) if isinstance(arg, np.float32) else float(t)
    if isstruct(type(arg)):
        cls = Tangent[type(arg)]
        if not isinstance(t, cls):
            refuse(f"an nr.Tangent[{type(arg).__name__}]")
        return cls(*(_tangent(name, f"{what}.{field}", a, b, copy)
                     for field, a, b in zip(type(arg)._nr_fields, arg, t)))
    if isinstance(arg, tuple) and kinds.is_float_tuple(numba.typeof(arg)):
        if not isinstance(t, tuple) or len(t) != len(arg):
            refuse(f"a tuple of {len(arg)} tangents")
        return tuple(_tangent(name, f"{what}[{k}]", a, b, copy)
                     for k, (a, b) in enumerate(zip(arg, t)))
    return None        # integers, booleans: no tangent


def jvp(f, argnums=0):
    """The directional derivative of ``f``: ``nr.jvp(f, argnums)(*args, tangent) -> (y, dy)``.

    ``tangent`` has the kind and shape of argument ``argnums`` (a tuple of tangents when
    ``argnums`` is a tuple); ``dy`` has the kind and shape of ``y``. Forward mode: one pass,
    no tape, the cost of a few evaluations of ``f``.
    """
    return registry.held(f, "_nr_jvps", argnums, lambda: Jvp(f, argnums))

