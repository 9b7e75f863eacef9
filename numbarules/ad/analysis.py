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

import math
from dataclasses import dataclass

from numba import types as nbt

from ..errors import UnsupportedSyntaxError
from . import ir

#: Pure scalar functions cheap enough to re-execute rather than save. Transcendentals (exp,
#: log, sin, ...) are not: a libm call costs 5-20 ns, a tape store and load about 1 ns, and
#: re-executing exp doubled the reverse cost of a row-wise logsumexp (perf/bench_arrays.py).
_CHEAP_BUILTINS = {abs, min, max, float, int, bool, len}
_CHEAP_MATH = {math.fabs, math.floor, math.ceil, math.trunc, math.copysign, math.sqrt,
               math.isnan, math.isinf, math.isfinite}


def is_float(t):
    return isinstance(t, nbt.Float)


def is_real_scalar(t):
    """A float, an int or a bool (a Literal one too)."""
    return isinstance(nbt.unliteral(t), (nbt.Float, nbt.Integer, nbt.Boolean))


def is_array(t):
    return isinstance(t, nbt.Array)


def is_float_array(t):
    return isinstance(t, nbt.Array) and isinstance(t.dtype, nbt.Float)


def is_float_tuple(t):
    """A plain tuple holding at least one float, float array or such aggregate, and otherwise
    only values with no tangent: its adjoint is a tuple of the same arity (None for those)."""
    return isinstance(t, nbt.BaseTuple) and not isinstance(t, nbt.BaseNamedTuple) \
        and _float_aggregate(t)


def is_float_struct(t):
    """A @nr.struct value whose fields hold at least one float, float array or such aggregate
    (nested structs, tuples), and otherwise only values with no tangent: its adjoint is a
    Tangent[S] (None for those fields)."""
    return isinstance(t, nbt.BaseNamedTuple) and "_nr_fields" in vars(t.instance_class) \
        and _float_aggregate(t)


def is_aggregate(t):
    return is_float_struct(t) or is_float_tuple(t)


def _float_aggregate(t):
    return any(differentiable(e) for e in t) \
        and all(differentiable(e) or _carries_no_tangent(e) for e in t)


def holds_arrays(t):
    """Whether the tangent of aggregate ``t`` holds arrays (shared, updated in place): such an
    adjoint is bound once and never reset."""
    return is_aggregate(t) and any(is_float_array(e) or holds_arrays(e) for e in t)


def differentiable(t):
    return is_float(t) or is_float_array(t) or is_float_tuple(t) or is_float_struct(t)


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
                               # fresh array's contents nobody reads) replace, on the CPU


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
    always_read |= {n for s in stmts if isinstance(s, ir.Assign) and s.target in active
                   for n in _reads(s.expr) if n in active and is_array(types.get(n))}
    always_read |= {s.value.id for s in stmts if isinstance(s, ir.Store) and s.array in active
                   and isinstance(s.value, ir.Name) and is_array(types.get(s.value.id))}
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
    tests = set()
    while True:
        needed = _needed(stmts, active, recompute, callee_reads,
                         tests | result_reads | always_read, quotients)
        pushes = _pushes(fn, stmts, sites, needed, recompute, in_loop, alias, types,
                         lambda s: _rev_reads(s, active, callee_reads, quotients), tests,
                         result_reads, rebound, lazy)
        relevant = _reverse_relevant(fn.body, active, pushes)
        # Branch tests matter only where the reverse pass replays the branch.
        more = {s.test.id for s in stmts if isinstance(s, ir.If) and id(s) in relevant
                and isinstance(s.test, ir.Name)}
        if more <= tests:
            break
        tests |= more
    rev = lambda s: _rev_reads(s, active, callee_reads, quotients)   # noqa: E731
    snapshots, snapshot_stores = _snapshots(
        fn, types, alias, distinct, pushes,
        lambda x, header=True: _reverse_reads(x, rev, recompute, lazy, types, active, header))
    return Plan(frozenset(active), calls, frozenset(needed), frozenset(pushes),
                {k: tuple(v) for k, v in recompute.items()}, alias,
                frozenset(in_loop), frozenset(relevant),
                {v: s for v, s in view_of.items() if v in active}, quotients,
                {v: lp for v, lp in loop_views.items() if v in active}, rebound,
                lazy, snapshots, snapshot_stores)


def _target(s):
    if isinstance(s, ir.Assign):
        return s.target
    return None


