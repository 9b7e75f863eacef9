"""Compiled specializations, the dispatch decisions they recorded, backedges and invalidation.

A *node* is one compiled specialization: a dispatcher we own plus one tuple of Numba argument
types. Three kinds of dispatcher are ours: one per (method, argument types), the trampoline that
Python calls of a generic function jump through, and ``nr.jit`` functions. Every compile of a
node reports (through ``numba_glue``'s recording pass) the calls it made:

- to a generic function at lattice types T: the *decision* (f, T, method), and a *backedge* from
  the callee's node to this one (the callee's code is linked into the caller);
- to another dispatcher we own: a backedge only.

When a method is added or replaced, each recorded decision of that function is resolved again;
the nodes whose answer changed, the nodes of a replaced method, and everything that links them
(transitively, callers of callers) are dropped. Nothing else is touched, and dropped nodes
compile again lazily on their next call.

The AD engine records a second kind of decision for each call it differentiates: which rule
entry (``rules.lookup``: rrule, scalar rule, opt-out, non-differentiable, or None) it used.
Adding a rule, opt-out or non-differentiable declaration re-checks those the same way.

Truth table for one recorded decision (f, T -> d) after a change to f's methods or rules:

    decision made again for T    | node
    -----------------------------+---------------------------------
    d (the same object)          | kept
    another method / rule / None | dropped, with all its dependants
    an error (no method, ...)    | dropped (the next compile reports the error)
"""

import collections
import dis
import inspect
import warnings
import weakref

from . import diskcache, dispatch, numba_glue, profile, registry, rules
from .dispatch import GenericFunction
from .errors import CompilationError, DispatchError, RuleError
from .lattice import fmt_sig, from_numba, source_location, typeof


class Node:
    """One compiled specialization (or one engine-made choice) and what it relied on.

    A node belongs to its dispatcher (or, for an engine node, to the specialization or gradient
    object that made it) and refers to it weakly; it holds the nodes it links (``callees``)
    and is held weakly by the nodes linking it (``callers``), so that dropping the last
    reference to some compiled code frees its nodes too (numbarules.registry).
    """

    __slots__ = ("_dispatcher", "args", "label", "decisions", "callees", "callers", "alive",
                 "on_drop", "__weakref__")

    def __init__(self, dispatcher, args, label, on_drop=None):
        self._dispatcher = None if dispatcher is None else weakref.ref(dispatcher)
        self.args = args
        self.label = label
        self.decisions = []      # (function, lattice signature, kind, outcome): see _decide
        self.callees = set()
        self.callers = weakref.WeakSet()
        self.alive = True
        self.on_drop = on_drop   # engine nodes: what to forget when dropped

    @property
    def dispatcher(self):
        return None if self._dispatcher is None else self._dispatcher()

    def drop(self):
        if self._dispatcher is None:
            self.on_drop()
            return True
        disp = self._dispatcher()
        return disp is not None and numba_glue.drop_overload(disp, self.args)

    def __repr__(self):
        return f"<node {self.label}{self.args}>"


#: The module name of generated code (see numbarules/_generated.py).
GENERATED = "numbarules._generated"

# Who holds what (numbarules.registry): a dispatcher holds its nodes; a function holds the
# decisions recorded about calls of it, each held weakly by the node that relied on it; a method
# holds its compiled dispatchers; a plain function its nr.jit version. The global tables below
# are weak: they enumerate what is alive.
_DISPATCHERS = registry.Alive()               # dispatchers holding nodes ("_nr_nodes": {args: Node})
_ENGINE_NODES = registry.Alive()              # engine nodes (owned by what made them)
_counts = collections.Counter()
_by_function = collections.Counter()
_by_owner = weakref.WeakKeyDictionary()       # generic function or nr.jit dispatcher -> compiles


# --- recording ----------------------------------------------------------------------------------

