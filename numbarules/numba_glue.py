"""The one module that touches ``numba.core``: typing templates, data models, the compile pipeline.

Three mechanisms live here (see docs/numba-internals.md for how each was found and measured):

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
"""

import contextlib
import ctypes
import itertools
import operator
import sys
import threading
import weakref

import llvmlite.binding as llvm_binding
from llvmlite import ir as llvm_ir

from numba.core import cgutils, compiler, errors, funcdesc, ir, sigutils, types, typing
from numba.core import config as numba_config
from numba.core.caching import FunctionCache
from numba.core import event as numba_event
from numba.core.codegen import RuntimeLinker
from numba.core.compiler_lock import global_compiler_lock
from numba.core.targetconfig import ConfigStack
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.cpu import CPUContext
from numba.core.extending import NativeValue, models, register_model, unbox
from numba.core.imputils import lower_builtin, lower_constant
from numba.core.typing.templates import infer_global
from numba.core.typing.typeof import typeof_impl
from numba.core.registry import CPUDispatcher, cpu_target
from numba.core.dispatcher import Dispatcher as dispatcher_base
from numba.core import typed_passes
from numba.core.typed_passes import NopythonTypeInference
from numba import typeof as numba_typeof
from numba.core.typing.templates import AbstractTemplate
from numba.extending import intrinsic as numba_intrinsic
from numba.np.arrayobj import load_item, make_array, populate_array, store_item

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


def _callee_closure(cres):
    """[(symbol, payload, [symbols it calls unlinked])] of everything ``cres`` calls unlinked,
    transitively, callees first; None if one of them cannot be stored."""
    out, seen = [], set()

    def visit(library):
        for symbol, (lib, disp_ref, argtypes) in getattr(library, "_nr_callees", {}).items():
            if symbol in seen:
                continue
            seen.add(symbol)
            visit(lib)
            payload = getattr(lib, "_nr_payload", None)
            if payload is None:
                disp = disp_ref()
                callee = None if disp is None else disp.overloads.get(argtypes)
                if callee is None or callee.library is not lib:
                    raise _NotStorable
                payload = lib._nr_payload = _reduce(callee)
                if payload is None:
                    raise _NotStorable
            out.append((symbol, payload, sorted(getattr(lib, "_nr_callees", {}))))

    try:
        visit(cres.library)
    except _NotStorable:
        return None
    return out


class _NotStorable(Exception):
    pass

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
        from . import profile
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
    """``dispatcher`` compiled for ``argtypes`` (compiling it if needed): its CompileResult."""
    dispatcher.compile(tuple(argtypes))
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
    from . import profile
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


# --- 4. the persistent cache's door into Numba ----------------------------------------------------

def _randomise_unique_ids():
    # Numba names each compiled function's symbols with a per-process counter. Code loaded from
    # the disk cache carries the counter values of the process that compiled it; a compile in
    # this process that drew the same value for the same name would share its linkonce symbols.
    # Starting the counter at a random point makes such a collision practically impossible.
    import itertools
    import secrets
    from numba.core.bytecode import FunctionIdentity
    FunctionIdentity._unique_ids = itertools.count(secrets.randbits(40) + 1)


_randomise_unique_ids()


def versions():
    import llvmlite
    import numba
    return (numba.__version__, llvmlite.__version__)


def target_magic():
    """The CPU, its features and the target triple: code compiled for one may not run on another."""
    return tuple(map(str, cpu_target.target_context.codegen().magic_tuple()))


def serialize(obj):
    """Bytes of ``obj`` pickled as Numba pickles its own cache entries."""
    from numba.core import serialize as numba_serialize
    return numba_serialize.dumps(obj)


def survives_pickling(argtypes):
    """Whether ``argtypes`` come back equal from pickling (classes named by reference)."""
    import pickle
    try:
        return pickle.loads(serialize(tuple(argtypes))) == tuple(argtypes)
    except Exception:   # noqa: BLE001 - anything that does not round-trip is not stored
        return False


def _reduce(cres):
    """``cres`` as bytes, or None when Numba cannot cache it (code lifted to object mode, dynamic
    globals such as addresses of Python objects, an environment another process cannot
    rebuild)."""
    if cres.objectmode or any(not x.can_cache for x in cres.lifted) or \
            cres.library.has_dynamic_globals or not _environments_importable(cres) or \
            _calls_unresolved(cres.library):
        return None
    return serialize(cres._reduce())


