"""The differentiation API: the gradient objects ``nr.grad`` and ``nr.value_and_grad``
(``nr.pullback`` is pullbacks.py's, ``nr.code`` and ``nr.ad_stats`` inspection.py's).

``nr.grad(f)`` and ``nr.value_and_grad(f)`` are gradient objects. Like generic functions they are
callable from Python (Numba's C dispatcher binds the arguments and jumps into the compiled
driver for their types: no Python runs in between) and from compiled code, where the call is
resolved while the caller is typed. The driver runs the forward kernel and the pullback kernel
in one compiled function, so residuals never cross into Python.
"""

import inspect
import re

import numba
import numba.typed
import numpy as np

from . import (cache, compile_flags, entries, function_values, kernels, numba_glue, registry, rules,
               targets)
from .ad import kinds
from .dispatch import GenericFunction
from .errors import NumbarulesError


class Gradient:
    """``nr.grad(f, argnums)`` / ``nr.value_and_grad(f, argnums)``."""

    def __new__(cls, *args, **kwargs):
        # A class per object so that __call__ can be the compiled entry itself (see cache).
        return object.__new__(type(cls.__name__, (cls,), {"__module__": cls.__module__}))

    def __init__(self, f, argnums, with_value, flags=compile_flags.DEFAULT):
        if not callable(f):
            raise TypeError(f"nr.grad differentiates a function, not {f!r}")
        if isinstance(argnums, bool) or not isinstance(argnums, (int, tuple)) or (
                isinstance(argnums, tuple) and not all(isinstance(a, int) for a in argnums)):
            raise TypeError(f"argnums must be an int or a tuple of ints, not {argnums!r}")
        self.f = f
        self._nr_gradient_of = f       # kernels names it in errors (no second derivatives yet)
        self.argnums = argnums
        self.with_value = with_value
        self.flags = flags
        kind = "value_and_grad" if with_value else "grad"
        name = getattr(f, "__name__", "f")
        self.__name__ = re.sub(r"\W", "_", f"{kind}_{name}")
        self.__qualname__ = f"{kind}({getattr(f, '__qualname__', name)})"
        self._drivers = {}
        self._type = None

    def __repr__(self):
        return f"<nr.{self.__qualname__}, argnums={self.argnums!r}>"

    def __reduce__(self):
        # the function and argnums; the receiving process compiles or loads its own kernels
        from . import pickling
        return pickling.reduce_gradient(self)

    @property
    def boundscheck(self):
        return self.flags.boundscheck

    @property
    def fastmath(self):
        return self.flags.fastmath

    def _nr_fingerprint(self):
        return ("gradient", self.f, self.argnums, self.with_value, self.flags)

    def __call__(self, *args, **kwargs):
        self._install()
        return type(self).__call__(*args, **kwargs)

    def _install(self):
        """Make calls from Python jump into the compiled entry for ``f``'s arities now: Numba's
        C dispatcher binds keywords and defaults, finds the overload for the argument types and
        runs the driver's machine code, with no Python in between (see entries)."""
        arities = _arities(self.f)
        if len(arities) == 1:
            params = _parameters(self.f)
            frozen = params is not None and all(_immutable(d) for _, d in params)
            entries.install_direct_entry(self, arities[0], self._check_values,
                                         lambda argtypes: self._driver(argtypes, entry=True,
                                                                       picking=True),
                                         signature=params if frozen else None,
                                         result_of=self._entry_result)
            if params is not None and not frozen:
                type(self).__call__ = staticmethod(_binding(self, type(self).__call__))
        else:
            entries.install_entry(self, arities, self._check_values, Gradient._resolve_entry)

    def _entry_result(self, callee, argtypes):
        """The compile result the entry runs for ``argtypes``: the driver's, or for a grad
        whose driver is value_and_grad's, that code with a wrapper returning the gradient alone
        (numba_glue.picked_result: a small module, no second compile of the kernel)."""
        cres = numba_glue.compile_result(callee, argtypes)
        shared = self._drivers.get((argtypes, "picked"))
        if shared is None or shared[0] is not callee:
            return cres
        return numba_glue.picked_result(cres, 1)

    def _check_values(self, args):
        # before the AD transform runs on types Numba could not give (a Python object: pyobject)
        error = _argument_error(self, args)
        if error is not None:
            raise error

    @property
    def _numba_type_(self):
        if self._type is None:
            self._type = numba_glue.callable_type(self, 0, Gradient._resolve)
        return self._type

    def _nr_node_for(self, argtypes, entry=False):
        found = self._drivers.get((tuple(argtypes), entry))
        return cache.node_of(found[0], argtypes) if found else None

    def _resolve(self, context, argtypes, entry=False):
        try:
            return self._driver(tuple(argtypes), entry)
        except (NumbarulesError, TypeError) as exc:
            numba_glue.pending_errors().append(exc)
            raise numba_glue.TypingError(str(exc)) from None

    def _resolve_entry(self, context, argtypes):
        return self._resolve(context, argtypes, entry=True)

    def _driver(self, argtypes, entry=False, picking=False, requester=None):
        """The compiled driver at ``argtypes``. Compiled callers get one that links the vjp (a
        fused vjp inlines into their loops); the Python entry one that calls the kernels by
        their symbols, so that each kernel's machine code is generated once (entries.Unlinked).

        The entry's driver returns what the object returns (the Python entry runs its machine
        code as it is: nothing picks items in Python), and is kept with the AD specialization.
        Its ``argtypes`` may hold ``types.Omitted`` (a default Numba's C dispatcher filled in):
        the driver is compiled for them, the kernels for the defaults' types. ``picking``: the
        caller is the direct entry, which can run value_and_grad's driver for a grad
        (``_entry_result``); a grad then shares it instead of compiling its own (``requester``:
        the grad, for whose call it is compiled).
        """
        for slot in ((argtypes, "picked"), (argtypes, entry)) if picking else ((argtypes, entry),):
            found = self._drivers.get(slot)
            if found is not None and found[1].alive:
                return found[0]
        given = numba_glue.given_types(argtypes)     # an omitted argument: its default's type
        spec, nums, decisions = kernels.gradient_spec(self.f, given, self.argnums, self.flags)
        with_value = self.with_value
        if entry:
            # one entry driver per specialization and kind: nr.grad(f) objects made again (or a
            # call that omits an argument with its default's type) reuse it
            key = (self.argnums, with_value)
            shared = spec.entry_drivers.get(key)
            if shared is not None and shared[1].alive:
                self._drivers[(argtypes, entry)] = shared
                return shared[0]
            drop = lambda: spec.entry_drivers.pop(key, None)      # noqa: E731
        else:
            drop = lambda: self._drivers.pop((argtypes, entry), None)      # noqa: E731
        node = cache.engine_node(f"{self.__qualname__} driver", decisions, [spec.node], drop)
        params = ", ".join(f"a{i}" for i in range(len(argtypes)))
        sep = ", " if params else ""
        ns = {"_seed": _one(spec.return_type), "__name__": cache.GENERATED}
        k = spec.kernels
        whole = entry and not isinstance(spec.target, rules.Rule) and bool(k.whole_body) and (
            k.fused or k.vjp is k.whole)
        if whole and not with_value and picking and not k.value_loop:
            # grad runs value_and_grad's kernel, through a wrapper that returns the gradient
            # alone (_entry_result): one compile of the forward and reverse serves both. Not
            # where a loop of the kernel runs for the value alone (its reverse a gather that
            # computes again what it reads, Kernels.value_loop): grad's own kernel returns no
            # value and LLVM drops that loop (Rosenbrock's gradient in half the time)
            disp = _gradient(self.f, self.argnums, True, self.flags)._driver(
                argtypes, True, requester=self)
            # kept apart from this object's own drivers: only the direct entry picks the
            # gradient out of it (the multi-arity trampoline calls drivers as they are)
            self._drivers[(argtypes, "picked")] = spec.entry_drivers[(self.argnums, True)]
            return disp
        if whole:
            # The gradient in one kernel: the vjp's forward and reverse with the seed and the
            # outputs of this gradient object; no other kernel of f is compiled for the call.
            params = ", ".join(spec.fn.params)
            ns = dict(spec.ns, _seed=ns["_seed"])
            body = ("    _dout = _seed\n" + "".join(line + "\n" for line in k.whole_body))
            value, grad = k.whole_value, lambda i: k.whole_tangents[i]
        elif entry and not isinstance(spec.target, rules.Rule) and not k.fused \
                and k.vjp is not k.whole:
            # The forward and the pullback called directly: the vjp is not compiled at all.
            ns.update(_fwd=entries.Unlinked.of_dispatcher(spec.fwd),
                      _bwd=entries.Unlinked.of_dispatcher(spec.bwd))
            body = (f"    _y, _res = _fwd({params})\n"
                    f"    _d = _bwd(_res, _seed)\n")
            value, grad = "_y", lambda i: f"_d[{i}]"
        else:
            ns["_vjp"] = entries.Unlinked.of_dispatcher(spec.vjp) if entry else spec.vjp
            body = f"    _r = _vjp({params}{sep}_seed)\n"
            value, grad = "_r[0]", lambda i: f"_r[{i + 1}]"
        grads = (grad(nums[0]) if isinstance(self.argnums, int)
                 else "(" + "".join(f"{grad(i)}, " for i in nums) + ")")
        result = f"{value}, {grads}" if with_value else grads
        src = f"def {self.__name__}({params}):\n{body}    return {result}\n"
        if whole:
            src = src.replace("\n", f"\n    # {self.__qualname__}: the forward and reverse of "
                              f"{spec.fn.name} ({spec.fn.file}:{spec.fn.firstline}) in one "
                              f"function\n", 1)
        if whole and k.chunks:
            # the chunk loops as functions of their own, on threads (ad/outline.py)
            for fname, chunk in k.chunks:
                targets.exec_source(chunk, ns, f"{self.__qualname__}.{fname}", origin=spec.fn)
                ns[fname] = cache.owned(ns[fname], f"{self.__qualname__} ({fname})",
                                        owner=requester or self, depends=(node,),
                                        options=dict(self.flags.options(), parallel=True),
                                        python=False)
        targets.exec_source(src, ns, self.__qualname__, origin=spec.fn if whole else None)
        # The entry's driver is what Python calls (entries.install_direct_entry), with a CPython
        # wrapper; it is stored on disk under what it computes
        persist = (("entry driver", self.f, self.argnums, self.flags, with_value) if entry
                   else ("driver", self))
        # (labelled and counted for the object whose call compiles it: grad's first call
        # compiles the kernel value_and_grad shares)
        requester = requester or self
        options = self.flags.options()
        if whole and k.parallel and not k.chunks:
            options["parallel"] = True      # a prange loop's chunks (ad/parallel.py)
        disp = cache.owned(ns[self.__name__], requester.__qualname__, owner=requester,
                           depends=(node,), options=options or None,
                           persist=persist, python=entry)
        self._drivers[(argtypes, entry)] = (disp, node)
        if entry:
            spec.entry_drivers[key] = (disp, node)
        return disp