def owned(py_func, label, owner=None, options=None, depends=(), local_types=None, persist=None,
          python=True, cfunc=False):
    """A dispatcher whose every compile records its decisions, counted for ``owner``.

    ``depends``: engine nodes every compile of it relies on (the AD kernels it was generated
    from); dropping one of them drops this dispatcher's compiled code too. ``persist``: what
    identifies its code across processes (see ``diskcache``); with it, compiles are stored on
    disk and loaded from there when every decision they relied on still comes out the same.

    Numba gives every compiled function two wrappers, each more machine code to generate: a C
    ABI one (for first-class function values: made for users' ``nr.jit`` functions only,
    ``cfunc=True``) and a CPython one (made unless ``python=False``: code only compiled code
    calls).
    """
    options = jit_options(options, python, cfunc)
    box = []
    disp = numba_glue.make_dispatcher(
        py_func, lambda args, calls: _record(box[0], label, owner or box[0], args, calls, depends),
        options, local_types)
    box.append(disp)
    disp._cache = _DiskSlot(disp, label, owner or disp, persist)
    return disp


def jit_options(options=None, python=True, cfunc=False):
    """The Numba target options ``owned`` compiles with (see there for the wrappers)."""
    options = dict(options or {})
    if not cfunc:
        options["no_cfunc_wrapper"] = True
    if not python:
        options["no_cpython_wrapper"] = True
    return options


def engine_node(label, decisions=(), callees=(), on_drop=None):
    """A node for a choice the AD engine made while generating code (not a compile).

    ``decisions``: (function, lattice signature, kind, outcome) it relied on (see ``_decide``).
    When one comes out differently, the node is dropped (``on_drop`` runs) with everything that
    depends on it.
    """
    node = Node(None, (), label, on_drop or (lambda: None))
    _link(node, decisions, callees)
    _ENGINE_NODES.add(node)
    return node


def _node(disp, args):
    """The node of ``disp`` compiled for ``args``, or None."""
    return None if disp is None else _nodes_of(disp).get(tuple(args))


def _nodes_of(disp):
    """{args: Node} of dispatcher ``disp``, held by the dispatcher itself."""
    return registry.peek(disp, "_nr_nodes") or {}


def _set_node(disp, args, node):
    registry.table(disp, "_nr_nodes")[tuple(args)] = node
    _DISPATCHERS.add(disp)


def all_nodes():
    """Every live node."""
    return [n for d in _DISPATCHERS for n in list(_nodes_of(d).values())] + list(_ENGINE_NODES)


def _decisions_about(f):
    """{lattice sig: {node: {kind: outcome}}} recorded about calls of ``f`` (on ``f`` itself)."""
    return registry.table(f, "_nr_decisions")


def _link(node, decisions, callees):
    for decision in decisions:
        _decide(node, *decision)
    for target in callees:
        if target is not None and target.alive:
            node.callees.add(target)
            target.callers.add(node)


def relied_on(calls):
    """(decisions, nodes) that code typed with ``calls`` (callee, argument types) relies on: the
    method each generic function call resolved to, and the compiled callees' nodes."""
    decisions, nodes = [], []
    for callee, cargs in calls:
        if isinstance(callee, GenericFunction):
            sig = tuple(from_numba(a) for a in cargs)
            try:
                method = callee.resolve(sig)
            except DispatchError:
                continue
            decisions.append((callee, sig, "method", method, tuple(cargs)))
            target = _node(_compiled(method).get(tuple(cargs)), cargs)
        elif hasattr(callee, "_nr_node_for"):      # a gradient object: its driver's node
            target = callee._nr_node_for(cargs)
        else:
            target = _node(callee, cargs)
        if target is not None:
            nodes.append(target)
    return decisions, nodes


def _record(disp, label, owner, args, calls, depends=()):
    old = _node(disp, args)
    if old is not None:
        _unlink(old)
    node = Node(disp, args, label)
    _set_node(disp, args, node)
    _link(node, (), depends)
    _link(node, *relied_on(calls))
    _counts["compiles"] += 1
    _by_function[label] += 1
    _by_owner[owner] = _by_owner.get(owner, 0) + 1


def _decide(node, f, sig, kind, outcome, argtypes=None):
    """Record that ``node`` relied on the ``kind`` decision for ``f`` at ``sig``: "method" (which
    method runs) or "rule" (which rule entry, or None, the AD engine used). ``argtypes``: the
    Numba types ``sig`` came from (what the disk cache stores to make the decision again)."""
    node.decisions.append((f, sig, kind, outcome, argtypes))
    _decisions_about(f).setdefault(sig, weakref.WeakKeyDictionary()).setdefault(
        node, {})[kind] = outcome