def _in_loop(body, inside=False, out=None):
    """id() of every statement that some loop encloses."""
    out = set() if out is None else out
    for s in body:
        if inside:
            out.add(id(s))
        if isinstance(s, ir.If):
            _in_loop(s.body, inside, out)
            _in_loop(s.orelse, inside, out)
        elif isinstance(s, ir.For):
            _in_loop(s.body, True, out)
        elif isinstance(s, ir.While):
            _in_loop(s.cond, True, out)
            _in_loop(s.body, True, out)
    return out


def views(fn, types):
    """Array variables that share memory with another array: v -> the statement binding it.

    Slices (``x[a:b]``, ``x[:, j]``, ``x[i]`` of a matrix), ``x.T`` / ``x.transpose()`` and
    ``x.reshape(...)`` are views in NumPy and Numba; ``x.ravel()`` is one when Numba types x as
    C-contiguous (it copies otherwise, checked at compile time). A write through either array
    changes the other, so the view's adjoint is the same slice of its base's adjoint: every
    contribution, and every zeroing by a store's adjoint, reaches both.
    """
    out = {}
    for s in ir.walk(fn.body):
        if isinstance(s, ir.Assign) and isinstance(types.get(s.target), nbt.Array) \
                and view_base(s.expr, types) is not None:
            out[s.target] = s
    return out


def view_base(expr, types):
    """The array ``expr`` is a view of, or None."""
    base = expr.obj if isinstance(expr, ir.MethodCall) else getattr(expr, "a", None)
    if not (isinstance(base, ir.Name) and isinstance(types.get(base.id), nbt.Array)):
        return None
    if isinstance(expr, ir.Index) or isinstance(expr, ir.Attr) and expr.attr == "T":
        return base.id
    if isinstance(expr, ir.MethodCall) and (
            expr.name in ("reshape", "view") or expr.name == "transpose" and not expr.args
            or expr.name == "ravel" and types[base.id].layout == "C"):
        return base.id
    return None


def _alias_classes(stmts, types, view_of):
    """Array variables that share memory (``b = a``, views) share one alias class."""
    parent = {}

    def find(v):
        while parent.get(v, v) != v:
            v = parent[v]
        return v

    for s in stmts:
        if isinstance(s, ir.Assign) and isinstance(s.expr, ir.Atom) and isinstance(s.expr.a, ir.Name) \
                and isinstance(types.get(s.target), nbt.Array):
            parent[find(s.target)] = find(s.expr.a.id)
    for v, s in view_of.items():
        parent[find(v)] = find(view_base(s.expr, types))
    return {v: find(v) for v in parent}


def _reads(expr):
    """Variable names an expression reads."""
    return [a.id for a in expr.atoms() if isinstance(a, ir.Name)]


def _value_reads(expr):
    """Names whose *values* flow into the result (not indices, not shapes)."""
    if isinstance(expr, ir.Index):
        return [expr.a.id] if isinstance(expr.a, ir.Name) else []
    if isinstance(expr, ir.Attr):
        return [expr.a.id] if isinstance(expr.a, ir.Name) else []
    if isinstance(expr, ir.Call) and expr.func in (len,):
        return []
    if isinstance(expr, ir.Call) and getattr(expr.func, "__name__", "") in (
            "zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like") \
            and getattr(expr.func, "__module__", "") == "numpy":
        return []
    if isinstance(expr, ir.BinOp) and expr.op in ("<", "<=", ">", ">=", "==", "!=", "&", "|", "^"):
        return []
    return _reads(expr)


