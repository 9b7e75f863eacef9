"""What the reverse pass recomputes instead of saving: cheap statements of a loop's body
re-executed at the start of each reverse iteration (``_recomputable``), and those of a branch
re-executed at the start of the branch's own reverse (``_branch_recomputes``).

Part of the AD analysis (``analysis.plan``; what is saved instead is ``residuals``).
"""

import math

from numba import types as nbt

from . import ir
from .dataflow import branch_key, _reads, stmt_reads, _target, view_base


#: Pure scalar functions cheap enough to re-execute rather than save. Transcendentals (exp,
#: log, sin, ...) are not: a libm call costs 5-20 ns, a tape store and load about 1 ns, and
#: re-executing exp doubled the reverse cost of a row-wise logsumexp (perf/bench_arrays.py).
_CHEAP_BUILTINS = {abs, min, max, float, int, bool, len}


_CHEAP_MATH = {math.fabs, math.floor, math.ceil, math.trunc, math.copysign, math.sqrt,
               math.isnan, math.isinf, math.isfinite}


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
            # (a prange loop the fused schedule takes, of the shape its parallel chunks allow,
            # re-executes its math calls too, saving nothing: one pass with no tape)
            from .prange_shapes import two_pass_shape
            pure_math = any(x is s for x in body) and two_pass_shape(body, s) \
                and not any(isinstance(x, ir.Store) for x in s.body)
            out[s.id] = [x for x in _recomputable_in(s, sites, types, alias, distinct.get(id(s), frozenset()),
                                                     pure_math)
                         if x.target not in outside]
            out.update(_branch_recomputes(s, out[s.id], everything, sites, types, alias,
                                          distinct.get(id(s), frozenset())))
    return out


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


def _recomputable_in(loop, sites, types, alias, distinct, pure_math=False):
    body = loop.body
    # A store changes every name that may hold the same array: ``w[i] = ...`` where ``w`` is
    # sometimes ``u`` (bound in a branch) changes the ``u[i]`` a later reverse iteration would
    # read again (a wrong gradient, found with tests/test_rebinding.py::maybe_the_same). Not
    # the names certainly holding another array throughout the loop (a swap's u and v).
    assigned, written = _loop_changes(loop, types, alias, distinct)
    loop_var = loop.var if isinstance(loop, ir.For) else None
    # pure_math: a prange loop's reverse re-executes its math calls too (tanh, exp) rather
    # than saving their values where the loop writes no array: then nothing saved keeps it the
    # fused schedule's one pass with no tape, in parallel chunks (ad/parallel.py). A loop that
    # writes an array (the two-pass schedule) saves them instead, each iteration into slots of
    # its own (ad/parallel.py "Saves in slots"): reading a saved tanh is cheaper than another.
    ok = set()
    chosen = []
    read_before = set()
    for s in body:
        is_view = isinstance(s, ir.Assign) and isinstance(types.get(s.target), nbt.Array) \
            and view_base(s.expr, types) is not None and view_base(s.expr, types) not in assigned
        if isinstance(s, ir.Assign) and len(sites.get(s.target, ())) == 1 \
                and s.target not in read_before \
                and (is_view or _cheap(s.expr, written, pure_math=pure_math)) \
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


def _cheap(expr, written, pure_math=False):
    """Whether re-executing ``expr`` in the reverse is cheap and gives its forward value, in a
    loop that stores into the arrays ``written``: not an operation on one of those arrays
    (``u @ x`` reads all of ``u``, which a later iteration changed: a wrong gradient before).
    ``pure_math``: any function of the ``math`` module counts (a prange loop's)."""
    if isinstance(expr, (ir.BinOp, ir.UnaryOp, ir.MakeTuple)):
        return not any(n in written for n in _reads(expr))
    if isinstance(expr, (ir.Atom, ir.Attr)):
        return True
    if isinstance(expr, ir.Index):
        return isinstance(expr.a, ir.Name) and expr.a.id not in written
    if isinstance(expr, ir.Call):
        return (expr.func in _CHEAP_BUILTINS or expr.func in _CHEAP_MATH or (
            pure_math and getattr(expr.func, "__module__", None) == "math")) and (
            expr.func is len or not any(n in written for n in _reads(expr)))
    return False
