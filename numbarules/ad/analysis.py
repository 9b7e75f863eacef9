"""Analyses over the normalised IR: activity, what the reverse pass reads, what must be saved.

``plan(fn, types, mask, calls) -> Plan`` is a pure function. The decisions, per variable ``v``
and per assignment site ``S`` of ``v``:

    v active                = varied (depends on a differentiated input)
                              and useful (influences the result) and of a float kind
    v needed                = the reverse pass reads v's primal value
    S recomputable          = S sits directly in a loop body, is a cheap pure operation whose
                              operands do not change inside that loop (or are recomputable
                              themselves), and v is not read before S in the body: the reverse
                              pass re-executes S at the start of each iteration instead of
                              saving v
    push old v before S     = S not recomputable and the value S overwrites is read by the
                              reverse pass: some statement on a path from that value's
                              definition to S has an adjoint that reads v (a forward scan,
                              _pushes). The reverse pass pops it back after S's adjoint. A
                              running sum ``t = t + u`` in a loop saves nothing: ``+``'s adjoint
                              reads neither operand. (Array variables keep the coarser rule:
                              needed and several sites or inside a loop.)

An array name bound once holds one array throughout; its overwritten *elements* are saved at
each ``Store`` when the reverse pass reads the array. An array name rebound (in a loop, in
branches) is a reference that the forward saves on a list and the reverse takes back, with the
adjoint of the array it holds (``_rebound``).
"""

from collections import Counter
from dataclasses import dataclass

from numba import types as nbt

from . import ir
from .kinds import is_array
from .prange_shapes import row_loops
from .dataflow import _activity, _alias_classes, _in_loop, _reads, _target, views
from .array_names import (_check_aggregates, _check_array_methods, _check_arrays,
                          _check_fancy_indexing, _check_views, _lazy_views, _loop_views, _rebound)
from .recompute import _recomputable
from .residuals import (_distinct, _divides_by_active, _may_run_before, _needed, _pushes,
                        _rev_reads, _reverse_reads, _reverse_relevant, _snapshots, _value_readers)


@dataclass(frozen=True)
class Plan:
    active: frozenset          # variable names with adjoints
    calls: dict                # id() of call expression -> CallPlan (active calls only)
    needed: frozenset          # variable names whose primal values the reverse pass reads
    pushes: frozenset          # id() of statements before which the target's old value is saved
    recompute: dict            # loop id, or branch_key(if, k) -> tuple of statements
                               # re-executed at the start of its reverse iteration / branch
    alias_of: dict             # array variable -> representative of its alias class
    in_loop: frozenset         # id() of statements inside some loop
    reverse_relevant: frozenset  # id() of statements the reverse pass must visit
    views: dict = None         # array variable -> the Assign that made it a view of another
    quotients: frozenset = frozenset()  # id() of scalar divisions whose adjoint reads the quotient
    loop_views: dict = None    # view variable taken in a loop -> the loop id whose reverse
                               # iterations bind its adjoint (see _loop_views)
    rebound: dict = None       # array variable of a class that is rebound (in a loop, or more
                               # than once) -> the other names of its class (see _rebound)
    lazy_views: dict = None    # view taken again in the reverse pass (of a rebound array, or in
                               # a loop or branch) -> id() of the statement before whose
                               # reverse it is taken (_lazy_views)
    snapshots: dict = None     # id() of a loop -> arrays saved whole before it runs, restored
                               # after its reverse (_snapshots)
    snapshot_stores: frozenset = frozenset()  # id() of pushed stores those snapshots (or a
                                              # fresh array) make unneeded
    rows: dict = None          # id() of a prange loop whose chunks keep tapes of their own
                               # between the passes, when the texts allow (chunk_tapes.py) ->
                               # the arrays it reads only in its own row (prange_shapes.row_loops)
    shape_only: frozenset = frozenset()  # id() of rebindings that keep the dropped array's
                                         # shape alone (_shape_only)
    copied: frozenset = frozenset()  # id() of rebindings whose dropped array may be kept as a
                                     # copy: no other name holds it (_kept_as_copies)


