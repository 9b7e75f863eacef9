"""What the reverse pass reads and how it gets it: values pushed before they are overwritten
(``_pushes``), arrays saved whole before a loop (``_snapshots``), the primal values each
adjoint reads (``adjoint_reads``, ``_needed``) and the statements the reverse pass must visit.

Part of the AD analysis (``analysis.plan``; what is recomputed instead is ``recompute``).
"""

from numba import types as nbt

from . import ir
from .dataflow import (branch_key, _one_part, part_of, _reads, rebinding_sites, stmt_reads,
                       view_base)


def _pushes(fn, stmts, sites, needed, recompute, in_loop, alias, types, rev_reads, tests,
            result_reads, rebound, lazy, active):
    body = fn.body
    recomputed = {id(s) for group in recompute.values() for s in group}
    recomputed_targets = {s.target for group in recompute.values() for s in group}
    pushes = set()

    def scalar(v):
        return not isinstance(types.get(v), nbt.Array)

    # ``pending``: the scalar variables whose *current* value the adjoint of some statement
    # already passed reads. Overwriting such a value means saving it first. Adjoints read
    # operands as they were at the statement (a statement never reads its own target) and,
    # for exp-like partials, the statement's own result.
    def invariant_part(s):
        """A read of a part of an aggregate that is bound once, outside every loop: the same
        value every time. Not for a parameter: its binding replaces the argument, which the
        reverse may read. (An aggregate bound inside a loop, ``p = helper(t)`` in a nested
        loop, is a new value each iteration: taking its part for invariant left ``p[0]`` unsaved
        and the reverse read the last iteration's, a silently wrong gradient.)"""
        src = part_of(s.expr, types)
        return src is not None and not isinstance(s.expr, ir.Atom) \
            and s.target not in fn.params \
            and len(sites.get(s.target, ())) == 1 and len(sites.get(src, ())) <= 1 \
            and not any(id(x) in in_loop for x in sites.get(src, ()))

    def scan(block, pending):
        for s in block:
            if isinstance(s, ir.Assign):
                v = s.target
                pending = pending | rev_reads(s)
                if id(s) in recomputed or not scalar(v) or invariant_part(s):
                    pending = pending - {v}
                    continue
                if v in pending:
                    pushes.add(id(s))
                pending = pending - {v}
                if v in result_reads:
                    pending = pending | {v}
            elif isinstance(s, ir.Store):
                # The store's reverse reads its indices, and the shape of an array value (a
                # slice store's _ub); never a number stored into an element: an accumulation
                # temporary (_t31 = f[i, 0] + g; f[i, 0] = _t31) needs no save per iteration.
                pending = pending | {a.id for a in ir.index_atoms(s.index)
                                     if isinstance(a, ir.Name)}
                if isinstance(s.value, ir.Name) and not scalar(s.value.id):
                    pending = pending | {s.value.id}
            elif isinstance(s, ir.If):
                if isinstance(s.test, ir.Name) and s.test.id in tests:
                    pending = pending | {s.test.id}
                # a branch's recomputed statements read their operands at its entry
                pending = scan(s.body, pending | _recompute_operands(
                    recompute.get(branch_key(s, 0), ()), recomputed_targets)) | scan(
                    s.orelse, pending | _recompute_operands(
                        recompute.get(branch_key(s, 1), ()), recomputed_targets))
            elif isinstance(s, ir.For):
                pending = pending | {a.id for a in (s.start, s.step) if isinstance(a, ir.Name)}
                pending = pending | (_recompute_operands(recompute.get(s.id, ()),
                                                         recomputed_targets) - {s.var})
                if s.snapshots is not None:
                    pending = pending | _checkpoint_reads(s)
                # The reverse loop sets the loop variable itself; only its value from before
                # the loop needs restoring.
                if s.var in pending and scalar(s.var):
                    pushes.add(id(s))
                entry = pending - {s.var}
                while True:
                    out = scan(s.body, entry)
                    grown = entry | (out - {s.var})
                    if grown == entry:
                        break
                    entry = grown
                pending = (pending | out) - {s.var}
            elif isinstance(s, ir.While):
                pending = pending | _recompute_operands(recompute.get(s.id, ()), recomputed_targets)
                entry = pending
                while True:
                    after_cond = scan(s.cond, entry)
                    out = scan(s.body, after_cond)
                    grown = entry | out
                    if grown == entry:
                        break
                    entry = grown
                pending = after_cond
        return pending

    scan(body, frozenset())
    for v, ss in sites.items():
        if v in lazy:
            continue        # taken again in the reverse pass (_lazy_views)
        if v in rebound or v in needed and not scalar(v) and isinstance(types.get(v), nbt.Array) \
                and (len(ss) > 1 or any(id(s) in in_loop for s in ss)) and not any(
                    id(s) in recomputed for s in ss) and not (_one_part(ss, types)
                                                                and v not in fn.params):
            # Array references: the binding the statement drops goes on a list of arrays.
            pushes.update(id(s) for s in rebinding_sites(fn, v, sites))
            continue
        if v in needed and not scalar(v):
            if _one_part(ss, types) and v not in fn.params:
                continue        # one field of one aggregate: the same array every time
            pushes.update(id(s) for s in ss if id(s) not in recomputed
                          and (len(ss) > 1 or id(s) in in_loop))
    needed_arrays = {alias.get(n, n) for n in needed}
    fresh = _stores_into_fresh(fn.body, alias)
    # A store saves the element it overwrites only where the reverse pass may read the old
    # value: a statement whose reverse reads the array's values runs after the store's reverse
    # (restored there) exactly when its forward may run before the store. Not an array of the
    # caller's (a parameter's class): restoring it is what the caller sees.
    readers = [(r, {alias.get(n, n) for n in names})
               for r, names in _value_readers(stmts, rev_reads, recompute, lazy, active, tests,
                                              result_reads)]
    before = _may_run_before(body)
    theirs = {alias.get(p, p) for p in fn.params}
    for s in stmts:
        if isinstance(s, ir.Store) and alias.get(s.array, s.array) in needed_arrays \
                and id(s) not in fresh:
            cls = alias.get(s.array, s.array)
            if cls in theirs or any(cls in classes and before(r, s) for r, classes in readers):
                pushes.add(id(s))
    return pushes