def _activity(fn, stmts, types, mask, alias):
    rep = lambda v: alias.get(v, v)   # noqa: E731
    varied = {rep(p) for p, m in zip(fn.params, mask) if m and differentiable(types.get(p))}
    changed = True
    while changed:
        changed = False
        for s in stmts:
            if isinstance(s, ir.Assign) and differentiable(types.get(s.target)):
                if rep(s.target) not in varied and any(rep(n) in varied for n in _value_reads(s.expr)):
                    varied.add(rep(s.target))
                    changed = True
            elif isinstance(s, ir.Store) and isinstance(s.value, ir.Name):
                if rep(s.value.id) in varied and rep(s.array) not in varied:
                    varied.add(rep(s.array))
                    changed = True
    useful = set()
    for s in stmts:
        if isinstance(s, ir.Return) and isinstance(s.value, ir.Name):
            useful.add(rep(s.value.id))
    changed = True
    while changed:
        changed = False
        for s in stmts:
            if isinstance(s, ir.Assign) and rep(s.target) in useful:
                for n in _value_reads(s.expr):
                    if rep(n) not in useful and not _carries_no_tangent(types.get(n)):
                        useful.add(rep(n))
                        changed = True
            elif isinstance(s, ir.Store) and rep(s.array) in useful and isinstance(s.value, ir.Name):
                if differentiable(types.get(s.value.id)) and rep(s.value.id) not in useful:
                    useful.add(rep(s.value.id))
                    changed = True
    for s in stmts:
        if isinstance(s, ir.Assign) and rep(s.target) in useful and not _carries_no_tangent(
                types.get(s.target)) and not differentiable(types.get(s.target)) \
                and any(rep(n) in varied for n in _value_reads(s.expr)):
            raise UnsupportedSyntaxError(
                f"a value of type {types.get(s.target)} that depends on a differentiated input\n"
                f'  File "{fn.file}", line {s.line}, in {fn.name}\n'
                f"Hint: numbarules differentiates floats and float arrays here; unpack tuples "
                f"into separate variables, or write a rule (nr.rrule) for this function.")
    names = set(types)
    return {v for v in names if rep(v) in varied and rep(v) in useful and differentiable(types.get(v))}


def tangent_refusal(t):
    """Why a value of type ``t`` can be neither differentiated nor given ``None`` as its tangent
    (a list, a complex number, ...), or None when it can."""
    if differentiable(t) or _carries_no_tangent(t) or (
            isinstance(t, nbt.Array) and isinstance(t.dtype, (nbt.Integer, nbt.Boolean))):
        return None
    if isinstance(t, (nbt.List, nbt.ListType)):
        return ("a list: numbarules differentiates floats, float arrays, structs and tuples. "
                "Hint: pass a tuple, or a NumPy array (np.asarray).")
    if isinstance(t, nbt.Complex) or isinstance(t, nbt.Array) and isinstance(t.dtype, nbt.Complex):
        return ("complex: numbarules differentiates real floats. Hint: pass the real and "
                "imaginary parts as separate float arguments.")
    if isinstance(t, nbt.BaseTuple):
        return (f"a tuple or struct holding {t}: numbarules differentiates those holding floats, "
                f"float arrays, integers and such tuples and structs.")
    return (f"{t}: numbarules differentiates floats, float arrays, structs and tuples of those "
            f"(integers and booleans get None).")


def _carries_no_tangent(t):
    """Integers, booleans, None and tuples of them (shapes): values with no tangent."""
    if isinstance(t, nbt.BaseTuple) and not isinstance(t, nbt.BaseNamedTuple):
        return all(_carries_no_tangent(e) for e in t)
    return isinstance(t, (nbt.Integer, nbt.Boolean, nbt.NoneType)) or t is None


def part_of(expr, types):
    """The aggregate variable ``expr`` reads a part of or copies (``o.field``, ``t[0]``, ``o``),
    or None."""
    if isinstance(expr, ir.Attr) or isinstance(expr, ir.Index) and len(expr.index) == 1 \
            and isinstance(expr.index[0], ir.Const):
        base = expr.a
    elif isinstance(expr, ir.Atom):
        base = expr.a
    else:
        return None
    return base.id if isinstance(base, ir.Name) and is_aggregate(types.get(base.id)) else None


def _rebinds(fn, v, sites, in_loop):
    """Whether variable ``v`` is bound more than once, inside a loop, or (a parameter) at all."""
    ss = sites.get(v, [])
    return bool(v in fn.params and ss or len(ss) > 1 or any(id(s) in in_loop for s in ss))


def _one_part(ss, types):
    """Whether the assignments ``ss`` all read the same part of one aggregate (``o.w``): the
    same array every time, an alias of the aggregate's field."""
    return bool(ss) and all(isinstance(s, ir.Assign) and part_of(s.expr, types) is not None
                            and not isinstance(s.expr, ir.Atom) for s in ss) \
        and len({ir.expr_src(s.expr) for s in ss}) == 1


def rebinding_sites(fn, v, sites):
    """The assignments of array variable ``v`` after which the reverse pass must restore its
    previous binding: all of them but a first one at the top level (nothing is bound before it,
    and nothing before it reads ``v``)."""
    ss = [s for s in sites.get(v, ()) if isinstance(s, ir.Assign)]
    top = {id(x) for x in fn.body}
    if ss and id(ss[0]) in top and v not in fn.params:
        ss = ss[1:]
    return ss