def decisions_hold(decisions):
    """Whether every decision (as ``_decide`` takes them) comes out the same now."""
    return all(_outcome(f, sig, kind) is outcome for f, sig, kind, outcome, *_ in decisions)


def _outcome(f, sig, kind):
    try:
        return f.resolve(sig) if kind == "method" else rules.lookup(f, sig)
    except (DispatchError, RuleError) as exc:
        return type(exc)      # an error now: differs from any recorded outcome


def _unlink(node):
    node.alive = False
    for callee in node.callees:
        callee.callers.discard(node)
    for f, sig, kind, *_ in node.decisions:
        registry.table(f, "_nr_decisions").get(sig, {}).pop(node, None)
    if node._dispatcher is None:
        _ENGINE_NODES.discard(node)
    else:
        nodes = _nodes_of(node.dispatcher)
        if nodes.get(node.args) is node:
            del nodes[node.args]


def invalidate(nodes):
    """Drop ``nodes`` and, transitively, every node that links one of them."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if not node.alive:
            continue
        stack.extend(node.callers)
        _unlink(node)
        if node.drop():
            _counts["invalidations"] += 1


# --- the disk cache ----------------------------------------------------------------------------

class _DiskSlot:
    """What Numba's dispatcher asks before compiling (``load_overload``) and after
    (``save_overload``): our disk cache in place of Numba's, which keys on a file's stamp and
    ignores dispatch decisions. Every owned dispatcher has one (it also prints progress); only
    those given a ``persist`` identity read and write files."""

    def __init__(self, disp, label, owner, persist):
        self.disp = disp
        self.label = label
        self.owner = owner
        self.persist = persist

    def _key(self, argtypes):
        # The dispatcher itself too: its options and the Python function Numba compiles, whose
        # globals, cells and constants Numba freezes (for AD kernels: the generated code, with
        # the constants and values the AD frontend resolved). None: something it freezes cannot
        # be fingerprinted soundly, so it is neither loaded nor stored.
        return diskcache.key_of((self.persist, tuple(str(a) for a in argtypes), self.disp))

    def load_overload(self, sig, target_context):
        argtypes = tuple(sig)
        if self.persist is not None and diskcache.enabled():
            adopted = []
            try:
                key = self._key(argtypes)
                found = None if key is None else diskcache.load(
                    key, lambda meta: _still_valid(meta, adopted))
            except Exception as exc:    # noqa: BLE001 - a cache failure must never stop a compile
                warnings.warn(f"numbarules: the disk cache could not be read ({type(exc).__name__}: "
                              f"{exc}); compiling instead", RuntimeWarning, stacklevel=2)
                found = None
            if found is not None:
                meta, payload, path = found
                try:
                    cres = numba_glue.persist.rebuild_result(self.disp, payload)
                except Exception as exc:   # noqa: BLE001 - as corrupt as a bad checksum
                    diskcache.discard(path, f"cannot rebuild: {exc}")
                    cres = None
                if cres is not None and tuple(cres.signature.args) != argtypes:
                    cres = None      # types that do not survive pickling (see save_overload)
                if cres is not None:
                    node = Node(self.disp, argtypes, self.label)
                    _set_node(self.disp, argtypes, node)
                    for decision in adopted:
                        _decide(node, *decision)
                    _counts["disk_hits"] += 1
                    return cres
        profile.progress(f"compiling {self.label} {profile.readable_signature(argtypes)}")
        return None

    def save_overload(self, sig, cres):
        if self.persist is None or not diskcache.enabled():
            return
        args = tuple(cres.signature.args)
        node = _node(self.disp, args)
        decisions = _portable_decisions(node) if node is not None else None
        if decisions is None:
            return              # something it relied on cannot be named in another process
        if not numba_glue.persist.survives_pickling(args):
            # A struct class defined inside a function pickles by value: another process would
            # get a class of the same name that is not the one its arguments have.
            return
        payload = numba_glue.persist.serialize_result(cres)
        if payload is None:
            return
        key = self._key(args)
        if key is None:
            return
        meta = {"label": self.label, "decisions": decisions}
        if diskcache.save(key, meta, payload):
            _counts["disk_writes"] += 1

    def flush(self):
        pass


def _portable_decisions(node):
    """Every decision ``node`` and what it links relied on, as (function reference, argument
    types, kind, fingerprint of the outcome); None if one cannot be named in another process."""
    out, seen, stack = set(), set(), [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.extend(n.callees)
        for f, _, kind, outcome, argtypes in n.decisions:
            name = diskcache.ref(f)
            digest = diskcache.fingerprint(outcome)
            if name is None or argtypes is None or digest is None:
                return None
            out.add((name, argtypes, kind, digest))
    return sorted(out, key=repr)


def _still_valid(meta, adopted):
    """Whether every stored decision comes out the same now; fills ``adopted`` with them."""
    adopted.clear()
    for name, argtypes, kind, expected in meta["decisions"]:
        try:
            f = diskcache.resolve_ref(name)
        except LookupError:
            return False
        sig = tuple(from_numba(a) for a in argtypes)
        outcome = _outcome(f, sig, kind)
        digest = diskcache.fingerprint(outcome)
        if digest is None or digest != expected:
            return False
        adopted.append((f, sig, kind, outcome, argtypes))
    return True


# --- the backend the dispatch module calls --------------------------------------------------

class _Backend:
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
        affected = _changed_decisions(f)
        if old is not None:
            compiled = _compiled(old)
            for disp in list(compiled.values()):
                affected += list(_nodes_of(disp).values())
            compiled.clear()
        invalidate(affected)
        tramp = f.__dict__.get("_nr_trampoline")
        if tramp is not None and tramp._nr_arities != tuple(f.arities()):
            _install_trampoline(f)
        _entries_for_arities(f)


    def rules_changed(self, f):
        invalidate(_changed_decisions(f))


def _changed_decisions(f):
    """Nodes whose recorded decisions about ``f`` come out differently now (see the table)."""
    affected = []
    for sig, entries in list((registry.peek(f, "_nr_decisions") or {}).items()):
        now = {}
        for node, kinds in list(entries.items()):
            for kind, chosen in list(kinds.items()):
                if kind not in now:
                    now[kind] = _outcome(f, sig, kind)
                if now[kind] is not chosen:
                    affected.append(node)
    return affected


def resolve_call(f, context, argtypes):
    """The dispatcher a compiled call of generic function ``f`` at ``argtypes`` jumps to."""
    sig = tuple(from_numba(a) for a in argtypes)
    try:
        method = f.resolve(sig)
    except DispatchError as exc:
        numba_glue.pending_errors().append(exc)
        raise numba_glue.TypingError(str(exc)) from None
    return specialize(method, argtypes, context)


def specialize(method, argtypes, context=None):
    """The dispatcher of ``method`` compiled for ``argtypes`` (compiling it if needed)."""
    compiled = _compiled(method)
    disp = compiled.get(tuple(argtypes))
    if disp is None:
        disp = compiled[tuple(argtypes)] = owned(_prepare(method.func), repr(method),
                                                 method.function, persist=("method", method))
    if context is not None and numba_glue.being_typed(context, disp, argtypes):
        return disp                 # a recursive call: the template types it
    if numba_glue.has_overload(disp, argtypes):
        _counts["hits"] += 1
        return disp
    try:
        numba_glue.compile_for(disp, argtypes)
    except numba_glue.NumbaError as exc:
        pending = numba_glue.pending_errors()
        if not pending:
            pending.append(compile_error(method.func, f"method {method!r}", argtypes, exc))
        raise numba_glue.TypingError(str(pending[-1])) from None
    return disp


def _compiled(method):
    """{argument types: dispatcher} of ``method``, held by the method itself."""
    return registry.table(method, "_nr_compiled")


_CPU_ADVICE = "Method bodies and nr.jit functions must be Numba-compilable (nopython mode)."


def compile_error(func, what, argtypes, exc, target="", advice=_CPU_ADVICE):
    """The CompilationError for ``func`` (a method body, an nr.jit function, a helper) that Numba
    could not compile for ``argtypes``: where it is defined, Numba's reason, what to do.
    ``target``: " for the device" (cuda.methods), empty for the CPU."""
    file, line = source_location(func)
    sig = fmt_sig(tuple(from_numba(a) for a in argtypes))
    return CompilationError(
        f"{what} defined at {file}:{line} could not be compiled{target} at {sig}:\n"
        f"{numba_glue.error_text(exc)}\n{advice}",
        function=func, argtypes=argtypes, file=file, line=line)


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

    def __init__(self, target, resolve, node_for=None):
        self.target = target
        self.__name__ = getattr(target, "__name__", "f")
        self._nr_resolve = resolve
        self._nr_node = node_for or (lambda t, argtypes: _node(t, argtypes))
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


def install_entry(owner, arities, check, resolve, arities_of=None):
    """Make ``owner(...)`` a direct call of an njit dispatcher whose body calls ``owner``: the
    entry of a generic function (or its gradient) with methods of several arities.

    Numba's C dispatcher then does the type lookup and the jump, so a call costs about what a
    call of an ``@njit`` function costs (plus ~70 ns: Numba folds the ``*args`` into a tuple).
    ``check(args)`` runs on the first call with new types, before compiling: it raises our own
    errors (NoMethodError). The entry calls ``owner`` unlinked (``Unlinked``), through
    ``resolve(owner, context, argtypes)`` and ``owner._nr_node_for``. ``arities_of``: the generic
    function whose arities the entry was made for (``entries_for_arities``).
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

    _finish_entry(owner, tramp, arities, before, arities_of)


