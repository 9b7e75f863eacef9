"""Functions passed as arguments: what compiled code receives for each.

Julia specialises a method on the type of each function argument, and every function has a type
of its own; Numba does the same for ``@njit`` dispatchers (``types.Dispatcher(d)``) and
numbarules for generic functions and gradient objects (``numba_glue.CallableType``). Those pass
as they are: the specialization of the callee is keyed on the function's identity, and its
generated code calls the function by name (``frontend.normalize(func, known)``), so the AD
transform sees the call as it sees a call of a global function: method decisions and rules are
recorded on its engine node, and a new method of the passed function drops what relied on it.

A plain Python function, a lambda or a closure has no Numba type. Here it becomes the compiled
helper of its code (``methods.jit_helper``), one per (code, globals, captured values, defaults):
a closure made again with the same captured values (``lambda y: rhs(y, k)`` in a loop) reuses
the compiled code; one whose captured values change compiles again, as Numba's own closures
do. Captured values must be immutable: compiled code keeps them as constants, so an array it
captured and the program later changed would be read stale (a silent wrong answer); such a
closure is refused (``FunctionValueError``) with the way round it.
"""

import types
import warnings
import weakref

import numpy as np

from . import methods, numba_glue
from .errors import FunctionValueError

_COMPILED = weakref.WeakKeyDictionary()   # code object -> {key of the values it closes over: helper}
_WARN_AFTER = 8     # distinct captured values of one closure before a warning says it recompiles
_warned = weakref.WeakSet()


def arguments(args):
    """``args`` with each plain Python function replaced by what compiled code takes for it
    (the same tuple when there is none: the common case costs one scan)."""
    if not has_python_function(args):
        return args
    return tuple(compiled(a) if type(a) is types.FunctionType else a for a in args)


def has_python_function(args):
    return any(type(a) is types.FunctionType for a in args)


def compiled(f):
    """The compiled helper compiled code receives for the Python function ``f``."""
    module = (getattr(f, "__module__", None) or "").split(".")[0]
    if module in ("numpy", "scipy", "numba"):
        raise FunctionValueError(
            f"{f.__module__}.{f.__qualname__} was passed as an argument: compiled code takes "
            f"functions with Python source. Hint: pass a function of your own that calls it "
            f"(def g(x): return {f.__name__}(x)).")
    code = f.__code__
    key = (id(f.__globals__),) + tuple((name, _frozen(f, name, value))
                                       for name, value in _captured(f))
    table = _COMPILED.setdefault(code, {})
    helper = table.get(key)
    if helper is None:
        helper = table[key] = methods.jit_helper(f, ("value",) + key)
        if len(table) > _WARN_AFTER and code not in _warned:
            _warned.add(code)
            warnings.warn(
                f"numbarules: {_where(f)} has been passed with {len(table)} different captured "
                f"values, and each compiles its own code. Hint: pass the values that change as "
                f"arguments instead of capturing them.", RuntimeWarning, stacklevel=4)
    return helper


def _captured(f):
    """(name, value) of what ``f`` closes over, its defaults and the numbers it reads from its
    module: compiled code's constants. (A global number is keyed on its value, so that a lambda
    reading a module's loop variable computes with its value now; global arrays are constants
    of compiled code as in every Numba function.)"""
    glb = f.__globals__
    for name in sorted(methods.global_names(f)):
        value = glb.get(name)
        if isinstance(value, (bool, int, float, complex, np.generic)):
            yield f"global {name}", value
    for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
        try:
            yield name, cell.cell_contents
        except ValueError:          # an empty cell: a name bound after the closure was made
            yield name, None
    for k, d in enumerate(f.__defaults__ or ()):
        yield f"default {k}", d


def _frozen(f, name, v):
    """A key for captured value ``v`` equal for equal immutable values; refuses mutable ones."""
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes, np.generic)):
        return (type(v), repr(v))      # repr: NaN equals NaN, 1 and 1.0 and True differ
    if isinstance(v, tuple):
        return (tuple,) + tuple(_frozen(f, name, e) for e in v)
    if callable(v) or isinstance(v, types.ModuleType):
        # a function, generic function, dispatcher or class: compiled code resolves it by
        # identity (the helper holds the first closure, so the id stays this object's)
        return ("object", id(v))
    what = (f"an array of shape {v.shape}" if isinstance(v, np.ndarray)
            else f"a {type(v).__name__}")
    raise FunctionValueError(
        f"{_where(f)} was passed as an argument, and it captures {name!r}, {what}: compiled "
        f"code would keep its values as they are now and miss later changes. Hint: make it a "
        f"parameter of the function (def f(y, {name}): ...) and pass it along with the "
        f"function (solver(f, y0, {name})).")


def _where(f):
    code = f.__code__
    what = "the lambda" if f.__name__ == "<lambda>" else f"the function {f.__qualname__}"
    return f"{what} at {code.co_filename}:{code.co_firstlineno}"


def known(func, argtypes):
    """{parameter: function} for the parameters of ``func`` whose Numba type (in ``argtypes``)
    is one function's own: the specialization at ``argtypes`` calls that function by name."""
    code = getattr(func, "__code__", None)
    if code is None:
        return {}
    params = code.co_varnames[:code.co_argcount]
    found = {}
    for p, t in zip(params, argtypes):
        f = numba_glue.function_of(t)
        if f is not None:
            found[p] = f
    return found
