"""The Numba type of a generic function (or gradient object, or unlinked callee): a
``types.Function`` over a template built per (owner, world) whose ``generic()`` asks a resolver
callback for the dispatcher of the method that applies and hands the call to it; calls that jump
to a callee's symbol instead of linking its code; parametric struct families as values
(``nr.Tangent[S](...)``). Part of the CPU door into ``numba.core`` (the ``numba_glue``
package)."""

import itertools
import operator
import weakref

from numba.core import cgutils, compiler, funcdesc, types, typing
from numba.core.extending import NativeValue, models, register_model, unbox
from numba.core.imputils import lower_builtin, lower_constant
from numba.core.typing.templates import infer_global
from numba.core.typing.typeof import typeof_impl
from numba.core.typing.templates import AbstractTemplate

from .. import registry
from . import NumbaError, TypingError, _local, forget_failures, unliteral

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
    held = registry.table(owner, "_nr_type_token")   # a Local: not carried to other processes,
    token = held.get("token")                        # where the counter hands out other numbers
    if token is None:
        token = held["token"] = next(_tokens)
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