def _value_readers(stmts, rev_reads, recompute, lazy, active, tests, result_reads,
                   rebinding=False):
    """(statement, names): the statements whose reverse reads the values (not just the
    shapes) of these names: adjoints, a callee's or rule's pullback (which may keep references
    to its array arguments: a store into one changes what they read), recomputed statements,
    views taken again, checkpointed loops' steps, loop bounds, branch tests, the value a store
    writes.

    ``rebinding``: the question a rebinding asks (may the array it drops be kept as its shape
    alone, ``analysis._shape_only``), which no store changes: a pullback's references do not
    count, nor an array stored into a slice (its store's reverse reads its shape,
    ``_ub(d_u[...], w)``)."""
    out = []
    for s in stmts:
        if isinstance(s, ir.Assign):
            names = set(rev_reads(s))
            if s.target in lazy or s.target in active and (
                    isinstance(s.expr, ir.Call) and not rebinding
                    or isinstance(s.expr, ir.MethodCall)
                    and s.expr.name not in _SHAPE_ONLY_METHODS):
                names |= set(_reads(s.expr))
            if s.target in result_reads:
                names.add(s.target)
            out.append((s, names))
        elif isinstance(s, ir.Store):
            names = {a.id for a in ir.index_atoms(s.index) if isinstance(a, ir.Name)}
            if isinstance(s.value, ir.Name) and not rebinding:
                names.add(s.value.id)
            out.append((s, names))
        elif isinstance(s, ir.For):
            names = {a.id for a in (s.start, s.stop, s.step) if isinstance(a, ir.Name)}
            if s.snapshots is not None:
                names |= _checkpoint_reads(s)
            out.append((s, names))
        elif isinstance(s, ir.If) and isinstance(s.test, ir.Name) and s.test.id in tests:
            out.append((s, {s.test.id}))
    out += [(r, set(_reads(r.expr))) for group in recompute.values() for r in group]
    return out


#: Methods whose adjoint reads no element of the object (``d_u += g``; a reshape to its shape)
_SHAPE_ONLY_METHODS = frozenset({"copy", "ravel", "flatten"})


def _may_run_before(body):
    """``before(s, x)``: whether statement ``s`` may run before statement ``x``: earlier in
    the program, or in a loop around both (a later iteration)."""
    order, loops = {}, {}

    def visit(block, around):
        for s in block:
            order[id(s)], loops[id(s)] = len(order), around
            if isinstance(s, ir.If):
                visit(s.body, around)
                visit(s.orelse, around)
            elif isinstance(s, ir.For):
                visit(s.body, around | {id(s)})
            elif isinstance(s, ir.While):
                visit(s.cond, around | {id(s)})
                visit(s.body, around | {id(s)})

    visit(body, frozenset())
    return lambda s, x: order[id(s)] < order[id(x)] or bool(loops[id(s)] & loops[id(x)])