def _array_named(v):
    if v.startswith("_t") and v[2:].isdigit():
        return "the array an expression makes"
    return f"the array '{v}'"


def _rebound(fn, stmts, types, active, alias, view_of, loop_views, sites, in_loop):
    """Differentiated arrays bound more than once or inside a loop, and their alias classes:
    ``{name: (the other names of its class)}``.

    An array name is a reference. The forward saves the reference a rebinding drops (a list of
    arrays: no copy); the reverse pass takes it back after the binding's adjoint, and with it
    the adjoint *of that array*: the adjoint of another name of the class holding the very same
    array (``a is b``), else a fresh zero array (no name holds it any more, so nothing after
    this point added to its adjoint). So every name's adjoint is always the adjoint of the array
    the name holds, through swaps (``u, v = v, u``), aliases (``u = u_new``) and fresh arrays
    (``v = u.copy()``, ``u = u + k * lap``) alike. Refused in such a class: views (the view's
    adjoint is bound once, to one array's) and aggregates holding its arrays (likewise).
    """
    classes = {}
    for v in types:
        classes.setdefault(alias.get(v, v), []).append(v)
    out = {}
    for v in sorted(active):
        if not is_float_array(types.get(v)) or v in out or v in loop_views \
                or not _rebinds(fn, v, sites, in_loop) \
                or _one_part(sites.get(v, []), types) and v not in fn.params:
            continue
        # Views taken in loops are bound per iteration (_loop_views, _lazy_views): not members.
        members = sorted(m for m in classes.get(alias.get(v, v), [v]) if m not in loop_views)
        for m in members:
            view = view_of.get(m) or next((s for w, s in view_of.items() if w not in loop_views
                                           and view_base(s.expr, types) == m), None)
            if view is not None:
                raise UnsupportedSyntaxError(
                    f"a view (slice, .T or reshape) of "
                    f"{_array_named(view_base(view.expr, types) or v)}, which is rebound (in a "
                    f"loop, or more than once)\n{where(fn, view.line)}\n"
                    f"Hint: index its elements (x[i, j]) instead, or copy the slice "
                    f"(x[a:b].copy()).")
        for s in stmts:
            built = isinstance(s, ir.Assign) and (
                isinstance(s.expr, ir.MakeTuple) and any(
                    isinstance(a, ir.Name) and a.id in members for a in s.expr.items)
                or s.target in members and part_of(s.expr, types) is not None
                and not isinstance(s.expr, ir.Atom))
            if built or isinstance(s, ir.Assign) and isinstance(s.expr, ir.Call) \
                    and is_aggregate(types.get(s.target)) and any(
                        isinstance(a, ir.Name) and a.id in members for a in s.expr.args):
                raise UnsupportedSyntaxError(
                    f"a struct or tuple holding {_array_named(v)}, which is rebound (in a loop, "
                    f"or more than once)\n{where(fn, s.line)}\n"
                    f"Hint: pass the array itself, or bind it once outside loops and update "
                    f"its elements in place.")
        for m in members:
            out[m] = tuple(x for x in members if x != m)
    return out


def _check_aggregates(fn, stmts, types, active, sites, in_loop):
    for v in active:
        if not holds_arrays(types.get(v)):
            continue
        # An aggregate holding arrays shares them with its tangent: it is bound once, from a
        # part of another aggregate (any number of times: the same value), or at the top level.
        ss = sites.get(v, [])
        kind = "struct" if is_float_struct(types[v]) else "tuple"
        bad = (v in fn.params and ss) or len(ss) > 1 or any(
            id(s) in in_loop and part_of(s.expr, types) is None for s in ss)
        if bad:
            line = ss[-1].line if ss else fn.firstline
            raise UnsupportedSyntaxError(
                f"the {kind} '{v}' (holding differentiated arrays) is bound more than once or "
                f"built inside a loop\n{where(fn, line)}\n"
                f"Hint: build it once at the top level of the function, or read its fields "
                f"from the argument directly.")
    for s in stmts:
        if isinstance(s, ir.Assign) and s.target in active and isinstance(s.expr, ir.Index) \
                and is_float_tuple(types.get(s.expr.a.id) if isinstance(s.expr.a, ir.Name)
                                   else None) and not isinstance(s.expr.index[0], ir.Const) \
                and not is_float(types.get(s.target)):
            raise UnsupportedSyntaxError(
                f"indexing a tuple of arrays or structs with a run-time index\n"
                f"{where(fn, s.line)}\n"
                f"Hint: index it with a constant, or pass a NumPy array.")


