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

import itertools
import operator
import threading
import weakref

from numba.core import cgutils, compiler, errors, funcdesc, ir, types, typing
from numba.core.compiler_lock import global_compiler_lock
from numba.core.compiler_machinery import FunctionPass, register_pass
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
        chosen = self.templates[0]._chosen.get(sig.args)
        if chosen is None:
            raise KeyError(sig.args)
        return chosen if isinstance(chosen, _RecursiveKey) else chosen.get_overload(sig.args)


class _NotKept(dict):
    """A table that keeps nothing (see CallableType.get_impl_key)."""

    def __setitem__(self, key, value):
        pass


class _CallTemplate(AbstractTemplate):
    owner_ref = None  # a weak reference to the generic function or gradient object
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
        chosen = self._chosen[sig.args]
        if isinstance(chosen, _RecursiveKey):
            return chosen
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


def callable_type(owner, world, resolve):
    """A fresh Numba type for ``owner`` at ``world``; ``resolve(owner, context, argtypes)`` picks
    the callee dispatcher (a function of the owner, not a closure over it: see CallableType)."""
    template = type(f"CallTemplate[{owner.__name__}@{world}]", (_CallTemplate,), {
        "key": (type_token(owner), world), "owner_ref": weakref.ref(owner),
        "resolve": staticmethod(resolve), "_chosen": weakref.WeakValueDictionary(),
    })
    return CallableType(template)


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
        calls = []
        for block in state.func_ir.blocks.values():
            for inst in block.body:
                expr = getattr(inst, "value", None)
                if not (isinstance(inst, ir.Assign) and isinstance(expr, ir.Expr)
                        and expr.op == "call"):
                    continue
                fnty = state.typemap.get(expr.func.name)
                sig = state.calltypes.get(expr)
                if sig is None:
                    continue
                if isinstance(fnty, CallableType):
                    calls.append((fnty.owner, tuple(sig.args)))
                elif isinstance(fnty, types.Dispatcher):
                    calls.append((fnty.dispatcher, tuple(sig.args)))
        observer(tuple(state.args), calls)
        return False


class _RecordingCompiler(compiler.CompilerBase):
    observer = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.state.nr_observer = type(self).observer

    def define_pipelines(self):
        pm = compiler.DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.add_pass_after(RecordCalls, NopythonTypeInference)
        pm.finalize()
        return [pm]


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

    def _compile_for_args(self, *args, **kws):
        with LOCK:
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
    try:
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


def infer_types(py_func, argtypes):
    """Numba's types for every variable of ``py_func`` at ``argtypes``, without compiling it.

    Type inference runs without SSA reconstruction, so each variable has one (unified) type
    under its own name.
    """
    typing_ctx, target_ctx = cpu_target.typing_context, cpu_target.target_context
    typing_ctx.refresh()
    target_ctx.refresh()
    with LOCK:
        func_ir = compiler.run_frontend(py_func)
        result = typed_passes.type_inference_stage(typing_ctx, target_ctx, func_ir,
                                                   tuple(argtypes), None)
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


def serialize_result(cres):
    """The compiled code of ``cres`` as bytes, or None when Numba cannot cache it (code lifted to
    object mode, dynamic globals such as addresses of Python objects)."""
    if cres.objectmode or any(not x.can_cache for x in cres.lifted) or \
            cres.library.has_dynamic_globals:
        return None
    return serialize(cres._reduce())


def rebuild_result(dispatcher, data):
    """The compile result stored by ``serialize_result``, ready to install in ``dispatcher``."""
    import pickle
    # Loaded code calls into Numba's runtime (NRT): it must be initialised first, or the first
    # allocation crashes. Numba's own cache calls targetctx.refresh(), which also imports every
    # lowering registry (with SciPy's BLAS check, ~0.8 s); loading machine code needs none of it.
    from numba.core.runtime import rtsys
    rtsys.initialize(dispatcher.targetctx)
    return compiler.CompileResult._rebuild(dispatcher.targetctx, *pickle.loads(data))