def _parameters(f):
    """The parameters of ``f`` as the compiled entry takes them (names and defaults, so that
    Numba's C dispatcher binds keywords and fills defaults), or None: a generic function (methods
    are chosen on positional types) or a signature with ``*args``, ``**kwargs`` or keyword-only
    parameters."""
    if isinstance(f, GenericFunction) or getattr(f, "_nr_gradient_of", None) is not None \
            or isinstance(f, np.ufunc) or targets._is_library(f):
        return None
    try:
        params = list(inspect.signature(_python_function(f)).parameters.values())
    except (TypeError, ValueError):
        return None
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not all(p.kind in plain and p.name.isidentifier() and not p.name.startswith("_")
               for p in params):
        return None
    return [(p.name, p.default) for p in params]


def _immutable(default):
    """Whether a default value may become a constant of compiled code: Numba compiles an omitted
    argument's default into the code (``types.Omitted``), so an array default the program
    mutates later would be read as it was at the first call."""
    if default is inspect.Parameter.empty or default is None:
        return True
    if isinstance(default, tuple) and not hasattr(default, "_fields"):
        return all(_immutable(d) for d in default)
    return isinstance(default, (bool, int, float, complex, str, np.generic))


def _binding(grad, entry):
    """``entry`` behind a Python binding of the arguments, for a function with a mutable default
    (an array): each call passes the default as it is now. The one case a gradient object's call
    runs Python before the compiled driver."""
    signature = inspect.signature(_python_function(grad.f))
    n = len(signature.parameters)

    def call(*args, **kwargs):
        if kwargs or len(args) != n:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{grad.__qualname__}: {exc}") from None
            bound.apply_defaults()
            args = bound.args
        return entry(*args)
    return call