def plan(fn, types, mask, classify):
    """``classify(call, arg_mask)`` -> CallPlan for each call whose result is active."""
    stmts = list(ir.walk(fn.body))
    in_loop = _in_loop(fn.body)
    sites = {}
    for s in stmts:
        tgt = _target(s)
        if tgt is not None:
            sites.setdefault(tgt, []).append(s)
    for s in stmts:
        if isinstance(s, ir.For):
            sites.setdefault(s.var, []).append(s)
    view_of = views(fn, types)
    alias = _alias_classes(stmts, types, view_of)
    active = _activity(fn, stmts, types, mask, alias)
    distinct = _distinct(fn, types, view_of)
    recompute = _recomputable(fn.body, sites, types, alias, distinct)
    rows = row_loops(fn, types, alias, distinct)
    loop_views = _loop_views(fn, types, active, view_of, recompute)
    lazy = _lazy_views(fn, types, view_of, sites, in_loop, loop_views)
    _check_views(fn, stmts, types, active, alias, view_of, in_loop, {**loop_views, **lazy})
    _check_array_methods(fn, stmts, types, active)
    _check_fancy_indexing(fn, stmts, types, active, alias)
    _check_aggregates(fn, stmts, types, active, sites, in_loop)
    rebound = _rebound(fn, stmts, types, active, alias, view_of, {**loop_views, **lazy}, sites,
                       in_loop)
    _check_arrays(fn, active, types, sites, in_loop, {**loop_views, **lazy}, rebound)
    # What taking a lazy view again reads: its base and indices. And the array operands of
    # differentiated statements: their adjoints read at least their shapes (_ub(g, x) sums g
    # to x's shape, a rule's tangent is checked against it), which change when the array is
    # rebound or is a view taken in a loop (x[i:] * 2.0 in a loop over i).
    always_read = {n for s in stmts if isinstance(s, ir.Assign) and s.target in lazy
                   for n in _reads(s.expr)}
    shape_reads = {n for s in stmts if isinstance(s, ir.Assign) and s.target in active
                   for n in _reads(s.expr) if n in active and is_array(types.get(n))}
    shape_reads |= {s.value.id for s in stmts if isinstance(s, ir.Store) and s.array in active
                    and isinstance(s.value, ir.Name) and is_array(types.get(s.value.id))}
    always_read |= shape_reads
    calls = {}
    for s in stmts:
        if isinstance(s, ir.Assign) and isinstance(s.expr, ir.Call) and s.target in active:
            arg_mask = tuple(isinstance(a, ir.Name) and a.id in active for a in s.expr.args)
            calls[id(s.expr)] = classify(s.expr, arg_mask, s)
    callee_reads = lambda call: calls[id(call)].kind in ("scalar", "derived")   # noqa: E731
    # Partials that take the primal result (exp, tanh, ...) read the call's own target.
    result_reads = {s.target for s in stmts if isinstance(s, ir.Assign)
                    and isinstance(s.expr, ir.Call) and id(s.expr) in calls
                    and calls[id(s.expr)].with_result}
    quotients = frozenset(id(s.expr) for s in stmts if isinstance(s, ir.Assign)
                          and s.target in active and _divides_by_active(s.expr, active)
                          and isinstance(types.get(s.target), nbt.Float))
    result_reads |= {s.target for s in stmts if isinstance(s, ir.Assign) and id(s.expr) in quotients}
    # A rule's or callee's residuals may hold the array it returns (np.exp's pullback: dy * y):
    # a store into it after the call must be undone before that pullback runs, as a store into
    # an argument is (a silently wrong gradient until 2026-12-07: v = np.exp(x); v[0] *= 2.0)
    result_reads |= {s.target for s in stmts if isinstance(s, ir.Assign)
                     and id(s.expr) in calls and calls[id(s.expr)].kind == "derived"
                     and is_array(types.get(s.target))}
    tests = set()
    while True:
        needed = _needed(stmts, active, recompute, callee_reads,
                         tests | result_reads | always_read, quotients)
        pushes = _pushes(fn, stmts, sites, needed, recompute, in_loop, alias, types,
                         lambda s: _rev_reads(s, active, callee_reads, quotients), tests,
                         result_reads, rebound, lazy, active)
        relevant = _reverse_relevant(fn.body, active, pushes)
        # Branch tests matter only where the reverse pass replays the branch.
        more = {s.test.id for s in stmts if isinstance(s, ir.If) and id(s) in relevant
                and isinstance(s.test, ir.Name)}
        if more <= tests:
            break
        tests |= more
    # (what recomputed statements read counts as values: one recomputed for its shape alone
    # would still compute from them, and an index array of garbage reads out of bounds)
    values = _needed(stmts, active, recompute, callee_reads,
                     tests | result_reads | (always_read - shape_reads), quotients)
    values |= {n for group in recompute.values() for r in group for n in _reads(r.expr)}
    readers = _value_readers(stmts, lambda s: _rev_reads(s, active, callee_reads, quotients),
                             recompute, {v: x for v, x in lazy.items() if v in values}, active,
                             tests, result_reads, rebinding=True)
    shape_only = _shape_only(fn, stmts, types, pushes, values, readers, rebound, view_of)
    rev = lambda s: _rev_reads(s, active, callee_reads, quotients)   # noqa: E731
    snapshots, snapshot_stores = _snapshots(
        fn, types, alias, distinct, pushes,
        lambda x, header=True: _reverse_reads(x, rev, recompute, lazy, types, active, header))
    return Plan(frozenset(active), calls, frozenset(needed), frozenset(pushes),
                {k: tuple(v) for k, v in recompute.items()}, alias,
                frozenset(in_loop), frozenset(relevant),
                {v: s for v, s in view_of.items() if v in active}, quotients,
                {v: lp for v, lp in loop_views.items() if v in active}, rebound,
                lazy, snapshots, snapshot_stores, rows, shape_only,
                _kept_as_copies(fn, stmts, types, pushes, shape_only, alias, view_of))


