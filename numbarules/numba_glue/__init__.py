"""The CPU door into ``numba.core``: typing templates, data models, the compile pipeline.

This package is the one place that touches ``numba.core`` on the CPU: this module, ``persist``
(compiled code to bytes and back, for the disk cache) and ``intrinsics`` (tapes, zero adjoints
and trampolines that compile inline in generated kernels). Three mechanisms live here (see
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
import itertools
import operator
import threading
import weakref

from numba.core import cgutils, compiler, errors, funcdesc, ir, sigutils, types, typing
from numba.core import config as numba_config
from numba.core.caching import FunctionCache
from numba.core import event as numba_event
from numba.core.compiler_lock import global_compiler_lock
from numba.core.targetconfig import ConfigStack
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.extending import NativeValue, models, register_model, unbox
from numba.core.imputils import lower_builtin, lower_constant
from numba.core.typing.templates import infer_global
from numba.core.typing.typeof import typeof_impl
from numba.core.registry import CPUDispatcher, cpu_target
from numba.core.dispatcher import Dispatcher as dispatcher_base, OmittedArg
from numba.core import typed_passes
from numba.core.typed_passes import NopythonTypeInference
from numba import typeof as numba_typeof
from numba.core.typing.templates import AbstractTemplate

#: numbarules and Numba compile under one lock. Taking two locks in either order would deadlock
#: when one thread compiles (Numba's lock, then ours from inside typing) while another adds a
#: method (ours, then Numba's to compile).
LOCK = global_compiler_lock

TypingError = errors.TypingError
_local = threading.local()
NumbaError = errors.NumbaError


def unliteral(argtypes):
    return tuple(types.unliteral(a) for a in argtypes)


# --- 1. the Numba type of a generic function -------------------------------------------------

class CallableType(types.Function):
    """Numba type of a generic function at one world: calls are dispatched while typing.

    Numba keeps every type it has seen for the life of the process (its data-model cache), so
    the type refers to its owner weakly, and so do its template and the dispatchers it chose:
    dropping a generic function or a gradient object frees it and its compiled code.
    """

    def __init__(self, template):
        super().__init__(template)
        self._impl_keys = _NotKept()

    @property
    def owner(self):
        return self.templates[0].owner_ref()

    def get_impl_key(self, sig):
        # Found again each time from the dispatchers the template chose (held weakly), rather
        # than kept in the type's own table: an entry point holds the globals of the code it
        # runs, and the type lives as long as the process.
        return self.templates[0]._impl_key(sig)


class _NotKept(dict):
    """A table that keeps nothing (see CallableType.get_impl_key)."""

    def __setitem__(self, key, value):
        pass


class _CallTemplate(AbstractTemplate):
    owner_ref = None  # a weak reference to the generic function or gradient object
    unlinked = False  # calls jump to the callee's symbol instead of linking its code (see below)
    resolve = None    # resolve(owner, context, argtypes) -> a numba Dispatcher, or raise
    _chosen = None    # argtypes -> dispatcher (weakly), filled by generic(), read by get_impl_key()

    @property
    def owner(self):
        return type(self).owner_ref()

    def generic(self, args, kws):
        owner = self.owner
        if owner is None:
            raise TypingError("a generic function or gradient object that no longer exists")
        if kws:
            raise TypingError(f"{owner.__name__}: keyword arguments are not supported in "
                              f"compiled calls to a generic function; pass them positionally")
        args = unliteral(args)
        disp = type(self).resolve(owner, self.context, args)
        frame = self.context.callstack.match(disp.py_func, args)
        if frame is not None:
            return self._recursive(disp, frame, args)
        try:
            sig = types.Dispatcher(disp).get_call_type(self.context, args, {})
        except NumbaError:
            forget_failures(disp)
            raise
        type(self)._chosen[sig.args] = disp
        return sig

    def _recursive(self, disp, frame, args):
        # The callee is being typed further up this very stack: a recursive call. Type it with
        # the return type inferred so far (as Numba does for its own dispatchers) and lower it
        # as a call to the symbol the callee will have.
        partial = _local.__dict__.setdefault("partial", set())
        if id(frame) in partial:
            # Numba's partial re-inference of the recursive function reaches this call again;
            # leave it untyped there (Numba does the same for its own recursive calls).
            raise TypingError("recursive call, typed once the base case is known")
        partial.add(id(frame))
        try:
            return_type = frame.typeinfer.return_types_from_partial()
        finally:
            partial.discard(id(frame))
            # The partial pass recorded our refusal in the compile session's failure cache;
            # forget it, or the real pass would replay it.
            fails = self.context.callstack._fail_cache
            for key in [k for k in fails if getattr(k[0], "owner", None) is self.owner]:
                del fails[key]
        if return_type is None:
            raise TypingError(f"cannot infer the return type of the recursive call to "
                              f"{self.owner.__name__}: put a non-recursive return first")
        frame.add_return_type(return_type)
        sig = typing.signature(return_type, *args)
        key = _RecursiveKey(disp, frame.func_id, args)
        disp.targetctx.insert_func_defn([(key.lower, key, args)])
        type(self)._chosen[sig.args] = key
        return sig

    def get_impl_key(self, sig):
        return self._impl_key(sig)

    @classmethod
    def _impl_key(cls, sig):
        chosen = cls._chosen.get(sig.args)
        if chosen is None:
            raise KeyError(sig.args)
        if isinstance(chosen, _RecursiveKey):
            return chosen
        if cls.unlinked:
            return _unlinked_key(chosen, sig.args)
        return chosen.get_overload(sig.args)


class _RecursiveKey:
    """Lowering of a recursive call: a call of the symbol the function being compiled will have."""

    def __init__(self, disp, func_id, args):
        flags = compiler.Flags()
        disp.targetdescr.options.parse_as_flags(flags, disp.targetoptions)
        flags = disp._compiler._customize_flags(flags)
        qualname = funcdesc.qualifying_prefix(func_id.modname, func_id.func_qualname)
        self.symbol = funcdesc.default_mangler(qualname, args, abi_tags=[flags.get_mangle_string()],
                                               uid=func_id.unique_id)

    def lower(self, context, builder, sig, args):
        if builder.function.name == self.symbol:
            status, res = context.call_conv.call_function(builder, builder.function,
                                                          sig.return_type, sig.args, args)
            with cgutils.if_unlikely(builder, status.is_error):
                context.call_conv.return_status_propagate(builder, status)
            return res
        return context.call_unresolved(builder, self.symbol, sig, args)


def callable_type(owner, world, resolve, unlinked=False):
    """A fresh Numba type for ``owner`` at ``world``; ``resolve(owner, context, argtypes)`` picks
    the callee dispatcher (a function of the owner, not a closure over it: see CallableType).

    ``unlinked``: lower calls as jumps to the callee's symbol (``_unlinked_key``) rather than
    linking the callee's code into the caller's."""
    template = type(f"CallTemplate[{owner.__name__}@{world}]", (_CallTemplate,), {
        "key": (type_token(owner), world, bool(unlinked)), "owner_ref": weakref.ref(owner),
        "resolve": staticmethod(resolve), "_chosen": weakref.WeakValueDictionary(),
        "unlinked": bool(unlinked),
    })
    return CallableType(template)


# --- calls that do not link the callee ----------------------------------------------------------
# Numba links a callee's optimised module into every caller's module, then optimises the whole
# and generates machine code for all of it again: a gradient's entry, driver and vjp each
# recompiled every kernel below them (docs/numba-internals.md, "What compiling costs"). Calls that
# run once per gradient need no inlining, so they call the callee's machine code where it is:
# the caller declares an external function ``nr.call.<symbol>`` and that name is registered with
# LLVM's process symbol table (``llvmlite.binding.add_symbol``) at the address of the one live
# copy of the callee, which MCJIT uses when it links the caller. The caller's code library keeps
# the callee's alive (``_nr_callees``). Symbols carry Numba's per-compile unique id (randomised
# per process, see ``_randomise_unique_ids``), so one symbol names one compiled artifact.
#
# On disk, a kernel with such calls is stored with the compiled code of everything it calls that
# way (``serialize_result``), and loading it loads those first (``rebuild_result``), reusing a
# copy this process already holds.

_unlinked = {}      # symbol -> registered lowering key
_live = weakref.WeakValueDictionary()   # symbol -> the code library that defines it, while alive


class _UnlinkedKey:
    def __init__(self, symbol, dispatcher, argtypes):
        self.symbol = symbol
        self.dispatcher = weakref.ref(dispatcher)
        self.argtypes = tuple(argtypes)

    def lower(self, context, builder, sig, args):
        disp = self.dispatcher()
        cres = None if disp is None else disp.overloads.get(self.argtypes)
        if cres is None or cres.fndesc.mangled_name != self.symbol:
            raise RuntimeError(f"numbarules: the compiled code of {self.symbol} is gone")
        _register(self.symbol, cres.library)
        keep = context.active_code_library.__dict__.setdefault("_nr_callees", {})
        keep[self.symbol] = (cres.library, self.dispatcher, self.argtypes)
        fnty = context.call_conv.get_function_type(sig.return_type, sig.args)
        fn = cgutils.get_or_insert_function(builder.module, fnty, _alias(self.symbol))
        status, res = context.call_conv.call_function(builder, fn, sig.return_type, sig.args,
                                                      args)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return res


def _alias(symbol):
    return "nr.call." + symbol


def _register(symbol, library):
    """Point ``nr.call.<symbol>`` at ``library``'s definition of ``symbol``."""
    from llvmlite import binding
    if _live.get(symbol) is not library:
        address = library.get_pointer_to_function(symbol)
        if not address:
            raise RuntimeError(f"numbarules: {symbol} is not defined by its code library")
        binding.add_symbol(_alias(symbol), address)
        _live[symbol] = library