def _check_arrays(fn, active, types, sites, in_loop, loop_views, rebound):
    for v in active:
        if not is_float_array(types.get(v)):
            continue
        ss = sites.get(v, [])
        if _one_part(ss, types):
            continue      # one field of one aggregate: the same array every time, an alias
        if v in loop_views and len(ss) == 1:
            continue      # a view bound afresh in each reverse iteration of its loop
        if v in rebound:
            continue      # references saved and restored with their adjoints (_rebound)
        if _rebinds(fn, v, sites, in_loop):
            line = ss[-1].line if ss else fn.firstline
            temporary = v.startswith("_t") and v[2:].isdigit() and len(ss) == 1
            what = ("a whole-array expression (an array temporary) evaluated inside a loop"
                    if temporary else f"the array variable '{v}' bound more than once or "
                                      f"inside a loop (a swap `a, b = b, a` included)")
            raise UnsupportedSyntaxError(
                f"{what}\n{where(fn, line)}\n"
                f"Hint: bind each differentiated array to its own name once, outside loops, "
                f"and update its elements in place (x[i] = ...).")


def _loop_views(fn, types, active, view_of, recompute):
    """Views taken inside a loop whose adjoint can be bound afresh at the start of each of that
    loop's reverse iterations: v -> the id of the innermost loop holding the view.

    The same view of the base's adjoint is taken then (``d_r = d_M[t]`` for ``r = M[t]``), so
    its index must have the value it had in that iteration: the loop's variable, a constant, a
    value the loop does not change, or one the reverse pass recomputes at the start of each
    iteration. The view itself is recomputed there too (the loop never rebinds its base).
    """
    out = {}
    for loop in ir.walk(fn.body):
        if not isinstance(loop, (ir.For, ir.While)):
            continue
        body = loop.body + (loop.cond if isinstance(loop, ir.While) else ())
        inner = set()         # statements of nested loops: their views belong to those loops
        for lp in ir.walk(body):
            if isinstance(lp, (ir.For, ir.While)):
                inner |= {id(x) for x in ir.walk(lp.body + (
                    lp.cond if isinstance(lp, ir.While) else ()))}
        assigned = {x.target for x in ir.walk(body) if isinstance(x, ir.Assign)}
        assigned |= {x.var for x in ir.walk(body) if isinstance(x, ir.For)}
        again = {x.target for x in recompute.get(loop.id, ())}
        for x in ir.walk(body):
            if id(x) in inner or not isinstance(x, ir.Assign) or x.target not in view_of:
                continue
            e = x.expr
            if isinstance(e, ir.MethodCall) and e.name != "transpose":
                continue
            base = view_base(e, types)
            atoms = ir.index_atoms(e.index) if isinstance(e, ir.Index) else ()
            if base in assigned or not all(
                    isinstance(a, ir.Const) or a.id == getattr(loop, "var", None)
                    or a.id not in assigned or a.id in again for a in atoms):
                continue
            out[x.target] = loop.id
    return out