def _shape_only(fn, stmts, types, pushes, values, readers, rebound, view_of):
    """id() of the rebindings whose dropped array the reverse reads only for its shape: an
    operand whose adjoint sums a gradient to its shape (``_ub(g, x)``) or starts from
    ``_zeros_like(x)``, with no statement reading its values (``readers``) that may run before
    the rebinding (the reverse of such a statement runs after the array is taken back).
    These keep the array's shape, not the array (tape.push_reference): the slices form of
    reaction-diffusion kept 9 of its 12 arrays per step only for their shapes (u, multiplied
    by itself after the loop, among them: that reads its last value, which is not dropped).
    Left out: arrays of rebound classes (the reverse tells their adjoints apart by identity),
    bases of views whose values are read (taken again from the array), layouts and dtypes
    an empty array of the shape cannot stand for."""
    bases = {n for v, s in view_of.items() if v in values for n in _reads(s.expr)}
    before = _may_run_before(fn.body)
    out = set()
    for s in stmts:
        if not (isinstance(s, ir.Assign) and id(s) in pushes):
            continue
        v, t = s.target, types.get(s.target)
        if is_array(t) and t.ndim >= 1 and t.layout in ("C", "F") \
                and isinstance(t.dtype, (nbt.Float, nbt.Integer)) \
                and not (rebound or {}).get(v) and v not in bases \
                and not any(v in names and before(r, s) for r, names in readers):
            out.add(id(s))
    return frozenset(out)


_FRESH_CALLS = ("zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like",
                "full_like")


def _creates(expr):
    """Whether ``expr`` makes a new array from its operands' shapes or a plain copy of one:
    nothing of it holds an operand (no rule residuals)."""
    if isinstance(expr, ir.MethodCall):
        return expr.name == "copy" and not expr.args
    return isinstance(expr, ir.Call) and not expr.kwargs \
        and getattr(expr.func, "__module__", "") == "numpy" \
        and getattr(expr.func, "__name__", "") in _FRESH_CALLS


def _fresh(expr):
    """Whether ``expr`` always makes a new array that nothing else keeps: array arithmetic
    (its reverse reads operands and result by name) or a creator. Not a call's result, ufuncs
    included: an array rule's pullback may keep its result (``np.exp``, ``np.tanh``: ``dy * y``),
    and would read the array as the forward left it, not the copy the reverse restores."""
    return isinstance(expr, (ir.BinOp, ir.UnaryOp)) or _creates(expr)


def _kept_as_copies(fn, stmts, types, pushes, shape_only, alias, view_of):
    """id() of the rebindings whose dropped array the forward may keep as a copy in the
    gradient's arena instead of the array itself (tape.push_reference): C-ordered float64
    arrays that no other name can hold. A fresh array kept per step was freed at the end of
    each call and its pages faulted in again by the next (the slices form of
    reaction-diffusion: 79,000 page faults, 250 ms of system time a call); the arena's blocks
    stay with the process (numba_glue.blocks). The copy holds the values at the rebinding,
    which is what the reverse reads there; what it cannot stand for is the array's identity or
    memory shared with anything else, so every binding of the name makes a fresh array (no
    alias, argument, view or call result: a callee's or rule's residuals may keep the array it
    returns), and the name is never an operand of what could hold it: a view, a tuple, a call
    (its result, or the residuals a rule or callee keeps for its pullback, which would read
    the array, not the copy the reverse restores elements into)."""
    bases = {n for s in view_of.values() for n in _reads(s.expr)}
    classes = Counter(alias.get(v, v) for v in types)
    # names something else may hold: a tuple, a call's result or its residuals (ufuncs' rules
    # keep their arguments: arctan, maximum, power); name -> whether every binding is fresh
    held, bound = set(), {}
    for s in stmts:
        if not isinstance(s, ir.Assign):
            continue
        e = s.expr
        if isinstance(e, (ir.MakeTuple, ir.Call, ir.MethodCall)) and not _creates(e):
            held.update(_reads(e))
        bound[s.target] = bound.get(s.target, True) and _fresh(e)
    out = set()
    for s in stmts:
        if not (isinstance(s, ir.Assign) and id(s) in pushes and id(s) not in shape_only):
            continue
        v, t = s.target, types.get(s.target)
        # (a view is never fresh: ``bound`` leaves views out)
        if is_array(t) and t.ndim >= 1 and t.layout == "C" and t.dtype == nbt.float64 \
                and bound.get(v) and classes[alias.get(v, v)] == 1 \
                and v not in fn.params and v not in bases and v not in held:
            out.add(id(s))
    return frozenset(out)