def install_direct_entry(owner, arity, check, callee_of, record_as=None, signature=None,
                         arities_of=None):
    """Make ``owner(...)`` with ``arity`` positional arguments run code compiled elsewhere, with
    nothing compiled for the entry itself: ``callee_of(argtypes)`` returns the dispatcher
    (compiled with a CPython wrapper) whose code runs for ``argtypes``, and its compile result
    becomes the entry's overload (``numba_glue.AdoptingDispatcher``). Unlike ``install_entry``'s
    trampoline, which typed, lowered and optimised a function calling the callee (0.05-0.08 s
    per first call), this only registers the callee's entry point with Numba's C dispatcher.

    ``signature``: [(name, default or inspect.Parameter.empty)], the parameters of the user's
    function. The entry takes them by those names, so Numba's C dispatcher binds keywords and
    fills defaults (an omitted argument reaches ``callee_of`` as ``types.Omitted``); without it
    the entry takes positional arguments only.

    The entry's node links the callee's: dropping the callee's code (a rule added, a method
    changed) drops the entry's overload too, and the next call adopts the new code. With
    ``record_as`` (a generic function), the entry's node records the call as a call of it: the
    method decision too, so that a new method winning the call drops the entry. ``check(args)``
    runs on the first call with new types, before anything is compiled."""
    _uninstall(owner)
    label = f"{owner.__qualname__} (entry)"

    def adopt(disp, argtypes):
        callee = callee_of(argtypes)
        cres = numba_glue.compile_result(callee, argtypes)
        node = Node(disp, argtypes, label)
        _set_node(disp, argtypes, node)
        _link(node, *relied_on([(record_as or callee, argtypes)]))
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
    entry._cache = _DiskSlot(entry, label, owner, None)     # its label; it stores nothing

    def before(disp, args):
        numba_glue.pending_errors().clear()
        for (name, _), a in zip(signature, args):
            if numba_glue.is_omitted(a) and a.value is _REQUIRED:
                raise TypeError(f"{owner.__qualname__}: missing a required argument: '{name}'")
        check(args)

    _finish_entry(owner, entry, (arity,), before, arities_of)