def _calls_unresolved(library):
    """Whether the code calls a recursive function through Numba's unresolved-symbol cells
    (``RuntimeLinker``: a recursive callee linked into a caller, a call in a loop). The cells
    are filled by Numba's runtime linker for modules it finalizes, never for object code loaded
    from a cache: such code, stored and loaded, aborted the process ("LLVM ERROR: Symbol not
    found: .numba.unresolved$...")."""
    module = getattr(library, "_final_module", None)
    if module is None:
        return False            # object code loaded from disk: checked when it was stored
    prefix = RuntimeLinker.PREFIX
    return any(gv.name.startswith(prefix) for gv in module.global_variables)


def _environments_importable(cres):
    """Whether another process can rebuild the environments ``cres`` refers to: Numba imports
    each one's module by name (``environment._rebuild_env``). Code of a module loaded from a
    file without a name in ``sys.modules`` has the module "<dynamic>", which no process can."""
    import importlib.util
    import sys
    try:
        envs = [cres.environment, *cres._find_referenced_environments()]
    except Exception:   # noqa: BLE001 - not knowing means not storing
        return False
    for env in envs:
        name = env.globals.get("__name__") if env is not None else None
        if name == "__main__":
            continue            # a script run again: its own __main__
        try:
            if not name or name.startswith("<") or importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


def serialize_result(cres):
    """The compiled code of ``cres`` and of what it calls unlinked, as bytes; or None."""
    own = _reduce(cres)
    closure = _callee_closure(cres)
    if own is None or closure is None:
        return None
    return serialize((own, closure))


def rebuild_result(dispatcher, data):
    """The compile result stored by ``serialize_result``, ready to install in ``dispatcher``."""
    import pickle
    # Loaded code calls into Numba's runtime (NRT): it must be initialised first, or the first
    # allocation crashes. Numba's own cache calls targetctx.refresh(), which also imports every
    # lowering registry (with SciPy's BLAS check, ~0.8 s); loading machine code needs none of it.
    from numba.core.runtime import rtsys
    rtsys.initialize(dispatcher.targetctx)
    own, closure = pickle.loads(data)
    libraries = {}
    for symbol, payload, calls in closure:
        lib = _live.get(symbol)
        if lib is None:
            lib = _rebuild(dispatcher, payload).library
        lib._nr_callees = {c: (libraries[c], _dead, ()) for c in calls}
        _register(symbol, lib)
        libraries[symbol] = lib
    cres = _rebuild(dispatcher, own)
    cres.library._nr_callees = {symbol: (lib, _dead, ()) for symbol, lib in libraries.items()}
    return cres


def _dead():
    """The dispatcher of a callee loaded from disk: none (the caller is already compiled)."""
    return None


def _rebuild(dispatcher, payload):
    import pickle
    cres = compiler.CompileResult._rebuild(dispatcher.targetctx, *pickle.loads(payload))
    # Loading consumed the object code; keep the bytes, to store callers that call this unlinked.
    cres.library._nr_payload = payload
    _announce_definitions(cres.library)
    return cres


def _announce_definitions(library):
    """Tell Numba's runtime linker which functions loaded object code defines. Code compiled
    later in this process may call one of them through an unresolved-symbol cell (recursion:
    a recursive function's kernels compiled here while the function itself was loaded); the
    linker fills a cell only with symbols it saw defined, and it scans only modules it
    finalizes, never object code loaded from a cache: the cell kept pointing at
    ``nrt_unresolved_abort`` ("numba jitted function aborted due to unresolved symbol", found by
    ``numbarules fuzz --disk-cache``)."""
    shared = getattr(library, "_shared_module", None)
    codegen = library.codegen
    linker = getattr(codegen, "_rtlinker", None)
    if shared is None or linker is None:
        return
    linker.scan_defined_symbols(shared)
    linker.resolve(codegen._engine)


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


# --- 6. intrinsics the generated kernels call ---------------------------------------------
# Tapes, tape growth and zero adjoints, emitted inline in the calling kernel: an intrinsic's
# codegen runs inside the caller's lowering and compiles nothing of its own, where np.empty,
# np.zeros_like (three @overloads), np.dtype(...) and max(...) were each a dispatcher compiled
# per type and per process (docs/numba-internals.md, "What compiling costs"). The arrays are
# allocated with the NRT directly: Numba's own helper (arrayobj._empty_nd_impl) goes through a
# class-method overload, `_ol_array_allocate`, compiled once per process (30-70 ms that a first
# gradient paid and the njit primal, which allocates nothing, did not).