_ALLOCATIONS = {"zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like", "full"}


def _makes_new_array(e):
    """Whether ``e`` certainly makes a new array (not one a call may hand back)."""
    if isinstance(e, (ir.BinOp, ir.UnaryOp)):
        return True
    if isinstance(e, ir.MethodCall):
        return e.name == "copy"
    return isinstance(e, ir.Call) and getattr(e.func, "__module__", "") == "numpy" \
        and getattr(e.func, "__name__", "") in _ALLOCATIONS


def _stores_into_fresh(body, alias):
    """id() of stores that overwrite what a new array was made with (``lap = np.zeros_like(u);
    lap[1:-1] = ...``): the array is bound earlier in the same block by an operation that makes
    a new array, no statement in between mentions it, and it shares memory with no other name.
    The reverse pass never reads those old contents, so they are not saved."""
    shared = set(alias) | set(alias.values())
    out = set()
    for block in ir.blocks(body):
        made = {}        # array name -> whether nothing mentioned it since it was made
        for s in block:
            if isinstance(s, ir.Store) and made.get(s.array):
                out.add(id(s))
            _after(made, s, shared)
    return out


def _distinct(fn, types, view_of):
    """id() of each loop -> the pairs of array names (frozensets) that certainly hold arrays
    sharing no memory whenever the loop starts: a must-analysis over the bindings. A new array
    (``np.zeros_like``, ``.copy()``, ``u + k * lap``) is distinct from every other name; ``v = u``
    and a view of ``u`` inherit ``u``'s pairs (and are not distinct from ``u``); anything else (a
    call, an argument, a field) is distinct from nothing. A swap ``u, v = v, u`` keeps u and v
    distinct: the property time-stepping code relies on."""
    arrays = {v for v, t in types.items() if isinstance(t, nbt.Array)}
    at = {}

    def bind(pairs, v, expr):
        if _makes_new_array(expr):
            partners = arrays - {v}
        else:
            base = expr.a.id if isinstance(expr, ir.Atom) and isinstance(expr.a, ir.Name) \
                else view_base(expr, types)
            partners = {x for p in pairs if base in p for x in p} - {base, v}
        return frozenset({p for p in pairs if v not in p} | {frozenset((v, x)) for x in partners})

    def block(stmts, pairs):
        for s in stmts:
            if isinstance(s, ir.Assign) and s.target in arrays:
                pairs = bind(pairs, s.target, s.expr)
            elif isinstance(s, ir.If):
                pairs = block(s.body, pairs) & block(s.orelse, pairs)
            elif isinstance(s, (ir.For, ir.While)):
                while True:       # the state at the loop's start: what every iteration keeps
                    at[id(s)] = pairs
                    out = block(s.cond, pairs) if isinstance(s, ir.While) else pairs
                    out = block(s.body, out)
                    if pairs <= out:
                        break
                    pairs = pairs & out
        return pairs

    block(fn.body, frozenset())
    return at


def _reverse_reads(x, rev, recompute, lazy, types, active, header=True):
    """Names whose values the reverse of statement ``x`` (not of its nested blocks) reads;
    None for "anything" (a checkpointed loop: its steps run again in the reverse). Without
    ``header``, a loop's or branch's own reads (bounds, test) are left out: only its recomputed
    statements count (what runs inside the loop's reverse iterations)."""
    if isinstance(x, ir.Assign):
        out = set(rev(x))
        if x.target in lazy or isinstance(x.expr, (ir.Call, ir.MethodCall)) \
                and x.target in active:
            # a callee's or a rule's pullback may read its array arguments through the
            # residuals it keeps (references, not copies)
            out.update(_reads(x.expr))
        return out
    if isinstance(x, ir.Store):
        out = {a.id for a in ir.index_atoms(x.index) if isinstance(a, ir.Name)}
        if isinstance(x.value, ir.Name) and isinstance(types.get(x.value.id), nbt.Array):
            out.add(x.value.id)
        return out
    if isinstance(x, ir.For) and x.snapshots is not None:
        return None
    groups = []
    if isinstance(x, (ir.For, ir.While)):
        groups.append(recompute.get(x.id, ()))
    elif isinstance(x, ir.If):
        groups += [recompute.get(branch_key(x, 0), ()), recompute.get(branch_key(x, 1), ())]
    own = set(stmt_reads(x)) if header else set()
    return {n for g in groups for s in g for n in _reads(s.expr)} | own


