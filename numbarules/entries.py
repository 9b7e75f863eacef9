"""Calls from Python: the compiled entries of generic functions and gradient objects (Numba's C
dispatcher jumps from the call straight into machine code), calls that generated code makes to
a callee's symbol (``Unlinked``), and the backend the dispatch module tells about new methods
and rules."""

import inspect

from . import dispatch, numba_glue, registry
from .cache import (GENERATED, DiskSlot, Node, changed_decisions, compiled_of, invalidate, link,
                    node_of, nodes_of, owned, relied_on, set_node)
from .dispatch import GenericFunction
from .lattice import typeof
from .methods import boundary_error, resolve_call


class _Backend:
    """What ``dispatch`` asks of the engine: a generic function's Numba type, its Python entry,
    and what to drop when its methods or rules change."""

    def numba_type(self, f):
        cached = f.__dict__.get("_nr_type")
        if cached is None or cached[0] != f.world:
            cached = f._nr_type = (f.world, numba_glue.callable_type(f, f.world, resolve_call))
        return cached[1]

    def install_call(self, f):
        with numba_glue.LOCK:
            tramp = f.__dict__.get("_nr_trampoline")
            if tramp is None or tramp._nr_arities != tuple(f.arities()):
                _install_trampoline(f)

    def method_changed(self, f, old, new):
        affected = changed_decisions(f)
        if old is not None:
            compiled = compiled_of(old)
            for disp in list(compiled.values()):
                affected += list(nodes_of(disp).values())
            compiled.clear()
        invalidate(affected)
        tramp = f.__dict__.get("_nr_trampoline")
        if tramp is not None and tramp._nr_arities != tuple(f.arities()):
            _install_trampoline(f)
        _entries_for_arities(f)

    def rules_changed(self, f):
        invalidate(changed_decisions(f))


# --- calls from Python ---------------------------------------------------------------------------

def _install_trampoline(f):
    arities = f.arities()
    check = lambda args: f.resolve(tuple(typeof(a) for a in args))     # noqa: E731
    if len(arities) == 1:
        # the method's dispatcher (compiled with a CPython wrapper) is the entry's overload; the
        # entry records the method decision, so a new method that wins the call drops it
        install_direct_entry(f, arities[0], check, lambda argtypes: resolve_call(f, None, argtypes),
                             record_as=f)
    else:
        install_entry(f, arities, check, resolve_call)


class Unlinked:
    """``target`` as generated code calls it when the call runs once per call from Python: a
    jump to the callee's symbol, its machine code not linked into (and compiled again in) the
    caller's (``numba_glue.callable_type(..., unlinked=True)``).

    ``resolve(target, context, argtypes)``: the dispatcher to call; ``node_for(target,
    argtypes)``: its node, the caller's backedge. A generic function is recorded as itself (its
    method decisions are the caller's too).
    """

    _nr_internal = True     # never a function value a user passed (numba_glue.function_of)

    def __init__(self, target, resolve, node_for=None):
        self.target = target
        self.__name__ = getattr(target, "__name__", "f")
        self._nr_resolve = resolve
        self._nr_node = node_for or (lambda t, argtypes: node_of(t, argtypes))
        if isinstance(target, GenericFunction):
            self._nr_record_as = target
        self._numba_type_ = numba_glue.callable_type(self, 0, Unlinked._resolve, unlinked=True)

    @staticmethod
    def _resolve(self, context, argtypes):
        return self._nr_resolve(self.target, context, argtypes)

    def _nr_node_for(self, argtypes):
        return self._nr_node(self.target, tuple(argtypes))

    def _nr_fingerprint(self):
        return ("unlinked", self.target)

    @staticmethod
    def of_dispatcher(disp):
        return Unlinked(disp, lambda d, context, argtypes: d)


def install_entry(owner, arities, check, resolve):
    """Make ``owner(...)`` a direct call of an njit dispatcher whose body calls ``owner``: the
    entry of a generic function (or its gradient) with methods of several arities.

    Numba's C dispatcher then does the type lookup and the jump, so a call costs about what a
    call of an ``@njit`` function costs (plus ~70 ns: Numba folds the ``*args`` into a tuple).
    ``check(args)`` runs on the first call with new types, before compiling: it raises our own
    errors (NoMethodError). The entry calls ``owner`` unlinked (``Unlinked``), through
    ``resolve(owner, context, argtypes)`` and ``owner._nr_node_for``.
    """
    _uninstall(owner)
    src = f"def {owner.__name__}(*args):\n    return _f(*args)\n"
    ns = {}
    callee = Unlinked(owner, resolve,
                      None if isinstance(owner, GenericFunction) else
                      lambda o, argtypes: o._nr_node_for(argtypes, entry=True))
    exec(compile(src, f"<numbarules entry of {owner.__qualname__}>", "exec"),
         {"_f": callee, "__name__": GENERATED}, ns)  # noqa: S102
    tramp = owned(ns[owner.__name__], f"{owner.__qualname__} (entry)", owner,
                  persist=("entry", owner, tuple(arities)))

    def before(disp, args):
        numba_glue.pending_errors().clear()
        check(args[0])      # Numba folds *args into one tuple before the miss hook sees them

    _finish_entry(owner, tramp, arities, before)