def _argument_error(grad, args):
    """A TypeError naming the argument Numba cannot type (a lambda, a Python object), or None."""
    for k, a in enumerate(args):
        try:
            ok = numba.typeof(a) is not None and not isinstance(numba.typeof(a),
                                                                numba.types.PyObject)
        except ValueError:
            ok = False
        if not ok:
            what = ("a callable object" if callable(a) else f"a {type(a).__name__}")
            if isinstance(a, (np.ufunc, type(len))):
                return TypeError(
                    f"{grad.__qualname__}: argument {k} is {a!r:.60}, a function with no Python "
                    f"source, which compiled code cannot take as a value. Hint: pass a function "
                    f"of your own that calls it (def f(x): return "
                    f"{getattr(a, '__name__', 'g')}(x)).")
            return TypeError(
                f"{grad.__qualname__}: argument {k} is {what} ({a!r:.60}), which compiled code "
                f"cannot take. Pass floats, arrays, structs, tuples of those, and functions "
                f"(Python functions and lambdas, @njit and nr.jit functions, generic functions, "
                f"gradient objects).")
    return None


def _arities(f):
    if getattr(f, "_nr_gradient_of", None) is not None:
        return _arities(f._nr_gradient_of)
    if isinstance(f, GenericFunction):
        return f.arities()
    if isinstance(f, np.ufunc):
        return [f.nin]
    if targets._is_library(f):
        # a NumPy function called with its leading arguments (np.sum(x), np.sum(x, 0))
        try:
            params = list(inspect.signature(f).parameters.values())
        except (TypeError, ValueError):
            return [1, 2]
        required = sum(p.default is p.empty and p.kind == p.POSITIONAL_OR_KEYWORD
                       for p in params)
        return list(range(max(required, 1), min(len(params), 3) + 1))
    try:
        return [len(inspect.signature(_python_function(f)).parameters)]
    except (TypeError, ValueError):
        return [0, 1]


