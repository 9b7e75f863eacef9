"""The differentiation API: grad, value_and_grad, pullback, code, ad_stats.

``nr.grad(f)`` and ``nr.value_and_grad(f)`` are gradient objects. Like generic functions they are
callable from Python (Numba's C dispatcher binds the arguments and jumps into the compiled
driver for their types: no Python runs in between) and from compiled code, where the call is
resolved while the caller is typed. The driver runs the forward kernel and the pullback kernel
in one compiled function, so residuals never cross into Python.
"""

import copy
import inspect
import re

import numba
import numba.typed
import numpy as np

from . import (cache, compile_flags, entries, function_values, kernels, numba_glue, registry, rules,
               targets)
from .ad import kinds
from .dispatch import GenericFunction
from .errors import NumbarulesError, RuleError
from .structs import Tangent, isstruct


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
        nums = _argnums(self.argnums, len(argtypes))
        mask = tuple(i in nums for i in range(len(argtypes)))
        targets.check_arguments(self.f, given, mask)
        target, decisions = targets.target_for(self.f, given)
        spec = kernels.specialize(target, given, mask, self.flags)
        kernels.check_differentiable_output(spec)
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


def _argnums(argnums, n):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not -n <= a < n:
            raise TypeError(f"argnums {argnums!r} out of range for a call with {n} arguments")
    return tuple(a % n for a in nums)


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
    target, _ = targets.target_for(f, argtypes)
    if argnums is None:
        # every argument: a function passed as a value gets None, as an integer does
        targets.check_arguments(f, argtypes, tuple(not kinds.is_function(t) for t in argtypes))
        mask = tuple(kinds.differentiable(t) for t in argtypes)
    else:
        nums = _argnums(argnums, len(args))
        mask = tuple(i in nums for i in range(len(args)))
        targets.check_arguments(f, argtypes, mask)
    return kernels.specialize(target, argtypes, mask, flags)


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


def pullback(f, *args, boundscheck=False, fastmath=False):
    """``(y, pb)``: the value of ``f(*args)`` and its pullback; ``pb(dy)`` returns one tangent per
    argument (None for integers and booleans).

    ``dy`` must have the kind and shape of ``y`` (a float for a float, an array of the same
    shape for an array, a tuple or ``nr.Tangent`` of those for a tuple or struct); anything else
    raises ValueError naming ``f``. A rule's tangents are checked against the arguments' shapes
    (``nr.RuleError``). ``boundscheck``, ``fastmath``: as for ``nr.grad``.
    """
    given = len(args)
    args = _positional(f.f if isinstance(f, Gradient) else f, args, "pullback")
    spec = spec_for_call(f, args, flags=compile_flags.Flags(boundscheck, fastmath))
    y, residuals = spec.fwd(*args)
    name = f"pullback({getattr(f, '__qualname__', f)})"
    bwd = _frozen_pullback(spec, residuals, y)
    # A reverse pass that restores the arrays the forward overwrote (or pops saved references)
    # leaves its residuals as they were before the forward: run again, it would start from the
    # wrong arrays (silently wrong). Such a pullback keeps a copy of the arguments, and each
    # call after the first runs the forward again on it.
    state = {"residuals": residuals, "fresh": True,
             "args": _copied(args) if spec.kernels.changes_residuals else None}
    fwd = _frozen_forward(spec, args) if state["args"] is not None else None

    def pb(dy):
        dy = _cotangent(name, y, dy)
        if not state["fresh"] and state["args"] is not None:
            state["residuals"] = fwd(*state["args"])[1]
        state["fresh"] = False
        tangents = bwd(state["residuals"], dy)
        if isinstance(spec.target, rules.Rule):
            for k, (a, t) in enumerate(zip(args, tangents)):
                _check_tangent(f"{spec.target!r}", f"tangent {k}", a, t)
        return tangents[:given]     # one per argument passed (defaults are not)
    pb.__qualname__ = name
    return y, pb


def _copied(args):
    """A deep copy of ``args`` that shares the functions among them (passed as values)."""
    return copy.deepcopy(args, {id(a): a for a in args if callable(a)})