def _unlinked_key(dispatcher, argtypes):
    symbol = dispatcher.overloads[tuple(argtypes)].fndesc.mangled_name
    key = _unlinked.get(symbol)
    if key is None or key.dispatcher() is not dispatcher:
        if len(_unlinked) >= 2 * _unlinked_kept[0]:
            # Forget the lowerings of callees whose dispatcher is gone (symbols are never reused).
            defns = dispatcher.targetctx._defns
            for name, old in list(_unlinked.items()):
                if old.dispatcher() is None:
                    del _unlinked[name]
                    defns.pop(old, None)
            _unlinked_kept[0] = max(64, len(_unlinked))
        key = _unlinked[symbol] = _UnlinkedKey(symbol, dispatcher, argtypes)
        dispatcher.targetctx.insert_func_defn([(key.lower, key, tuple(argtypes))])
    return key


_unlinked_kept = [64]


_tokens = itertools.count(1)


def type_token(owner):
    """A number naming ``owner`` in Numba type keys, never reused (an id() may be, once the
    owner is gone, and Numba would then hand out the old type)."""
    token = owner.__dict__.get("_nr_type_token")
    if token is None:
        token = owner.__dict__["_nr_type_token"] = next(_tokens)
    return token


register_model(CallableType)(models.OpaqueModel)