def _python_function(f):
    """The Python function whose signature calls of ``f`` follow (an njit function's own)."""
    return f.py_func if numba_glue.is_dispatcher(f) else f


def _one(t):
    return np.float32(1.0) if t == numba.float32 else 1.0


def grad(f, argnums=0, *, boundscheck=False, fastmath=False):
    """The gradient of scalar-valued ``f`` with respect to argument(s) ``argnums``.

    An int gives one tangent, a tuple gives a tuple. Tangents: float for float, an array of the
    same shape for an array, ``nr.Tangent[S]`` for a struct (nested structs: Tangents of
    Tangents), a tuple of tangents for a tuple, None for integers and booleans.

    ``boundscheck=True`` compiles the generated kernels with Numba's bounds checking: an index
    past the end of an array raises IndexError instead of reading memory (``check_grad`` uses
    it; ``NUMBA_BOUNDSCHECK=1`` in the environment turns it on everywhere).

    ``fastmath=True`` trades the last bits of rounding for speed, as XLA does by default: float
    sums and products in the generated kernels may be reassociated (Numba's ``fastmath={"reassoc"}``
    alone: NaN, inf and signed zeros keep their meaning), so a sum carried across a loop's
    iterations is split into SIMD lanes, and ``math.exp`` / ``math.tanh`` of float64 values run
    vmath's branch-free versions (within 0.75 and 1.2 ulp), which vectorise. A sum of n terms
    then differs from the sequential one by rounding (at most about n ulp of the sum of the
    terms' magnitudes, the same bound as the sequential sum's own error); the value returned
    by ``value_and_grad`` is computed the same way.
    """
    return _gradient(f, argnums, False, compile_flags.Flags(boundscheck, fastmath))


