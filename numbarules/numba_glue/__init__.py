"""The CPU door into ``numba.core``: typing templates, data models, the compile pipeline.

This package is the one place that touches ``numba.core`` on the CPU: this module (the recording
pass, our dispatchers, typing helpers), ``callables`` (the Numba type of our callables, unlinked
calls, struct families), ``located`` (run-time errors at the user's line), ``persist`` (compiled
code to bytes and back, for the disk cache) and ``intrinsics`` (tapes, zero adjoints and
trampolines that compile inline in generated kernels). Three mechanisms live here (see
docs/numba-internals.md for how each was found and measured):

1. ``CallableType``: the Numba type of a generic function (``_numba_type_``). It is a
   ``types.Function`` over a template built per (owner, world). The template's ``generic()``
   asks a resolver callback for the dispatcher of the method that applies, and hands the call to
   it through ``types.Dispatcher(d).get_call_type``. Lowering then finds the callee's compiled
   code through ``get_impl_key``, exactly as for a call to an ``@njit`` function.
2. ``recording_pipeline(observer)``: Numba's nopython pipeline plus one analysis pass after type
   inference that reports every call the function makes to generic functions and to our own
   dispatchers. That is how every compiled specialization records its dispatch decisions.
3. ``Dispatcher``: a ``CPUDispatcher`` whose compile-on-miss path can be hooked (resolution and
   readable errors first) and whose overloads can be dropped one signature at a time
   (``drop_overload``), so invalidation never recompiles a signature that is still valid.
   ``AdoptingDispatcher``, the Python entry of a gradient or generic function, runs another
   dispatcher's compile result for each signature and compiles nothing of its own.
"""

import contextlib
import gc
import inspect
import warnings
import threading

from numba.core import compiler, errors, ir, sigutils, types
from numba.core import config as numba_config
from numba.core.caching import FunctionCache
from numba.core import event as numba_event
from numba.core.compiler_lock import global_compiler_lock
from numba.core.targetconfig import ConfigStack
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.registry import CPUDispatcher, cpu_target
from numba.core.dispatcher import Dispatcher as dispatcher_base, OmittedArg
from numba.core import typed_passes, untyped_passes
from numba.core.typed_passes import NopythonTypeInference
from numba import typeof as numba_typeof

#: numbarules and Numba compile under one lock. Taking two locks in either order would deadlock
#: when one thread compiles (Numba's lock, then ours from inside typing) while another adds a
#: method (ours, then Numba's to compile).
LOCK = global_compiler_lock

TypingError = errors.TypingError
_local = threading.local()
NumbaError = errors.NumbaError


def unliteral(argtypes):
    return tuple(types.unliteral(a) for a in argtypes)


# --- 2. recording what a compile relied on ----------------------------------------------------

@register_pass(mutates_CFG=False, analysis_only=True)
class RecordCalls(FunctionPass):
    """Report each call to a generic function or to one of our dispatchers to the observer."""

    _name = "numbarules_record_calls"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        observer = getattr(state, "nr_observer", None)
        if observer is None:
            return False
        observer(tuple(state.args), _typed_calls(state.func_ir, state.typemap, state.calltypes))
        return False


def _typed_calls(func_ir, typemap, calltypes):
    """(callee, argument types) of each call to a generic function or a dispatcher in a typed
    function: what its types rely on."""
    calls = []
    for block in func_ir.blocks.values():
        for inst in block.body:
            expr = getattr(inst, "value", None)
            if not (isinstance(inst, ir.Assign) and isinstance(expr, ir.Expr)
                    and expr.op == "call"):
                continue
            fnty = typemap.get(expr.func.name)
            sig = calltypes.get(expr)
            if sig is None:
                continue
            if isinstance(fnty, CallableType):
                owner = fnty.owner
                calls.append((getattr(owner, "_nr_record_as", owner), tuple(sig.args)))
            elif isinstance(fnty, types.Dispatcher):
                calls.append((fnty.dispatcher, tuple(sig.args)))
    return calls