def _lazy_views(fn, types, view_of, sites, in_loop, loop_views):
    """Views of an array that is rebound (``lap = u[2:] - u[:-2]`` in a time loop that ends
    with ``u = u_new``; ``u[::-1].copy()`` in a branch), and views taken in a loop or branch that
    _loop_views does not bind (``x[a:b]`` with bounds the loop computes, a reshape in a
    branch): v -> id() of the last statement of the
    view's block that uses it, before whose reverse the view and its adjoint are taken again
    (``_t5 = u[2:]; _d5 = d_u[2:]``).

    There the base holds the array it held when the view was taken, and its adjoint is that
    array's (analysis._rebound), provided that the view is used only in its own block after it,
    and neither the base nor the view's indices are assigned between the view and its last use
    (the reverse pass restores what it reads, so they have their values from then).
    """
    readers = {}
    for x in ir.walk(fn.body):
        for n in stmt_reads(x):
            readers.setdefault(n, set()).add(id(x))
    # A use of a view of w is a use of w: taking that view again in the reverse pass reads w's
    # adjoint (w3 = w1[::2] used after w1's own last use; seed 20261511 #355: d_w1 undefined).
    children = {}
    for v, st in view_of.items():
        children.setdefault(view_base(st.expr, types), set()).add(v)

    def uses(w, seen):
        out = set(readers.get(w, ()))
        for v in children.get(w, ()):
            if v not in seen:
                seen.add(v)
                out |= uses(v, seen)
        return out

    readers = {w: uses(w, {w}) for w in set(readers) | set(children)}
    out = {}
    for body in ir.blocks(fn.body):
        inside = [{id(y) for y in ir.walk([st])} for st in body]
        for k, x in enumerate(body):
            if not isinstance(x, ir.Assign) or x.target not in view_of \
                    or x.target in loop_views or len(sites.get(x.target, ())) != 1:
                continue
            w, base = x.target, view_base(x.expr, types)
            if body is fn.body and not _rebinds(fn, base, sites, in_loop):
                continue      # bound once when the pullback starts (adjoint_header)
            used = [j for j in range(k + 1, len(body)) if readers.get(w, set()) & inside[j]]
            if not used:
                continue
            m = used[-1]
            span = set().union(*inside[k + 1:m + 1])
            atoms = {a.id for a in x.expr.atoms() if isinstance(a, ir.Name)}
            # (the last use itself may rebind the base: u = u[::-1].copy(); codegen.block_rev)
            last = body[m]
            rebinds_at_last = isinstance(last, ir.Assign) and last.target == base
            if readers.get(w, set()) <= span and not any(
                    isinstance(y, ir.Assign) and y.target in atoms | {w}
                    and not (y is last and rebinds_at_last)
                    for y in ir.walk(body[k + 1:m + 1])):
                out[w] = id(body[m])
    return out


def _check_views(fn, stmts, types, active, alias, view_of, in_loop, loop_views):
    """A differentiated view's adjoint is bound once, when the pullback starts, to the same view
    of its base's adjoint: the view is taken once, outside loops. In a branch, a slice or a
    transpose is fine (its bounds are pinned temporaries, zero where the branch did not run and
    nothing flows through the view); a reshape is bound to the view's own shape, which a branch
    that did not run never set."""
    top = {id(s) for s in fn.body}
    for v, s in view_of.items():
        if v not in active or id(s) in top or v in loop_views:
            continue
        if id(s) in in_loop or isinstance(s.expr, ir.MethodCall) and s.expr.name != "transpose":
            raise UnsupportedSyntaxError(
                f"a view ({'reshape or ravel' if id(s) not in in_loop else 'slice, .T or reshape'})"
                f" of a differentiated array taken inside a {'loop' if id(s) in in_loop else 'branch'}"
                f"\n{where(fn, s.line)}\n"
                f"Hint: take the view once before the {'loop' if id(s) in in_loop else 'branch'}, "
                f"or index elements (x[i, j]) inside it.")


def where(fn, line):
    """The traceback-style location of ``line`` with its source text."""
    k = line - fn.firstline
    text = fn.source_lines[k].strip() if 0 <= k < len(fn.source_lines) else ""
    return f'  File "{fn.file}", line {line}, in {fn.name}' + (f"\n    {text}" if text else "")


#: Array methods and attributes whose adjoint the engine knows (the others would silently get none).
_ARRAY_METHODS = {"copy", "reshape", "ravel", "flatten", "transpose"}


def _check_array_methods(fn, stmts, types, active):
    for s in stmts:
        if not (isinstance(s, ir.Assign) and s.target in active):
            continue
        e = s.expr
        if isinstance(e, ir.MethodCall) and e.name not in _ARRAY_METHODS \
                or isinstance(e, ir.MethodCall) and e.name == "transpose" and e.args:
            what = f"the array method .{e.name}({'...' if e.args else ''})"
        elif isinstance(e, ir.Attr) and isinstance(types.get(e.a.id), nbt.Array) and e.attr != "T":
            what = f"the array attribute .{e.attr}"
        else:
            continue
        hint = (f"Hint: call the NumPy function (np.{getattr(e, 'name', getattr(e, 'attr', ''))}"
                f"(x, ...)) if numbarules has a rule for it, or write one with nr.rrule.")
        if isinstance(e, ir.MethodCall) and e.name == "view":
            hint = ("Hint: reinterpreting an array's memory has no derivative; for a view of the "
                    "whole array write x[:], for a copy of another dtype x.astype(...).")
        raise UnsupportedSyntaxError(f"{what} on a differentiated array\n{where(fn, s.line)}\n{hint}")