class _Required:
    def __repr__(self):
        return "<required>"


_REQUIRED = _Required()


def _finish_entry(owner, entry, arities, before, arities_of):
    entry._nr_arities = tuple(arities)
    entry.before_compile = before
    entry.on_error = lambda disp, args, exc: _boundary_error(exc)
    owner._nr_trampoline = entry
    type(owner).__call__ = staticmethod(entry)
    if arities_of is not None:
        registry.table(arities_of, "_nr_arity_entries")[id(owner)] = weakref.ref(owner)


def _uninstall(owner):
    """Drop ``owner``'s Python entry: its next call installs a new one."""
    old = owner.__dict__.get("_nr_trampoline")
    if old is not None:
        invalidate(list(_nodes_of(old).values()))
        owner._nr_trampoline = None
        if isinstance(type(owner).__dict__.get("__call__"), staticmethod):
            delattr(type(owner), "__call__")        # its class's own: the next call installs


def _entries_for_arities(f):
    """Entries made for ``f``'s arities of the time (its gradient objects'), dropped when ``f``
    gains or loses an arity: the next call installs one for the arities ``f`` has now."""
    arities = tuple(f.arities())
    for ref in list((registry.peek(f, "_nr_arity_entries") or {}).values()):
        owner = ref()
        tramp = owner.__dict__.get("_nr_trampoline") if owner is not None else None
        if tramp is not None and tramp._nr_arities != arities:
            _uninstall(owner)