class _RecordingCompiler(compiler.CompilerBase):
    observer = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.state.nr_observer = type(self).observer

    def define_pipelines(self):
        _canonical_stack_top()
        pm = compiler.DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.add_pass_after(RecordCalls, NopythonTypeInference)
        located.locate_errors(self.state, pm)      # run-time errors at the user's line
        # Numba's parfor passes (parallel=True: a prange loop's chunks, ad/parallel.py) need
        # SSA: without it a chunk whose inner loops set a name several times (a running max
        # over a row, restored from the tape in the reverse) computed wrong adjoints, no error
        if _skips_ssa(self.state.func_id.func) and not self.state.flags.auto_parallel.enabled:
            pm.passes = [(p, what) for p, what in pm.passes
                         if p is not untyped_passes.ReconstructSSA]
        pm.finalize()
        return [pm]


#: The module name of generated code (see numbarules/_generated.py).
GENERATED = "numbarules._generated"


def _skips_ssa(func):
    """Whether ``func``'s compile leaves out Numba's SSA reconstruction: generated kernels and
    drivers, whose primal was typed without it (``infer_types``: one type per name) and whose
    temporaries are named per site (``ad/emit._Names.fresh``). About a fifth of a small first
    gradient's compile (docs/numba-internals.md); one that fails without it is compiled again
    with it (``Dispatcher.compile``), so a real error is reported by the compile Numba would
    have made. The user's own code always gets it."""
    return (getattr(func, "__globals__", {}).get("__name__") == GENERATED
            and not getattr(func, "_nr_needs_ssa", False))


def _canonical_stack_top(flags=None):
    """Present the wrapper options as the same on Numba's flags stack in every compile of ours.

    Numba compiles an ``@overload`` implementation once per (argument types, top of the flags
    stack) (``_OverloadFunctionTemplate._get_impl``), and the top is the whole ``Flags`` of the
    compile typing the call. A kernel with a CPython wrapper and one without would compile
    ``np.mean``'s implementation once each although the wrappers change nothing in it. The top
    is a copy Numba pushed for this compile (``CompilerBase._compile_core``); the wrappers this
    compile makes are read from ``state.flags``, which is left as it is."""
    top = flags if flags is not None else ConfigStack.top_or_none()
    if top is not None:
        top.no_cpython_wrapper = True
        top.no_cfunc_wrapper = True
    return top


def recording_pipeline(observer):
    """A pipeline class that calls ``observer(argtypes, calls)`` after type inference."""
    return type("RecordingCompiler", (_RecordingCompiler,), {"observer": staticmethod(observer)})


# --- 3. dispatchers we own --------------------------------------------------------------------