@unbox(CallableType)
def _unbox_callable(typ, obj, c):
    # The value carries no data: the call was dispatched when the caller was typed.
    return NativeValue(c.context.get_dummy_value())


@lower_constant(CallableType)
def _constant_callable(context, builder, ty, pyval):
    return context.get_dummy_value()


# --- parametric struct families used as values in compiled code (``nr.Tangent[S](...)``) ------

class FamilyType(types.Opaque):
    """The Numba type of a struct family such as ``nr.Tangent``: indexing it gives a struct class."""

    def __init__(self, family, lookup):
        self.family = family
        self.lookup = lookup
        super().__init__(f"family[{family.__qualname__}]")

    @property
    def key(self):
        return self.family


register_model(FamilyType)(models.OpaqueModel)


@lower_constant(FamilyType)
def _constant_family(context, builder, ty, pyval):
    return context.get_dummy_value()


@infer_global(operator.getitem)
class _FamilyGetitem(AbstractTemplate):
    def generic(self, args, kws):
        if len(args) == 2 and isinstance(args[0], FamilyType) and isinstance(
                args[1], types.NamedTupleClass):
            return types.NamedTupleClass(args[0].lookup(args[1].instance_class))(*args)


@lower_builtin(operator.getitem, FamilyType, types.NamedTupleClass)
def _lower_family_getitem(context, builder, sig, args):
    return context.get_dummy_value()


def register_family(metaclass, family, lookup):
    """Let compiled code write ``family[S]`` for struct ``S`` (classes of ``metaclass``)."""
    def typeof_family_class(val, c):
        if val is family:
            return FamilyType(family, lookup)
        return types.NamedTupleClass(val)
    typeof_impl.register(metaclass)(typeof_family_class)


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
        pm.finalize()
        return [pm]


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

    def compile(self, sig):
        # every compile (a call from Python, a call typed in other compiled code) starts here
        refresh = getattr(self.py_func, "_nr_refresh", None)
        if refresh is not None:
            refresh()
        return super().compile(sig)

    def _compile_for_args(self, *args, **kws):
        from .. import profile
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


def numba_types_value(value):
    """Whether Numba's CPU typing context can type ``value`` as a global (e.g. np.linalg.norm)."""
    try:
        return cpu_target.typing_context.resolve_value_type(value) is not None
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
from . import intrinsics, located, persist  # noqa: E402,F401