def node_of(dispatcher, argtypes):
    return _node(dispatcher, argtypes)


def _boundary_error(exc, func=None, args=()):
    pending = numba_glue.pending_errors()
    if pending:
        err = pending[0]
        pending.clear()
        where = [ln.strip() for ln in numba_glue.error_text(exc).splitlines()
                 if ln.strip().startswith("File ") and "<numbarules " not in ln]
        if where and isinstance(err, DispatchError) and "Called from" not in err.args[0] \
                and "File " not in err.args[0]:
            err.args = (f"{err.args[0]}\nCalled from {where[-1]}",)
        return err
    if func is not None:
        return compile_error(func, f"nr.jit function {func.__qualname__}", args, exc)
    return None


# --- nr.jit and plain helpers ------------------------------------------------------------------

def jit(func=None, **options):
    """``numba.njit`` plus backedges: recompiled when a generic function it relies on changes.

    Plain Python functions it calls are compiled alongside (with backedges too).
    """
    if func is None:
        return lambda fn: jit(fn, **options)
    if options.get("cache"):
        raise ValueError("nr.jit does not take cache=True: Numba's cache ignores dispatch decisions "
                         "and would load stale code (numbarules' own disk cache is keyed safely)")
    return _jit(func, options, _options_key(options), internal=False)


def _jit(func, options, key, internal):
    """The nr.jit dispatcher of ``func``, held by ``func`` under ``key``. ``internal``: only
    compiled code calls it (a helper our kernels call), so Numba makes no wrappers for it."""
    prepared, fill = _prepare_deferred(func)
    disp = owned(prepared, func.__qualname__, None, options,
                 persist=("jit", func, sorted(options.items(), key=repr), internal),
                 python=not internal, cfunc=not internal)
    # held by the function, before its callees are swapped in: they may call it back
    registry.table(func, "_nr_jit")[key] = disp
    fill()

    def before(d, args):
        numba_glue.pending_errors().clear()

    disp.before_compile = before
    disp.on_error = lambda d, args, exc: _boundary_error(
        exc, func, numba_glue.typeof_args(d, args))
    return disp


def is_plain(value):
    """A pure-Python function Numba cannot call as it is (so we compile it alongside)."""
    return inspect.isfunction(value) and not numba_glue.numba_types_value(value)


def _prepare(func):
    """``func`` with the plain Python functions it names replaced by their nr.jit versions."""
    prepared, fill = _prepare_deferred(func)
    fill()
    return prepared


def global_names(func):
    """The global names ``func`` (and the functions defined in it) load.

    Global loads only: ``co_names`` also holds attribute names, and ``np.concatenate`` inside a
    module-level ``def concatenate`` must not make the function call itself."""
    names = set()
    stack = [func.__code__]
    while stack:
        code = stack.pop()
        names.update(i.argval for i in dis.get_instructions(code)
                     if i.opname in ("LOAD_GLOBAL", "LOAD_NAME"))
        stack += [c for c in code.co_consts if inspect.iscode(c)]
    return names