class Dispatcher(CPUDispatcher):
    """An njit dispatcher with hooks on the compile-on-miss path.

    ``before_compile(dispatcher, args)`` runs first (it resolves methods and raises our own
    errors); ``on_error(dispatcher, args, exc)`` may return a clearer exception to raise instead of
    a Numba error.
    """

    before_compile = None
    on_error = None
    reduce = None       # () -> what pickle stores instead of Numba's state (an nr.jit function)

    def __reduce__(self):
        if self.reduce is not None:
            return self.reduce()
        return super().__reduce__()

    def compile(self, sig):
        # every compile (a call from Python, a call typed in other compiled code) starts here
        refresh = getattr(self.py_func, "_nr_refresh", None)
        if refresh is not None:
            refresh()
        from .. import profile
        # a session of its own where no call from Python opened one (a pullback compiling its
        # kernel for the cotangent's type): nr.compile_stats() sees every compile of ours
        with profile.session():
            return self._compile(sig)

    def _compile(self, sig):
        try:
            return super().compile(sig)
        except Exception as exc:    # noqa: BLE001 - Numba's lowering asserts as well as raising its own
            if not _skips_ssa(self.py_func):
                _raise_clearer(exc)
            # Typed without SSA versions, a name bound to arrays of two layouts unified to
            # "A" where one of them was expected (docs/numba-internals.md): compile it as
            # Numba does, with SSA, from now on.
            self.py_func._nr_needs_ssa = True
            forget_failures(self)
            pending_errors().clear()
        try:
            return super().compile(sig)
        except Exception as exc:    # noqa: BLE001
            _raise_clearer(exc)

    def typeof_pyval(self, val):
        # The C dispatcher types a *args entry's folded tuple here; Numba warns that first-class
        # function types are experimental whenever a tuple starts with a function, though the
        # tuple stays a plain one (docs/numba-internals.md): not a warning about the user's code
        if type(val) is tuple and val and (is_dispatcher(val[0])
                                           or hasattr(type(val[0]), "_numba_type_")):
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "First-class function type feature",
                                        errors.NumbaExperimentalFeatureWarning)
                return super().typeof_pyval(val)
        return super().typeof_pyval(val)

    def _compile_for_args(self, *args, **kws):
        from .. import function_values, profile
        flat = args
        if self.py_func.__code__.co_flags & inspect.CO_VARARGS and args \
                and isinstance(args[-1], tuple):
            flat = args[:-1] + args[-1]      # Numba folded *args into one tuple: unfold it
        if function_values.has_python_function(flat):
            # A Python function has no Numba type: call again with its compiled helper in its
            # place (Numba's C dispatcher calls what this returns with the same arguments).
            # Each such call comes here, a Python lookup; an @njit function passed does not.
            converted = function_values.arguments(flat)
            return lambda *a, **k: self(*converted, **k)
        label = getattr(getattr(self, "_cache", None), "label", None) or self.py_func.__qualname__
        with LOCK, profile.session(label.removesuffix(" (entry)")):
            if self.before_compile is not None:
                self.before_compile(self, args)
            try:
                return super()._compile_for_args(*args, **kws)
            except NumbaError as exc:
                forget_failures(self)
                better = self.on_error(self, args, exc) if self.on_error else None
                if better is None:
                    raise
                raise better from None


def _raise_clearer(exc):
    """Raise ``exc``; one that is neither Numba's error nor ours (an assertion in Numba's
    lowering) as a CompilationError at the user's line (``located.code_generation_error``)."""
    if isinstance(exc, NumbaError) or type(exc).__module__.startswith("numbarules"):
        raise exc
    raise located.code_generation_error(exc) from None


class AdoptingDispatcher(Dispatcher):
    """A dispatcher that compiles no code of its own: for each signature it runs another
    dispatcher's compile result, which ``adopt(dispatcher, argtypes)`` returns (compiled with a
    CPython wrapper). Numba's C dispatcher keeps only (type codes -> entry point), so a call from
    Python goes from its type lookup straight into the adopted code, as it would for that
    dispatcher itself: no trampoline function is typed, lowered and optimised per signature.

    The Python function it wraps only gives the arity: Numba's C dispatcher reads exactly that
    many argument types, so one of these serves one arity."""

    adopt = None

    def compile(self, sig):
        with LOCK:
            args = tuple(sigutils.normalize_signature(sig)[0])
            found = self.overloads.get(args)
            if found is None:
                found = self.adopt(self, args)
                self.add_overload(found)
            return found.entry_point


def make_adopting_dispatcher(py_func, adopt):
    disp = AdoptingDispatcher(py_func, targetoptions={"nopython": True})
    disp.adopt = adopt
    return disp


def compile_result(dispatcher, argtypes):
    """``dispatcher`` compiled for ``argtypes`` (``compile_for``): its CompileResult."""
    compile_for(dispatcher, argtypes)
    return dispatcher.overloads[tuple(argtypes)]


class _UnliteralDispatcher(CPUDispatcher):
    """An ``@njit`` dispatcher that compiles one version for the plain types of its arguments.

    Numba types a call of a dispatcher with the argument types as they are, so a constant
    argument (``_rv_push(stack, top, RANGE, ...)``, ``_rv_start(st, n, 3)``) is a
    ``Literal[int]`` and every distinct constant compiles (and caches) a version of its own."""

    def get_call_template(self, args, kws):
        return super().get_call_template(tuple(types.unliteral(a) for a in args), kws)


