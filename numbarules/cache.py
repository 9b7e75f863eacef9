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
import warnings
import weakref

from . import diskcache, fingerprints, numba_glue, profile, registry, rules
from .dispatch import GenericFunction
from .errors import DispatchError, RuleError
from .lattice import from_numba


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
GENERATED = numba_glue.GENERATED

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
    disp._cache = DiskSlot(disp, label, owner or disp, persist)
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
    link(node, decisions, callees)
    _ENGINE_NODES.add(node)
    return node


def _node(disp, args):
    """The node of ``disp`` compiled for ``args``, or None."""
    return None if disp is None else nodes_of(disp).get(tuple(args))


def nodes_of(disp):
    """{args: Node} of dispatcher ``disp``, held by the dispatcher itself."""
    return registry.peek(disp, "_nr_nodes") or {}


def set_node(disp, args, node):
    registry.table(disp, "_nr_nodes")[tuple(args)] = node
    _DISPATCHERS.add(disp)


def all_nodes():
    """Every live node."""
    return [n for d in _DISPATCHERS for n in list(nodes_of(d).values())] + list(_ENGINE_NODES)


def _decisions_about(f):
    """{lattice sig: {node: {kind: outcome}}} recorded about calls of ``f`` (on ``f`` itself)."""
    return registry.table(f, "_nr_decisions")


def link(node, decisions, callees):
    for decision in decisions:
        _decide(node, *decision)
    for target in callees:
        if target is not None and target.alive:
            node.callees.add(target)
            target.callers.add(node)


class Waiters:
    """The callers built inside a specialization's build that call back into it (mutual
    recursion: ``up`` calls ``down`` calls ``up``), each with how it gets the kernels once they
    exist. One for the reverse mode's specializations (kernels.py), one for forward mode's
    (tangent_kernels.py)."""

    def __init__(self):
        self._waiting = []

    def add(self, caller, bind):
        """``caller`` (a specialization) waits; ``bind()`` gives it the kernels."""
        self._waiting.append((caller, bind))

    def built(self, node):
        """The build ended: give each caller the kernels, and make its node rely on ``node`` as
        on any callee's, so that a rule or method that drops the callee drops them too. Until
        2026-12-07 they were not linked, and a rule added after the first gradient was missed
        by a caller on the cycle reached from another entry (``down``, built inside ``up``'s
        build, kept ``up``'s old kernels: a wrong gradient)."""
        waiting, self._waiting = self._waiting, []
        for caller, bind in waiting:
            bind()
            if caller.alive and caller.node is not None:
                link(caller.node, (), (node,))

    def failed(self):
        """The build failed: the callers never got its kernels. Each is dropped, with whatever
        relies on it (a caller's node drops its specialization)."""
        waiting, self._waiting = self._waiting, []
        for caller, _ in waiting:
            if caller.node is not None:
                invalidate([caller.node])
            else:
                caller.drop()


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
            target = _node(compiled_of(method).get(tuple(cargs)), cargs)
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
    set_node(disp, args, node)
    link(node, (), depends)
    link(node, *relied_on(calls))
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
        if kind == "method":
            return f.resolve(sig)
        return rules.lookup_frule(f, sig) if kind == "frule" else rules.lookup(f, sig)
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
        nodes = nodes_of(node.dispatcher)
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

class DiskSlot:
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
                    set_node(self.disp, argtypes, node)
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
            name = fingerprints.ref(f)
            digest = fingerprints.fingerprint(outcome)
            if name is None or argtypes is None or digest is None:
                return None
            out.add((name, argtypes, kind, digest))
    return sorted(out, key=repr)


def _still_valid(meta, adopted):
    """Whether every stored decision comes out the same now; fills ``adopted`` with them."""
    adopted.clear()
    for name, argtypes, kind, expected in meta["decisions"]:
        try:
            f = fingerprints.resolve_ref(name)
        except LookupError:
            return False
        sig = tuple(from_numba(a) for a in argtypes)
        outcome = _outcome(f, sig, kind)
        digest = fingerprints.fingerprint(outcome)
        if digest is None or digest != expected:
            return False
        adopted.append((f, sig, kind, outcome, argtypes))
    return True


# --- what invalidation asks ------------------------------------------------------------------

def changed_decisions(f):
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


def node_of(dispatcher, argtypes):
    return _node(dispatcher, argtypes)


def compiled_of(method):
    """{argument types: dispatcher} of ``method``, held by the method itself."""
    return registry.table(method, "_nr_compiled")


# --- counters ------------------------------------------------------------------------------------

def counted(kind):
    """Count one more ``kind`` ("hits": a compiled specialization found again)."""
    _counts[kind] += 1


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


_TARGET_TABLES = []


def clear_with_the_engine(*names):
    """Have ``clear_cache`` empty the tables called ``names`` on the owners it clears, as it does
    its own: the tables another target (numbarules.cuda) keeps on the same objects."""
    _TARGET_TABLES.extend(names)


def clear_cache(f=None, disk=False):
    """Drop every compiled specialization and reset the counters; with ``disk=True`` also empty
    the on-disk kernel cache (what ``numbarules cache clear`` does).

    With ``f`` (a generic function, a plain or ``nr.jit`` function, a rule's function): drop
    only what was compiled for ``f`` (its methods, its AD kernels and rules' kernels, its
    gradient objects) and everything compiled against it, and let it be freed. Numba keeps the
    code it compiled from a module's globals alive as long as that code may run, and with it
    those globals; this is how a process that differentiates many short-lived functions gives
    their memory back (all but the ~0.7 MB per compile that Numba's JIT engine keeps). Without
    ``f`` it also frees the block of the last large array a gradient freed, which the process
    keeps for the next one (at most one, of at most 512 MB).
    """
    if disk:
        diskcache.clear()
    with numba_glue.LOCK:
        if f is not None:
            owners = _owners_of(f)
            invalidate([n for o in owners for n in _nodes_held_by(o)])
            for o in owners:
                for name in _TABLES + tuple(_TARGET_TABLES):
                    found = registry.peek(o, name)
                    if found is not None and name != "_nr_decisions":
                        found.clear()
            return
        invalidate(all_nodes())
        registry.clear(_TABLES + tuple(_TARGET_TABLES))
        _counts.clear()
        _by_function.clear()
        _by_owner.clear()
        # the large blocks gradients freed, kept for the next ones (numba_glue.blocks)
        numba_glue.blocks.BLOCKS.release()


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
            nodes += list(nodes_of(disp).values())
    tramp = getattr(owner, "__dict__", {}).get("_nr_trampoline")
    if tramp is not None:
        nodes += list(nodes_of(tramp).values())
    for entry in list(getattr(owner, "_drivers", {}).values()):
        nodes.append(entry[1])
    return nodes