def _frozen_forward(spec, args):
    """The forward kernel as compiled now for ``args`` (the world the pullback was made in, as
    _frozen_pullback), or its dispatcher where that compiled version is not found."""
    try:
        entry = spec.fwd.overloads.get(tuple(numba.typeof(a) for a in args))
    except (ValueError, TypeError):
        entry = None
    return entry.entry_point if entry is not None else spec.fwd


def _frozen_pullback(spec, residuals, y):
    """The pullback kernel as compiled now, for the cotangent ``_cotangent`` makes of any ``dy``.

    A pullback runs in the world it was made in (Julia's world age): a method or rule added
    later recompiles what depends on it, but this ``pb`` keeps the code its forward ran with,
    and calling it never compiles anything. Where the cotangent's type has no compiled version
    (a result of no float kind), the kernel is called through its dispatcher while it is current.
    """
    try:
        ty = numba.typeof(y)
        sig = (numba.typeof(residuals), kernels.tangent_type(ty))
    except ValueError:
        return spec.bwd
    if not kinds.differentiable(ty):
        return spec.bwd
    spec.bwd.compile(sig)
    return spec.bwd.overloads[sig].entry_point


def _cotangent(name, y, dy, where="the cotangent"):
    """``dy`` checked against the result ``y`` it is the cotangent of (and converted to y's
    float type); ValueError naming the pullback otherwise."""
    def refuse(expected):
        raise ValueError(f"{name}: {where} must be {expected}, like the result, not "
                         f"{_describe(dy)}")
    if isinstance(y, np.ndarray):
        if not isinstance(dy, np.ndarray) or dy.shape != y.shape or dy.dtype.kind not in "fiu":
            refuse(f"an array of shape {y.shape}")
        # the result's own type (dtype, layout): the pullback was compiled for it
        if y.flags.f_contiguous and not y.flags.c_contiguous:
            return np.asfortranarray(dy, dtype=y.dtype)
        return np.ascontiguousarray(dy, dtype=y.dtype)
    if isinstance(y, (float, np.floating)):
        if isinstance(dy, (bool, np.bool_)) or not isinstance(dy, (int, float, np.integer,
                                                                   np.floating)):
            refuse("a real number")
        return np.float32(dy) if isinstance(y, np.float32) else float(dy)
    if isinstance(y, tuple):
        kind = Tangent[type(y)] if isstruct(type(y)) else tuple
        if not isinstance(dy, tuple) or len(dy) != len(y) or (
                kind is not tuple and type(dy) is not kind):
            refuse(f"a {kind.__qualname__} of {len(y)} entries")
        parts = [_cotangent(name, a, b, f"{where}[{k}]") for k, (a, b) in enumerate(zip(y, dy))]
        return tuple(parts) if kind is tuple else kind(*parts)
    if dy is not None and not isinstance(dy, (int, float, np.integer, np.floating)):
        refuse("None (the result carries no tangent)")
    return None


def _check_tangent(rule, what, arg, t):
    """A rule's tangent ``t`` for argument ``arg``: arrays of the argument's shape."""
    if t is None:
        return
    if isinstance(arg, np.ndarray):
        if not isinstance(t, np.ndarray) or t.shape != arg.shape:
            raise RuleError(f"{rule}: {what} is {_describe(t)}, but the argument is an array "
                            f"of shape {arg.shape}")
    elif isinstance(arg, tuple) and isinstance(t, tuple):
        for k, (a, b) in enumerate(zip(arg, t)):
            _check_tangent(rule, f"{what}[{k}]", a, b)


def _describe(v):
    if isinstance(v, np.ndarray):
        return f"a {v.dtype} array of shape {v.shape}"
    return f"{type(v).__name__} {v!r:.60}"