class _OptLevelCache(FunctionCache):
    """Numba's disk cache of a function, keyed on the LLVM optimisation level too: Numba's own
    key (signature, CPU, bytecode) leaves ``NUMBA_OPT`` out, so code one process compiled at
    ``NUMBA_OPT=0`` (``numbarules fuzz --opt 0``, the test suite's fuzz workers) would be
    loaded, unoptimised, by every later process."""

    def _index_key(self, sig, codegen):
        return super()._index_key(sig, codegen) + (("NUMBA_OPT", str(numba_config.OPT)),)

    def save_overload(self, sig, data):
        # Numba refuses most code compiled at NUMBA_OPT=0 anyway (its "dynamic globals"), with
        # a warning per function; unoptimised code is not worth keeping
        if int(numba_config.OPT) != 0:
            super().save_overload(sig, data)


def njit_unliteral(func=None, *, cache=False, **options):
    """``numba.njit`` for library code of ours (``_UnliteralDispatcher``); ``cache=True``
    uses Numba's own disk cache, keyed on the optimisation level too (``_OptLevelCache``): for
    module-level code that depends on nothing outside its file (docs/numba-internals.md)."""
    if func is None:
        return lambda fn: njit_unliteral(fn, cache=cache, **options)
    disp = _UnliteralDispatcher(func, targetoptions={"nopython": True, **options})
    if cache:
        disp._cache = _OptLevelCache(func)
    return disp


def make_dispatcher(py_func, observer, options=None, local_types=None):
    opts = {"nopython": True}
    opts.update(options or {})
    return Dispatcher(py_func, locals=dict(local_types or {}), targetoptions=opts,
                      pipeline_class=recording_pipeline(observer))


def tuple_type(items):
    return types.Tuple(tuple(items))


def array_type_like(t):
    """The type of ``np.zeros_like`` of an array of type ``t``: same dtype and rank, Fortran
    layout for a Fortran array (a transposed matrix), C layout for any other."""
    return types.Array(t.dtype, t.ndim, "F" if t.layout == "F" else "C")


NONE = types.none


def named_tuple_type(items, cls):
    # from_types picks NamedUniTuple for equal field types, as typeof does for the values.
    return types.BaseTuple.from_types(tuple(items), cls)


def is_tuple_type(t):
    return isinstance(t, types.BaseTuple)


def is_optional_type(t):
    return isinstance(t, types.Optional)


def is_none_type(t):
    return isinstance(t, types.NoneType)


def being_typed(context, dispatcher, argtypes):
    """Whether ``dispatcher`` is being typed for ``argtypes`` up this stack (a recursive call)."""
    return context.callstack.match(dispatcher.py_func, tuple(argtypes)) is not None


def compile_for(dispatcher, argtypes):
    """Compile ``dispatcher`` for ``argtypes`` (a no-op if it already has them)."""
    from .. import profile
    try:
        with profile.session():
            return dispatcher.compile(tuple(argtypes))
    except NumbaError:
        forget_failures(dispatcher)
        raise


def forget_failures(dispatcher):
    """Numba remembers failed compiles per argument types and replays the error; ours may
    succeed next time (a method or rule was added since), so they are not remembered."""
    failed = getattr(getattr(dispatcher, "_compiler", None), "_failed_cache", None)
    if failed is not None:
        failed.clear()


def has_overload(dispatcher, argtypes):
    return tuple(argtypes) in dispatcher.overloads


def drop_overload(dispatcher, argtypes):
    """Forget one compiled signature; the others stay callable. Returns whether it existed."""
    cres = dispatcher.overloads.pop(tuple(argtypes), None)
    if cres is None:
        return False
    try:
        dispatcher.targetctx.remove_user_function(cres.entry_point)
    except KeyError:
        pass
    # The C-level type table has no single-entry removal: clear it and put the survivors back.
    dispatcher._clear()
    for args, kept in dispatcher.overloads.items():
        dispatcher._insert([a._code for a in args], kept.entry_point, kept.objectmode)
    return True