# Large tapes on huge pages. A gradient's tape is allocated afresh by every call, and the kernel
# then writes every page of it once: with 4 KB pages a 100 MB tape is 25,000 page faults, 60-70 ms
# of system time on a 2-core VM, more than the forward's own arithmetic (perf/bench_sim.py, the
# swap form spent 13x its primal in the forward, three quarters of it in the kernel). NumPy asks
# for transparent huge pages on every array of 4 MB or more (``madvise(MADV_HUGEPAGE)``, its
# ``hugepage`` setting); the NRT does not, so the kernels ask for their own large arrays here.
# Only our arrays are advised: nothing else in the process changes. The symbol is added under
# our own name so that kernels loaded from the disk cache resolve it in a new process.
_HUGE_BYTES = 1 << 22
_MADV_HUGEPAGE = 14
_MADVISE = "numbarules_madvise"


def _find_madvise():
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None).madvise
    except (OSError, AttributeError):
        return False
    llvm_binding.add_symbol(_MADVISE, ctypes.cast(fn, ctypes.c_void_p).value)
    return True


_HAS_MADVISE = _find_madvise()


def _huge_pages(context, builder, data, nbytes):
    """Advise the whole pages of ``nbytes`` at ``data`` (an i8*) for huge pages when the block
    is at least 4 MB (CPU kernels on Linux; elsewhere nothing)."""
    if not (_HAS_MADVISE and isinstance(context, CPUContext)):
        return
    intp = nbytes.type
    with builder.if_then(builder.icmp_signed(">=", nbytes, intp(_HUGE_BYTES)), likely=False):
        page = intp(4095)
        start = builder.and_(builder.add(builder.ptrtoint(data, intp), page),
                             builder.not_(page))
        end = builder.and_(builder.add(builder.ptrtoint(data, intp), nbytes), builder.not_(page))
        fnty = llvm_ir.FunctionType(llvm_ir.IntType(32),
                                    [llvm_ir.IntType(8).as_pointer(), intp, llvm_ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _MADVISE)
        # failure (no THP in this kernel) only means small pages: the result is ignored
        builder.call(fn, [builder.inttoptr(start, llvm_ir.IntType(8).as_pointer()),
                          builder.sub(end, start), llvm_ir.IntType(32)(_MADV_HUGEPAGE)])


def _new_array(context, builder, arrtype, shapes):
    """A new, uninitialised NRT array of ``arrtype`` (layout C or F) with these dimension sizes
    (LLVM intp values, not negative: they come from existing arrays and tape capacities)."""
    intp = context.get_value_type(types.intp)
    itemsize = context.get_abi_sizeof(context.get_data_type(arrtype.dtype))
    strides, step = [], intp(itemsize)
    for n in (reversed(shapes) if arrtype.layout == "C" else shapes):
        strides.append(step)
        step = builder.mul(step, n)           # after the loop: the size in bytes
    if arrtype.layout == "C":
        strides.reverse()
    align = context.get_preferred_array_alignment(arrtype.dtype)
    meminfo = context.nrt.meminfo_alloc_aligned(builder, step, align)
    with builder.if_then(cgutils.is_null(builder, meminfo), likely=False):
        context.call_conv.return_user_exc(builder, MemoryError, ("cannot allocate an array",))
    data = context.nrt.meminfo_data(builder, meminfo)
    _huge_pages(context, builder, data, step)
    ary = make_array(arrtype)(context, builder)
    populate_array(ary, data=builder.bitcast(data, context.get_data_type(arrtype.dtype)
                                             .as_pointer()),
                   shape=list(shapes), strides=strides, itemsize=intp(itemsize), meminfo=meminfo)
    return ary


@numba_intrinsic
def new_tape(typingctx, capacity, dtype):
    """``np.empty(capacity, dtype)``: a new tape (``dtype`` a NumPy scalar class:
    ``_np.float64``)."""
    eltype = getattr(dtype, "instance_type", None)
    if not isinstance(eltype, (types.Number, types.Boolean)):
        return None
    result = types.Array(eltype, 1, "C")

    def codegen(context, builder, sig, args):
        n = context.cast(builder, args[0], sig.args[0], types.intp)
        return _new_array(context, builder, result, [n])._getvalue()
    return result(capacity, dtype), codegen


@numba_intrinsic
def reserve_tape(typingctx, buf, used, more):
    """A tape with room for ``more`` pushes after ``used``: ``buf`` itself when it has room,
    else a copy of its first ``used`` entries in one of twice the capacity (or ``used + more``
    when that is more): grows at most once per loop entry."""
    if not (isinstance(buf, types.Array) and buf.ndim == 1 and buf.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        value, used, more = args
        used = context.cast(builder, used, sig.args[1], types.intp)
        more = context.cast(builder, more, sig.args[2], types.intp)
        return _reserve(context, builder, sig.args[0], value, used, more)
    return buf(buf, used, more), codegen


def _reserve(context, builder, aty, value, used, more):
    """The tape ``value`` (a 1-d C array of ``aty``) with room for ``more`` entries after
    ``used`` (LLVM intp values): a new reference to it, or to a copy twice as long."""
    old = make_array(aty)(context, builder, value=value)
    capacity = builder.extract_value(old.shape, 0)
    need = builder.add(used, more)
    out = cgutils.alloca_once(builder, value.type)
    with builder.if_else(builder.icmp_signed("<=", need, capacity), likely=True) as (
            fits, grows):
        with fits:
            context.nrt.incref(builder, aty, value)     # returned: a new reference
            builder.store(value, out)
        with grows:
            doubled = builder.mul(capacity, capacity.type(2))
            size = builder.select(builder.icmp_signed(">", doubled, need), doubled, need)
            new = _new_array(context, builder, aty, [size])
            cgutils.raw_memcpy(builder, new.data, old.data, used,
                               context.get_abi_sizeof(context.get_data_type(aty.dtype)))
            builder.store(new._getvalue(), out)
    return builder.load(out)


def _copy_elements(context, builder, dty, dst, sty, src):
    """Copy the elements of the array ``src`` (Numba type ``sty``) into ``dst`` (``dty``), both
    visited in C order; ``dst`` or ``src`` may instead be ``(flat type, pointer)``: a run of
    contiguous elements (a tape's). One memcpy when both are contiguous runs of one dtype."""
    def view(ty, a):
        if isinstance(a, tuple):
            return None
        return make_array(ty)(context, builder, value=a)

    dv, sv = view(dty, dst), view(sty, src)
    arr = dv if dv is not None else sv
    aty = dty if dv is not None else sty
    intp = context.get_value_type(types.intp)
    shapes = cgutils.unpack_tuple(builder, arr.shape, count=aty.ndim)
    dtype_of = lambda ty, a: ty.dtype if a is not None else ty   # noqa: E731
    dflat = dv is None or dty.layout == "C"
    sflat = sv is None or sty.layout == "C"
    if dflat and sflat and dtype_of(dty, dv) == dtype_of(sty, sv):
        dptr = dv.data if dv is not None else dst[1]
        sptr = sv.data if sv is not None else src[1]
        cgutils.raw_memcpy(builder, dptr, sptr, arr.nitems,
                           context.get_abi_sizeof(context.get_data_type(dtype_of(sty, sv))))
        return
    k = cgutils.alloca_once_value(builder, intp(0))
    with cgutils.loop_nest(builder, shapes, intp) as idx:
        n = builder.load(k)
        pointers = []
        for ty, a, raw in ((sty, sv, src), (dty, dv, dst)):
            if a is None:
                pointers.append(builder.gep(raw[1], [n]))
            else:
                strides = cgutils.unpack_tuple(builder, a.strides, count=ty.ndim)
                pointers.append(cgutils.get_item_pointer2(context, builder, a.data, shapes,
                                                          strides, ty.layout, idx))
        sp, dp = pointers
        s_item = types.Array(sty, 1, "C") if sv is None else sty
        d_item = types.Array(dty, 1, "C") if dv is None else dty
        value = load_item(context, builder, s_item, sp)
        value = context.cast(builder, value, s_item.dtype, d_item.dtype)
        store_item(context, builder, d_item, value, dp)
        builder.store(builder.add(n, intp(1)), k)


def _tape_operands(buf, used, a):
    """Whether the types are a tape (a 1-d C array), a length on it and an array."""
    return isinstance(buf, types.Array) and buf.ndim == 1 and buf.layout == "C" \
        and isinstance(a, types.Array) and isinstance(used, types.Integer)


@numba_intrinsic
def push_view(typingctx, buf, used, view):
    """``buf`` (a tape) with the elements of ``view`` (any layout, C order) written after
    ``used``, grown first if they do not fit. Emitted inline: as an @njit helper it was a
    dispatcher compiled per array type (and per literal ``used``), 0.2-0.6 s each before a
    first gradient."""
    if not _tape_operands(buf, used, view):
        return None

    def codegen(context, builder, sig, args):
        bty, uty, vty = sig.args
        value, used, v = args
        used = context.cast(builder, used, uty, types.intp)
        new = _reserve(context, builder, bty, value, used,
                       make_array(vty)(context, builder, value=v).nitems)
        tape = make_array(bty)(context, builder, value=new)
        _copy_elements(context, builder, bty.dtype, (bty.dtype, builder.gep(tape.data, [used])),
                       vty, v)
        return new
    return buf(buf, used, view), codegen


@numba_intrinsic
def restore_view(typingctx, a, buf, used):
    """Write the ``a.size`` elements saved last on ``buf`` (by push_view) back into ``a``;
    the tape's new length."""
    if not _tape_operands(buf, used, a):
        return None

    def codegen(context, builder, sig, args):
        aty, bty, uty = sig.args
        v, value, used = args
        start = builder.sub(context.cast(builder, used, uty, types.intp),
                            make_array(aty)(context, builder, value=v).nitems)
        tape = make_array(bty)(context, builder, value=value)
        _copy_elements(context, builder, aty, v,
                       bty.dtype, (bty.dtype, builder.gep(tape.data, [start])))
        return start
    return types.intp(a, buf, used), codegen


@numba_intrinsic
def copy_into(typingctx, a, src):
    """Write ``src``'s elements into ``a`` (the same shape, any layouts): a checkpointed loop's
    LOAD."""
    if not (isinstance(a, types.Array) and isinstance(src, types.Array) and a.ndim == src.ndim):
        return None

    def codegen(context, builder, sig, args):
        _copy_elements(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        return context.get_dummy_value()
    return types.none(a, src), codegen


@numba_intrinsic
def zeros_like(typingctx, a):
    """``np.zeros_like(a)`` for an array ``a``, emitted inline in the kernel that calls it.

    Every adjoint array starts as this. ``np.zeros_like`` itself is three @overload
    implementations (zeros_like, empty_like, _zero_fill), each a dispatcher compiled on its own,
    per array type and per process: about 0.4 s before the first gradient of each new array
    type (docs/numba-internals.md, "What compiling costs"). An NRT allocation plus a memset
    here cost nothing extra to compile. The result type is ``np.zeros_like``'s: the
    same layout (C for a non-contiguous ``a``), writable.
    """
    if not isinstance(a, types.Array):
        return None
    result = array_type_like(a)

    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, value=args[0])
        shapes = cgutils.unpack_tuple(builder, src.shape, count=sig.args[0].ndim)
        out = _new_array(context, builder, sig.return_type, shapes)
        cgutils.memset(builder, out.data, builder.mul(out.itemsize, out.nitems), 0)
        return out._getvalue()
    return result(a), codegen


# --- 7. trampolines: a function whose calls compile as calls of another -------------------------

def trampoline(func, target):
    """Calls of ``func`` in compiled code type and lower as calls of ``target(args, kws)`` (a
    function of the Numba argument types returning the Python function to call instead). Unlike
    an ``@overload`` of ``func``, no compiled function stands between the caller and the target:
    the call is typed by the target's own templates and lowered by its own implementation."""
    class Trampoline(AbstractTemplate):
        key = func

        def generic(self, args, kws):
            fnty = self.context.resolve_value_type(target(args, kws))
            return fnty.get_call_type(self.context, args, kws)

    Trampoline.__name__ = f"Trampoline_{func.__name__}"
    infer_global(func)(Trampoline)

    def lower(context, builder, sig, args):
        # the signature's arguments are positional here: typing folded the keywords
        fnty = context.typing_context.resolve_value_type(target(sig.args, {}))
        impl = context.get_function(fnty, fnty.get_call_type(context.typing_context, sig.args, {}))
        return impl(builder, args)

    lower_builtin(func, types.VarArg(types.Any))(lower)