def _snapshots(fn, types, alias, distinct, pushes, reverse_reads):
    """Loops that overwrite elements of an array whose values their reverse does not read (the
    stencil sweep ``v[i, j] = f(u[i-1, j], ...)`` of a time step, the N-body force loop
    ``f[i, 0] += dx * w``): instead of saving each overwritten element on the tape (a store and
    an index bump per element, which also keeps LLVM from vectorizing the sweep), the forward
    saves the array whole before the loop (one copy) and the reverse writes it back after the
    loop's reverse. Sound because nothing in the loop's reverse reads the array's values
    (``reverse_reads``: adjoints, recomputed statements, views taken again; the forward may read
    them: it runs unchanged), so the element-wise restores it replaces had no reader before the
    copy overwrites them all; and the loop rebinds no name that may share memory with it, nor
    reads or stores through one that may (_distinct). An array made new just before the loop in
    the same block (``lap = np.zeros_like(u)``) needs not even the copy: nothing reads its old
    contents.

    Returns ({id(loop): (array, ...)}, frozenset(id() of the stores this replaces))."""
    shared = set(alias) | set(alias.values())
    snapshots, covered = {}, set()

    def reads(x):
        if isinstance(x, ir.Store):
            return [a.id for a in (*ir.index_atoms(x.index), x.value) if isinstance(a, ir.Name)]
        return stmt_reads(x)

    def visit(block):
        made = {}          # as in _stores_into_fresh: made new here, untouched since
        for s in block:
            # (a checkpointed loop keeps its state in its own slots: checkpointing.py)
            if isinstance(s, ir.For) and s.snapshots is None:
                inside = list(ir.walk(s.body))
                assigned = {x.target for x in inside if isinstance(x, ir.Assign)}
                read = {n for x in inside for n in reads(x)}
                # (the loop's own recomputed statements run in its reverse iterations)
                back = [reverse_reads(x) for x in inside] + [reverse_reads(s, header=False)]
                back = None if any(b is None for b in back) else set().union(*back)
                stored = {x.array for x in inside if isinstance(x, ir.Store)}
                saved = []
                for w in sorted({x.array for x in inside if isinstance(x, ir.Store)
                                 and id(x) in pushes and id(x) not in covered}):
                    cls = alias.get(w, w)
                    others = {n for n in read | stored if n != w and alias.get(n, n) == cls}
                    if back is None or any(n == w or alias.get(n, n) == cls and (
                            n in assigned or frozenset((w, n)) not in distinct.get(id(s), ()))
                            for n in back) \
                            or w in assigned or others & assigned or any(
                            frozenset((w, n)) not in distinct.get(id(s), ()) for n in others):
                        continue
                    covered.update(id(x) for x in inside if isinstance(x, ir.Store)
                                   and x.array == w and id(x) in pushes)
                    if not made.get(w):
                        saved.append(w)
                if saved:
                    snapshots[id(s)] = tuple(saved)
            for part in _parts(s):
                visit(part)
            _after(made, s, shared)

    visit(fn.body)
    return snapshots, frozenset(covered)


def _parts(s):
    """The blocks nested directly in ``s``."""
    if isinstance(s, ir.If):
        return (s.body, s.orelse)
    if isinstance(s, ir.For):
        return (s.body,)
    if isinstance(s, ir.While):
        return (s.cond, s.body)
    return ()


def _after(made, s, shared):
    """Update ``made`` (array name -> made new in this block and untouched since) past ``s``."""
    touched = {n for x in ir.walk([s]) for n in stmt_reads(x)}
    touched |= {x.array for x in ir.walk([s]) if isinstance(x, ir.Store)}
    touched |= {x.target for x in ir.walk([s]) if x is not s and isinstance(x, ir.Assign)}
    for n in touched:
        made[n] = False
    if isinstance(s, ir.Assign) and s.target not in shared and _makes_new_array(s.expr):
        made[s.target] = True


def _recompute_operands(group, recomputed_targets):
    """What a loop's recomputed statements read: unchanged inside the loop, read throughout its
    reverse."""
    return {n for s in group for n in _reads(s.expr) if n not in recomputed_targets}


def _rev_reads(s, active, callee_reads, quotients):
    if s.target in active:
        return frozenset(adjoint_reads(s.expr, active, callee_reads, quotients))
    return frozenset()