def is_dispatcher(value):
    """A Numba dispatcher (``@njit`` function, ours included)."""
    return isinstance(value, dispatcher_base)


def as_dtype(t):
    """The NumPy dtype of a Numba scalar type (a literal's too)."""
    from numba.np.numpy_support import as_dtype as numba_as_dtype
    return numba_as_dtype(types.unliteral(t))


def function_of(t):
    """The function a Numba argument type stands for (an ``@njit`` dispatcher's type, a generic
    function's or gradient object's ``CallableType``), or None: such a type is one function's
    own, so code specialised on it may call that function by name."""
    if isinstance(t, types.Dispatcher):
        return t.dispatcher
    if isinstance(t, CallableType) and not getattr(t.owner, "_nr_internal", False):
        return t.owner
    return None


def numba_types_value(value):
    """Whether Numba's CPU typing context can type ``value`` as a global (e.g. np.linalg.norm).

    The context learns Numba's own overloads (``@overload(np.full)``) when it is refreshed, which
    Numba does at the start of each compile: before the first compile of the process it knows
    none of them, and np.full (a Python function in NumPy 2) would look like a plain helper."""
    try:
        context = cpu_target.typing_context
        context.refresh()
        return context.resolve_value_type(value) is not None
    except (NumbaError, ValueError, TypeError):
        return False


def typeof_args(dispatcher, args):
    return tuple(dispatcher.typeof_pyval(a) for a in args)


def error_text(exc):
    """Numba's message without the generic help paragraphs it appends."""
    text = str(exc)
    for marker in ("\nThis error may have been caused", "\nFor more information about typing"):
        text = text.split(marker)[0]
    kept = []
    for para in text.strip().split("\n\n"):
        if para not in kept and not para.startswith("During: Pass "):
            kept.append(para)
    return "\n\n".join(kept).strip()


def pending_errors():
    """Per-thread stack of errors raised inside nested compiles, to re-raise at the boundary."""
    stack = getattr(_local, "pending", None)
    if stack is None:
        stack = _local.pending = []
    return stack


def infer_types(py_func, argtypes, options=None, calls=None):
    """Numba's types for every variable of ``py_func`` at ``argtypes``, without compiling it.

    Type inference runs without SSA reconstruction, so each variable has one (unified) type
    under its own name. It runs under the flags a dispatcher with target ``options`` would
    compile with: the NumPy and builtin overloads it types are compiled then, and Numba caches
    them per caller's flags (docs/numba-internals.md), so the kernel compiled with those options
    reuses them instead of compiling each once more. ``calls``, a list, receives the calls the
    types rely on (as ``RecordCalls`` reports them).
    """
    typing_ctx, target_ctx = cpu_target.typing_context, cpu_target.target_context
    typing_ctx.refresh()
    target_ctx.refresh()
    flags = compiler.Flags()
    cpu_target.options.parse_as_flags(flags, dict({"nopython": True}, **(options or {})))
    with LOCK, ConfigStack().enter(_canonical_stack_top(flags)):
        func_ir = compiler.run_frontend(py_func)
        result = typed_passes.type_inference_stage(typing_ctx, target_ctx, func_ir,
                                                   tuple(argtypes), None)
    if calls is not None:
        calls.extend(_typed_calls(func_ir, result.typemap, result.calltypes))
    typemap = {k: types.unliteral(v) for k, v in result.typemap.items()
               if not k.startswith(("$", "arg."))}
    return typemap, result.return_type


def typeof_value(value):
    return numba_typeof(value)


def is_omitted(value):
    """Whether ``value`` is the marker Numba's C dispatcher passes for a parameter left out."""
    return isinstance(value, OmittedArg)