def _prepare_deferred(func):
    """(``func`` rebuilt over its own copy of its globals, a function that swaps the plain
    Python functions it names for their nr.jit versions in that copy).

    The swap is deferred so that the caller can register the compiled version of ``func`` first:
    a plain function that calls itself (or one that calls it back) then finds it, instead of
    preparing the same function again forever.
    """
    names = global_names(func)
    from .primitives import arrays     # not at the top: importing numbarules.primitives registers
    #                                    every built-in rule, once the core modules are loaded
    glb = func.__globals__
    swaps = {n: glb[n] for n in names if n in glb and is_plain(glb[n])}
    # NumPy as numbarules compiles it (np.max(x, axis): primitives/arrays.py), swapped at once
    numpy = any(arrays.for_numba(glb[n]) is not glb[n] for n in names if n in glb)
    cells = func.__closure__ or ()
    cell_swaps = [i for i, c in enumerate(cells) if is_plain(_cell_value(c))]
    cell_numpy = {i: arrays.for_numba(_cell_value(c)) for i, c in enumerate(cells)}
    cell_numpy = {i: v for i, v in cell_numpy.items() if v is not _cell_value(cells[i])}
    if not swaps and not cell_swaps and not numpy and not cell_numpy:
        return func, lambda: None
    live, glb = glb, dict(glb)
    closure = tuple(_new_cell(c.cell_contents) if i in cell_swaps else
                    _new_cell(cell_numpy[i]) if i in cell_numpy else c
                    for i, c in enumerate(cells)) or None
    new = _rebuilt(func, glb, closure)

    def fill():
        glb.update({n: helper(v) for n, v in swaps.items()})
        for i in cell_swaps:
            closure[i].cell_contents = helper(closure[i].cell_contents)

    def refresh():
        # The copy of the globals must not freeze them: a global the module rebinds later
        # (K = 3.0) is what the next compile sees, as under numba.njit. numba_glue.Dispatcher
        # calls this before each compile. (Swapped helpers keep their compiled versions.)
        for k, v in live.items():
            if k not in swaps:
                glb[k] = arrays.for_numba(v)
    refresh()
    new._nr_refresh = refresh
    return new, fill


def swapped(func, swap):
    """``func`` over a copy of its globals and closure in which each value it names is
    ``swap(value)`` (``func`` itself when nothing changes): how a target's compile sees the
    names a function calls (cuda.methods.prepare)."""
    glb = func.__globals__
    swaps = {n: swap(glb[n]) for n in global_names(func) if n in glb}
    swaps = {n: v for n, v in swaps.items() if v is not glb[n]}
    cells = func.__closure__ or ()
    values = [_cell_value(c) for c in cells]
    new_values = [swap(v) if v is not None else v for v in values]
    if not swaps and all(a is b for a, b in zip(new_values, values)):
        return func
    closure = tuple(c if new is old else _new_cell(new)
                    for c, old, new in zip(cells, values, new_values)) or None
    return _rebuilt(func, dict(glb, **swaps), closure)


def _rebuilt(func, glb, closure):
    new = type(func)(func.__code__, glb, func.__name__, func.__defaults__, closure)
    new.__qualname__ = func.__qualname__
    new.__module__ = func.__module__
    return new


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:   # an empty cell
        return None


def _new_cell(value):
    return (lambda: value).__closure__[0]


def helper(func):
    """The compiled version of a plain Python function that compiled code calls (one per
    function, held by it; not callable from Python)."""
    made = registry.table(func, "_nr_jit")
    disp = made.get(_HELPER)
    return disp if disp is not None else _jit(func, {}, _HELPER, internal=True)


_HELPER = ("helper",)


def partials(func):
    """The compiled partial derivatives of a scalar rule: NumPy's error model always (a pole
    gives inf, as in JAX: d/dx sqrt(x) at 0), whatever the kernel calling it. Numba would
    otherwise compile it with the error model of the first caller (flags are inherited), and
    the forward kernels keep Python's, where dividing by zero raises."""
    made = registry.table(func, "_nr_jit")
    disp = made.get(_PARTIALS)
    if disp is None:
        disp = _jit(func, {"error_model": "numpy"}, _PARTIALS, internal=True)
    return disp