def _check_fancy_indexing(fn, stmts, types, active, alias):
    """Indexing a differentiated array with an array of indices or a mask (``x[idx]``,
    ``x[x > 0]``) makes a copy, not a view, and its adjoint needs a scatter-add that sums
    repeated indices: refused (the view rule gave a zero gradient, silently)."""
    hot = {alias.get(n, n) for n in active}
    for s in stmts:
        if isinstance(s, ir.Assign) and isinstance(s.expr, ir.Index):
            base, index = s.expr.a, s.expr.index
        elif isinstance(s, ir.Store):
            base, index = ir.Name(s.array), s.index
        else:
            continue
        if not (isinstance(base, ir.Name) and alias.get(base.id, base.id) in hot):
            continue
        if any(isinstance(a, ir.Name) and isinstance(types.get(a.id), nbt.Array)
               for a in ir.index_atoms(index)):
            raise UnsupportedSyntaxError(
                f"indexing the differentiated array '{base.id}' with an array of indices or a "
                f"mask ({base.id}[idx], {base.id}[{base.id} > 0])\n{where(fn, s.line)}\n"
                f"Hint: loop over the indices (for k in range(idx.shape[0]): ... "
                f"{base.id}[idx[k]] ...), or use np.where(mask, {base.id}, 0.0) for a mask.")


def _recomputable(body, sites, types, alias, distinct):
    """loop id -> statements directly in that loop's body that the reverse pass re-executes."""
    out = {}
    everything = list(ir.walk(body))
    for s in everything:
        if isinstance(s, (ir.For, ir.While)):
            inside = {id(x) for x in ir.walk(s.body + (s.cond if isinstance(s, ir.While) else ()))}
            # A value read after the loop (or before it) must be restored at the loop's exit
            # when the reverse pass reaches the readers: re-executing it per reverse iteration
            # would leave the first iteration's value there instead.
            outside = {n for x in everything if id(x) not in inside for n in stmt_reads(x)}
            out[s.id] = [x for x in _recomputable_in(s, sites, types, alias, distinct.get(id(s), frozenset()))
                         if x.target not in outside]
            out.update(_branch_recomputes(s, out[s.id], everything, sites, types, alias,
                                          distinct.get(id(s), frozenset())))
    return out


def branch_key(s, k):
    """The key of the statements the reverse of branch ``k`` (0: body, 1: orelse) of the If
    ``s`` recomputes, in Plan.recompute."""
    return ("if", id(s), k)


def _branch_recomputes(loop, direct, everything, sites, types, alias, distinct):
    """Branches of ``if`` statements in ``loop``'s body (not in a nested loop) -> the cheap
    statements of the branch its reverse re-executes on entry, instead of saving the old value
    of each target every iteration (the N-body pair loop's dx, r2, w under ``if j != i``).

    A branch's statements cannot be re-executed at the start of the reverse iteration: the
    branch may not have run (its indices out of bounds then). Re-executed at the start of the
    branch's own reverse, a statement must be read only after it in the same branch (the
    reverse of everything else runs before or without it), and read what the loop does not
    change or what is itself re-executed before it."""
    assigned, written = _loop_changes(loop, types, alias, distinct)
    readers = {}
    for x in everything:
        for n in stmt_reads(x):
            readers.setdefault(n, set()).add(id(x))
    loop_var = loop.var if isinstance(loop, ir.For) else None
    out = {}

    def visit(block, ok):
        for s in block:
            if isinstance(s, ir.If):
                for k, branch in enumerate((s.body, s.orelse)):
                    chosen = branch_statements(branch, set(ok))
                    if chosen:
                        out[branch_key(s, k)] = chosen

    def branch_statements(branch, ok):
        chosen = []
        for k, s in enumerate(branch):
            if isinstance(s, ir.Assign) and len(sites.get(s.target, ())) == 1 \
                    and not isinstance(types.get(s.target), nbt.Array) \
                    and _cheap(s.expr, written) \
                    and all(n == loop_var or n not in assigned or n in ok
                            for n in _reads(s.expr)) \
                    and readers.get(s.target, set()) <= {id(x) for x in ir.walk(branch[k + 1:])}:
                ok.add(s.target)
                chosen.append(s)
        visit(branch, ok)
        return chosen

    visit(loop.body, {s.target for s in direct})
    return out