def given_types(argtypes):
    """``argtypes`` with each omitted argument (``types.Omitted``: Numba's C dispatcher filled in
    the parameter's default) as the type of its default value."""
    return tuple(types.unliteral(numba_typeof(t.value)) if isinstance(t, types.Omitted) else t
                 for t in argtypes)


# --- 5. observing compiles (numbarules.profile) ---------------------------------------------------

class _CompileListener(numba_event.Listener):
    def __init__(self, on_start, on_end):
        self.start, self.end = on_start, on_end

    def on_start(self, event):
        self.start("compile" if event.kind == "numba:compile" else "pass", event.data or {})

    def on_end(self, event):
        self.end("compile" if event.kind == "numba:compile" else "pass", event.data or {})


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off while inside (the outermost compile of ours), on
    again after if it was on before.

    A Numba compile allocates hundreds of thousands of objects that live until its end (IR,
    types, LLVM IR built in Python), so the collector's allocation counts trigger collections
    all through it, and each full collection scans the whole heap: in a process that had
    checked 30 fuzz programs they took 30 of its 122 s (docs/numba-internals.md, "The garbage
    collector and what a compile leaves alive"). Paused, the garbage a compile makes is
    collected after it (its peak memory is higher while it runs). Nothing else changes: the
    collector's state is restored, and objects freed by reference counts are freed as always."""
    was = gc.isenabled()
    if was:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def observe_compiles(on_start, on_end):
    """Call ``on_start(kind, data)`` / ``on_end(kind, data)`` for Numba's compile events while
    inside: kind "compile" (a dispatcher compiles; data: dispatcher, args) or "pass" (a compiler
    pass runs; data: name)."""
    listener = _CompileListener(on_start, on_end)
    numba_event.register("numba:compile", listener)
    numba_event.register("numba:run_pass", listener)
    try:
        yield
    finally:
        numba_event.unregister("numba:run_pass", listener)
        numba_event.unregister("numba:compile", listener)


def library_size(dispatcher, argtypes):
    """(functions turned into machine code, libraries linked in) for ``dispatcher`` compiled at
    ``argtypes``: linked libraries are optimised and compiled to machine code again in it."""
    try:
        cres = dispatcher.overloads.get(tuple(argtypes))
        lib = cres.library
        module = lib._final_module
        return (sum(1 for fn in module.functions if not fn.is_declaration),
                len(set(lib._linking_libraries)))
    except Exception:   # noqa: BLE001 - a profile must never break a compile
        return 0, 0


def readable_type(t, depth=0):
    """A Numba type as a person reads it: ``float64[:, ::1]``, ``(int64, float64[:])``."""
    if isinstance(t, types.Array):
        dims = [":"] * t.ndim
        if t.ndim and t.layout == "C":
            dims[-1] = "::1"
        elif t.ndim and t.layout == "F":
            dims[0] = "::1"
        return f"{t.dtype}[{', '.join(dims)}]" if t.ndim else f"{t.dtype}[()]"
    cls = getattr(t, "instance_class", None) or getattr(t, "cls", None)
    if isinstance(cls, type) and hasattr(cls, "_nr_fields"):
        return cls.__name__                 # a struct (a named tuple to Numba)
    if isinstance(t, types.BaseTuple):
        items = list(t)
        if depth >= 1 and len(items) > 2:
            return f"({len(items)} values)"
        shown = [readable_type(x, depth + 1) for x in items[:4]]
        if len(items) > 4:
            shown.append(f"... {len(items) - 4} more")
        return "(" + ", ".join(shown) + ("," if len(items) == 1 else "") + ")"
    if isinstance(t, types.Omitted):
        return "default"
    text = str(t)
    return text if len(text) <= 48 else text[:45] + "..."


# The package's other modules use the names above: imported last. ``persist`` also starts Numba's
# symbol counter at a random point (see there), before anything is compiled.
from .callables import CallableType, callable_type, register_family  # noqa: E402,F401
from . import intrinsics, located, persist  # noqa: E402,F401
from .picking import picked_result  # noqa: E402,F401