def code(f, *args, kind="forward"):
    """The generated source of ``f``'s kernels at the types of ``args``. ``f`` may also be an
    ``nr.grad`` / ``nr.value_and_grad`` object: its function's kernels for its ``argnums``, or
    an ``nr.hvp`` object (``args`` then end with the direction): the kernels of the gradient of
    the directional derivative, whose "primal" is ``f``'s tangent kernel.

    ``kind``: "forward" (primal plus saves), "pullback" (the reverse sweep), "vjp" (both fused),
    "primal" (the normalised primal the two are built from), "jvp" (forward mode's tangent
    kernel, tangents for every float argument), or "driver" (the vjp as the gradient Python
    calls runs it: a prange loop's chunk loops as functions of their own, compiled with
    ``parallel=True``, after it; ad/outline.py).
    """
    kinds_ = ("forward", "pullback", "vjp", "primal", "jvp", "driver")
    if kind not in kinds_:
        raise ValueError(f"kind must be one of {sorted(kinds_)}, not {kind!r}")
    from . import higher
    if isinstance(f, higher.Hvp):
        # nr.hvp(f): the kernels of the gradient of f's directional derivative
        f, args = f.gradient(args)
    if kind == "jvp":
        from . import tangent_kernels
        g = f.f if isinstance(f, Gradient) else f
        args = _positional(g, args, "code")
        argtypes = tuple(numba.typeof(a) for a in args)
        target, _ = targets.target_for(g, argtypes)
        mask = tuple(kinds.differentiable(t) for t in argtypes)
        targets.check_arguments(g, argtypes, mask)
        return tangent_kernels.specialize(target, argtypes, mask).source
    spec = spec_for_call(f, args, caller="code")
    if kind == "driver":
        # nr.grad's own kernel returns no value where a loop runs for the value alone
        alone = isinstance(f, Gradient) and not f.with_value and spec.kernels.value_loop
        return _driver_source(spec, value=not alone)
    sources = {"forward": spec.kernels.forward, "pullback": spec.kernels.pullback,
               "vjp": spec.kernels.vjp, "primal": spec.primal_source}
    return sources[kind]


def _driver_source(spec, value=True):
    """The vjp with the body the gradient's driver runs (``Kernels.whole_body``: a parallel
    loop's chunk loops outlined), followed by the chunk functions; the vjp itself where the
    driver calls the kernels instead. ``value=False``: nr.grad's kernel of its own, which
    returns the gradient alone (``Kernels.value_loop``)."""
    k = spec.kernels
    if not k.whole_body:
        return k.vjp
    params = ", ".join(list(spec.fn.params) + ["_dout"])
    tangents = "".join(t + ", " for t in k.whole_tangents)
    ret = (f"    return ({k.whole_value}, {tangents})\n" if value else
           f"    # no value returned: LLVM deletes the loop that computes it alone\n"
           f"    return ({tangents})\n")
    text = (f"def driver_{spec.name}({params}):\n" + "".join(line + "\n" for line in k.whole_body)
            + ret)
    return text + "".join(f"\n\n{src}" for _, src in k.chunks)


def _nbytes(v, seen):
    """Bytes a residual holds: a rule's or callee's kept residuals are tuples; the arrays a
    rebinding dropped are on lists (each array counted once: a swap puts the same two on them
    again and again)."""
    if isinstance(v, np.ndarray):
        key = (v.__array_interface__["data"][0], v.nbytes)
        if key in seen:
            return 0
        seen.add(key)
        return v.nbytes
    if isinstance(v, (tuple, numba.typed.List)):
        return sum(_nbytes(x, seen) for x in v)
    return 8


def ad_stats(f, *args, argnums=None):
    """What the reverse pass of ``nr.grad(f)`` at these arguments saves.

    ``tape_bytes``: bytes pushed on the tapes; ``residual_bytes``: tapes plus the arrays and
    scalars handed to the pullback (arrays that are inputs count too); ``fused``: whether the
    gradient runs as one fused pass (a reduction loop: nothing is saved, or at most one
    iteration's tape, reused by every iteration; both count as 0). Runs the forward kernel once.
    """
    spec = spec_for_call(f, args, argnums)
    _, residuals = spec.fwd(*args)
    names = spec.kernels.residuals
    values = dict(zip(names, residuals))
    tape = sum(int(values[f"_k_{k}"]) * values[f"_tape_{k}"].itemsize for k in spec.kernels.tape_keys)
    seen = set()
    total = sum(_nbytes(v, seen) for n, v in values.items() if not n.startswith("_tape_"))
    if spec.kernels.fused:
        # grad and value_and_grad run the fused vjp: one pass, at most one iteration saved.
        tape = total = 0
    return {"tape_bytes": tape, "residual_bytes": total + tape, "residuals": names,
            "fused": spec.kernels.fused}