def install_direct_entry(owner, arity, check, callee_of, record_as=None, signature=None,
                         result_of=None):
    """Make ``owner(...)`` with ``arity`` positional arguments run code compiled elsewhere, with
    nothing compiled for the entry itself: ``callee_of(argtypes)`` returns the dispatcher
    (compiled with a CPython wrapper) whose code runs for ``argtypes``, and its compile result
    becomes the entry's overload (``numba_glue.AdoptingDispatcher``). Unlike ``install_entry``'s
    trampoline, which typed, lowered and optimised a function calling the callee (0.05-0.08 s
    per first call), this only registers the callee's entry point with Numba's C dispatcher.

    ``signature``: [(name, default or inspect.Parameter.empty)], the parameters of the user's
    function. The entry takes them by those names, so Numba's C dispatcher binds keywords and
    fills defaults (an omitted argument reaches ``callee_of`` as ``types.Omitted``); without it
    the entry takes positional arguments only. ``result_of(callee, argtypes)``: the compile
    result to run, when not the callee's own (a grad runs value_and_grad's code through a
    wrapper of its own, numba_glue.picked_result).

    The entry's node links the callee's: dropping the callee's code (a rule added, a method
    changed) drops the entry's overload too, and the next call adopts the new code. With
    ``record_as`` (a generic function), the entry's node records the call as a call of it: the
    method decision too, so that a new method winning the call drops the entry. ``check(args)``
    runs on the first call with new types, before anything is compiled."""
    _uninstall(owner)
    label = f"{owner.__qualname__} (entry)"

    def adopt(disp, argtypes):
        callee = callee_of(argtypes)
        cres = (result_of or numba_glue.compile_result)(callee, argtypes)
        node = Node(disp, argtypes, label)
        set_node(disp, argtypes, node)
        link(node, *relied_on([(record_as or callee, argtypes)]))
        return cres

    ns, params, named = {"__name__": GENERATED}, [], signature is not None
    if signature is None:
        signature = [(f"a{i}", inspect.Parameter.empty) for i in range(arity)]
    for k, (name, default) in enumerate(signature):
        if default is inspect.Parameter.empty and not named:
            params.append(name)
        else:
            # A required parameter gets a marker for a default: a call that leaves it out comes
            # to ``before`` (no overload takes the marker's type), which names the function.
            ns[f"_default_{k}"] = _REQUIRED if default is inspect.Parameter.empty else default
            params.append(f"{name}=_default_{k}")
    params = ", ".join(params)
    src = (f"def {owner.__name__}({params}):\n"
           f"    raise AssertionError(\"an adopting entry runs its callee's code only\")\n")
    exec(compile(src, f"<numbarules entry of {owner.__qualname__}>", "exec"), ns)  # noqa: S102
    entry = numba_glue.make_adopting_dispatcher(ns[owner.__name__], adopt)
    entry._cache = DiskSlot(entry, label, owner, None)     # its label; it stores nothing

    def before(disp, args):
        numba_glue.pending_errors().clear()
        for (name, _), a in zip(signature, args):
            if numba_glue.is_omitted(a) and a.value is _REQUIRED:
                raise TypeError(f"{owner.__qualname__}: missing a required argument: '{name}'")
        check(args)

    _finish_entry(owner, entry, (arity,), before)


class _Required:
    def __repr__(self):
        return "<required>"


_REQUIRED = _Required()


def _finish_entry(owner, entry, arities, before):
    entry._nr_arities = tuple(arities)
    entry.before_compile = before
    entry.on_error = lambda disp, args, exc: boundary_error(exc)
    owner._nr_trampoline = entry
    type(owner).__call__ = staticmethod(entry)


def _uninstall(owner):
    """Drop ``owner``'s Python entry: its next call installs a new one."""
    old = owner.__dict__.get("_nr_trampoline")
    if old is not None:
        invalidate(list(nodes_of(old).values()))
        owner._nr_trampoline = None
        if isinstance(type(owner).__dict__.get("__call__"), staticmethod):
            delattr(type(owner), "__call__")        # its class's own: the next call installs


def _entries_for_arities(f):
    """The entries of ``f``'s gradient objects (held by ``f``: api._gradient) made for the
    arities ``f`` had then, dropped when it gains or loses one: their next call installs an entry
    for the arities ``f`` has now."""
    arities = tuple(f.arities())
    for owner in list((registry.peek(f, "_nr_gradients") or {}).values()):
        tramp = owner.__dict__.get("_nr_trampoline")
        if tramp is not None and tramp._nr_arities != arities:
            _uninstall(owner)


dispatch.set_backend(_Backend())