def value_and_grad(f, argnums=0, *, boundscheck=False, fastmath=False):
    """Like ``grad``, returning ``(value, gradient)``."""
    return _gradient(f, argnums, True, compile_flags.Flags(boundscheck, fastmath))


def _gradient(f, argnums, with_value, flags):
    # One object per (f, argnums, kind), held by f (numbarules.registry): its compiled drivers
    # are reused by every nr.grad(f) (linking a driver re-optimises the kernels it calls:
    # seconds for large array code).
    try:
        key = (argnums, with_value, flags)
        made = registry.table(f, "_nr_gradients")
        hit = made.get(key)
    except TypeError:          # unhashable argnums, or f holds no table
        return Gradient(f, argnums, with_value, flags)
    if hit is None:
        hit = made[key] = Gradient(f, argnums, with_value, flags)
    return hit


def spec_for_call(f, args, argnums=None, flags=None, caller="pullback"):
    if isinstance(f, Gradient):     # nr.code(nr.grad(f, argnums), ...) means f's kernels
        flags = f.flags if flags is None else flags
        f, argnums = f.f, f.argnums if argnums is None else argnums
    flags = compile_flags.DEFAULT if flags is None else flags
    args = _positional(f, args, caller)
    argtypes = tuple(numba.typeof(a) for a in args)
    if argnums is not None:
        return kernels.spec_at(f, argtypes, argnums, flags)[0]
    # every argument: a function passed as a value gets None, as an integer does
    target, _ = targets.target_for(f, argtypes)
    targets.check_arguments(f, argtypes, tuple(not kinds.is_function(t) for t in argtypes))
    return kernels.specialize(target, argtypes, tuple(kinds.differentiable(t) for t in argtypes),
                              flags)


def _positional(f, args, caller):
    """``args`` with ``f``'s defaults filled in, or a TypeError naming ``caller(f)`` when they
    cannot be ``f``'s positional arguments (rather than Numba's "Mismatch number of argument
    types" from deep inside typing)."""
    if isinstance(f, GenericFunction):
        # dispatch says which methods take these arguments
        return function_values.arguments(tuple(args))
    if isinstance(f, np.ufunc) or targets._is_library(f):
        # NumPy's own functions: their Python defaults (out=None, np._NoValue) are not what a
        # compiled call passes; the arguments given are the call
        return args
    func = f.py_func if numba_glue.is_dispatcher(f) else f
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return function_values.arguments(tuple(args))
    try:
        bound = sig.bind(*args)
    except TypeError as exc:
        name = getattr(f, "__qualname__", repr(f))
        raise TypeError(f"{caller}({name}): {exc}; {name}{sig} takes "
                        f"{len(sig.parameters)} arguments, {len(args)} "
                        f"{'was' if len(args) == 1 else 'were'} given") from None
    bound.apply_defaults()
    return function_values.arguments(tuple(bound.args))