def _loop_changes(loop, types, alias, distinct):
    """The names ``loop`` assigns (its nested loops' variables too), and the names whose
    elements it may change: a store changes every name that may hold the same array."""
    inside = list(ir.walk(loop.body))
    if isinstance(loop, ir.While):
        inside += list(ir.walk(loop.cond))
    assigned = {t for t in (_target(s) for s in inside) if t}
    assigned |= {s.var for s in inside if isinstance(s, ir.For)}
    written = set()
    for w in {s.array for s in inside if isinstance(s, ir.Store)}:
        written |= {n for n in types if alias.get(n, n) == alias.get(w, w) and (
            n == w or w in assigned or n in assigned or frozenset((w, n)) not in distinct)}
    return assigned, written


def stmt_reads(s):
    """Variable names a statement reads itself (not inside its nested blocks)."""
    if isinstance(s, ir.Assign):
        atoms = s.expr.atoms()
    elif isinstance(s, ir.Store):
        atoms = ir.index_atoms(s.index) + (s.value, ir.Name(s.array))
    elif isinstance(s, (ir.If, ir.While)):
        atoms = (s.test,)
    elif isinstance(s, ir.For):
        atoms = (s.start, s.stop, s.step)
    elif isinstance(s, ir.Return):
        atoms = (s.value,)
    else:
        atoms = ()
    return [a.id for a in atoms if isinstance(a, ir.Name)]


def _recomputable_in(loop, sites, types, alias, distinct):
    body = loop.body
    # A store changes every name that may hold the same array: ``w[i] = ...`` where ``w`` is
    # sometimes ``u`` (bound in a branch) changes the ``u[i]`` a later reverse iteration would
    # read again (a wrong gradient, found with tests/test_rebinding.py::maybe_the_same). Not
    # the names certainly holding another array throughout the loop (a swap's u and v).
    assigned, written = _loop_changes(loop, types, alias, distinct)
    loop_var = loop.var if isinstance(loop, ir.For) else None
    ok = set()
    chosen = []
    read_before = set()
    for s in body:
        is_view = isinstance(s, ir.Assign) and isinstance(types.get(s.target), nbt.Array) \
            and view_base(s.expr, types) is not None and view_base(s.expr, types) not in assigned
        if isinstance(s, ir.Assign) and len(sites.get(s.target, ())) == 1 \
                and s.target not in read_before and (is_view or _cheap(s.expr, written)) \
                and (is_view or not isinstance(types.get(s.target), nbt.Array)):
            operands = _reads(s.expr)
            if all(n == loop_var or n not in assigned or n in ok for n in operands):
                ok.add(s.target)
                chosen.append(s)
        for sub in ir.walk([s]):
            if isinstance(sub, ir.Assign):
                read_before.update(_reads(sub.expr))
            elif isinstance(sub, ir.Store):
                read_before.update(n.id for n in (sub.value, *ir.index_atoms(sub.index))
                                   if isinstance(n, ir.Name))
            elif isinstance(sub, ir.If) and isinstance(sub.test, ir.Name):
                read_before.add(sub.test.id)
    return chosen


def _cheap(expr, written):
    """Whether re-executing ``expr`` in the reverse is cheap and gives its forward value, in a
    loop that stores into the arrays ``written``: not an operation on one of those arrays
    (``u @ x`` reads all of ``u``, which a later iteration changed: a wrong gradient before)."""
    if isinstance(expr, (ir.BinOp, ir.UnaryOp, ir.MakeTuple)):
        return not any(n in written for n in _reads(expr))
    if isinstance(expr, (ir.Atom, ir.Attr)):
        return True
    if isinstance(expr, ir.Index):
        return isinstance(expr.a, ir.Name) and expr.a.id not in written
    if isinstance(expr, ir.Call):
        return (expr.func in _CHEAP_BUILTINS or expr.func in _CHEAP_MATH) and (
            expr.func is len or not any(n in written for n in _reads(expr)))
    return False


def _pushes(fn, stmts, sites, needed, recompute, in_loop, alias, types, rev_reads, tests,
            result_reads, rebound, lazy):
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
        """A read of a part of an aggregate that is bound once: the same value every time.
        Not for a parameter: its binding replaces the argument, which the reverse may read."""
        src = part_of(s.expr, types)
        return src is not None and not isinstance(s.expr, ir.Atom) \
            and s.target not in fn.params \
            and len(sites.get(s.target, ())) == 1 and len(sites.get(src, ())) <= 1

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
    for s in stmts:
        if isinstance(s, ir.Store) and alias.get(s.array, s.array) in needed_arrays \
                and id(s) not in fresh:
            pushes.add(id(s))
    return pushes


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