_PARTIALS = ("partials",)


def _options_key(options):
    return tuple(sorted(options.items(), key=repr))


# --- counters ------------------------------------------------------------------------------------

def cache_info(f=None):
    """Counts since start or ``clear_cache()``: compiles, hits, invalidations, and more.

    ``disk_hits``: specializations loaded from the disk cache instead of compiled;
    ``disk_writes``: compiles stored there.

    With ``f`` (a generic function or an ``nr.jit`` function): ``{"compiles": n}`` for it alone,
    counting every specialization of every one of its methods and its Python entry.
    """
    if f is not None:
        return {"compiles": _by_owner.get(f, 0)}
    return {
        "compiles": _counts["compiles"],
        "hits": _counts["hits"],
        "invalidations": _counts["invalidations"],
        "disk_hits": _counts["disk_hits"],
        "disk_writes": _counts["disk_writes"],
        "specializations": len(all_nodes()),
        "by_function": dict(_by_function),
    }


#: The tables the engine keeps on the objects they are about (numbarules.registry).
_TABLES = ("_nr_ad", "_nr_compiled", "_nr_jit", "_nr_gradients", "_nr_decisions", "_nr_nodes")


_CLEAR_HOOKS = []


def on_clear(hook):
    """Have ``clear_cache`` call ``hook(owners)`` at its end: ``owners`` the objects holding what
    was compiled for ``f`` (``clear_cache(f)``), or None (everything). For tables kept outside
    the owners' own (the CUDA target's), so that they let go of what they hold too."""
    _CLEAR_HOOKS.append(hook)


def clear_cache(f=None, disk=False):
    """Drop every compiled specialization and reset the counters; with ``disk=True`` also empty
    the on-disk kernel cache (what ``numbarules cache clear`` does).

    With ``f`` (a generic function, a plain or ``nr.jit`` function, a rule's function): drop
    only what was compiled for ``f`` (its methods, its AD kernels and rules' kernels, its
    gradient objects) and everything compiled against it, and let it be freed. Numba keeps the
    code it compiled from a module's globals alive as long as that code may run, and with it
    those globals; this is how a process that differentiates many short-lived functions gives
    their memory back (all but the ~0.7 MB per compile that Numba's JIT engine keeps).
    """
    if disk:
        diskcache.clear()
    with numba_glue.LOCK:
        if f is not None:
            owners = _owners_of(f)
            invalidate([n for o in owners for n in _nodes_held_by(o)])
            for o in owners:
                for name in _TABLES:
                    found = registry.peek(o, name)
                    if found is not None and name != "_nr_decisions":
                        found.clear()
            for hook in _CLEAR_HOOKS:
                hook(owners)
            return
        invalidate(all_nodes())
        registry.clear(_TABLES)
        _counts.clear()
        _by_function.clear()
        _by_owner.clear()
        for hook in _CLEAR_HOOKS:
            hook(None)


def _owners_of(f):
    """``f`` and the objects holding what was compiled for it: its methods, its rules, its
    gradient objects."""
    owners = [f] + list(getattr(f, "methods", ()) if isinstance(f, GenericFunction) else ())
    owners += list(rules.entries(f))
    owners += list((registry.peek(f, "_nr_gradients") or {}).values())
    return owners


def _nodes_held_by(owner):
    nodes = []
    for spec in list((registry.peek(owner, "_nr_ad") or {}).values()):
        if getattr(spec, "node", None) is not None:
            nodes.append(spec.node)
    for name in ("_nr_compiled", "_nr_jit"):
        for disp in list((registry.peek(owner, name) or {}).values()):
            nodes += list(_nodes_of(disp).values())
    tramp = getattr(owner, "__dict__", {}).get("_nr_trampoline")
    if tramp is not None:
        nodes += list(_nodes_of(tramp).values())
    for entry in list(getattr(owner, "_drivers", {}).values()):
        nodes.append(entry[1])
    return nodes


dispatch.set_backend(_Backend())