def _checkpoint_reads(loop):
    """What the reverse of checkpointed loop ``loop`` reads from outside it: its steps run again
    there (ADVANCE, TURN), so every name they read and do not set themselves must hold its value
    of then, whatever a later statement assigns it (found by the fuzzer, 2026-12-04: `x, t = t,
    x` after a loop reading t; t was not saved, the steps re-ran with the swapped value)."""
    inside = list(ir.walk(loop.body))
    assigned = {x.target for x in inside if isinstance(x, ir.Assign)}
    assigned |= {x.var for x in inside if isinstance(x, ir.For)} | {loop.var}
    out = {n for x in inside for n in stmt_reads(x) if n not in assigned}
    return out | {a.id for a in (loop.start, loop.stop, loop.step, loop.snapshots)
                  if isinstance(a, ir.Name)}


def _needed(stmts, active, recompute, callee_reads, tests, quotients):
    """Names whose primal values the reverse pass reads (directly or to recompute)."""
    need = set(tests)
    for s in stmts:
        if isinstance(s, ir.Assign) and s.target in active:
            need.update(adjoint_reads(s.expr, active, callee_reads, quotients))
        elif isinstance(s, ir.Store) and s.array in active:
            need.update(a.id for a in ir.index_atoms(s.index) if isinstance(a, ir.Name))
        elif isinstance(s, ir.For):
            need.update(a.id for a in (s.start, s.step) if isinstance(a, ir.Name))
            if s.snapshots is not None:
                need.update(_checkpoint_reads(s))
    # Recomputed statements need their own operands.
    by_target = {s.target: s for group in recompute.values() for s in group}
    frontier = [n for n in need if n in by_target]
    while frontier:
        n = frontier.pop()
        for m in _reads(by_target[n].expr):
            if m not in need:
                need.add(m)
                if m in by_target:
                    frontier.append(m)
    return frozenset(need)


def _divides_by_active(expr, active):
    """``a / b`` with b active and a a constant or active: its adjoint is cheaper from the
    quotient (one division fewer, none for a constant 1.0)."""
    if not (isinstance(expr, ir.BinOp) and expr.op == "/"):
        return False
    a, b = expr.a, expr.b
    act = lambda x: isinstance(x, ir.Name) and x.id in active   # noqa: E731
    return act(b) and (act(a) or (isinstance(a, ir.Const) and isinstance(a.value, float)))


def adjoint_reads(expr, active, callee_reads, quotients=frozenset()):
    """What the adjoint of ``t = expr`` reads, given which operands are active."""
    act = lambda a: isinstance(a, ir.Name) and a.id in active   # noqa: E731
    names = lambda *xs: [x.id for x in xs if isinstance(x, ir.Name)]   # noqa: E731
    if isinstance(expr, ir.BinOp):
        a, b = expr.a, expr.b
        if expr.op in ("*", "@"):
            # d_a = g * b (g @ b.T, np.outer(g, b), ...), d_b = a * g (a.T @ g, ...)
            return (names(b) if act(a) else []) + (names(a) if act(b) else [])
        if expr.op == "/":
            if id(expr) in quotients:
                # q = a / b: d_b = -(g / b) q, or -g q q / a for a constant a (quotient_adjoint)
                return [] if isinstance(a, ir.Const) else names(b)
            return names(b) + (names(a) if act(b) else [])
        if expr.op in ("**", "%", "//"):
            return names(a, b)
        return []
    if isinstance(expr, ir.Index):
        return names(*ir.index_atoms(expr.index))
    if isinstance(expr, ir.Call):
        if callee_reads(expr):
            return names(*expr.args)
        return []
    if isinstance(expr, ir.MethodCall):
        return []
    return []


def _reverse_relevant(body, active, pushes):
    out = set()

    def visit(stmts):
        any_rel = False
        for s in stmts:
            rel = id(s) in pushes
            if isinstance(s, ir.Assign):
                rel = rel or s.target in active
            elif isinstance(s, ir.Store):
                rel = rel or s.array in active
            elif isinstance(s, ir.If):
                a, b = visit(s.body), visit(s.orelse)
                rel = rel or a or b
            elif isinstance(s, (ir.For, ir.While)):
                c = visit(s.cond) if isinstance(s, ir.While) else False
                rel = visit(s.body) or c or rel
            if rel:
                out.add(id(s))
                any_rel = True
        return any_rel

    visit(body)
    return out
