"""When the vjp may run each loop iteration's reverse right after its forward (one pass).

``fusion(fn, plan) -> Fusion | None`` is a pure analysis; ``codegen`` only follows its answer.

**The rule.** The function is ``pre; L; post; return r`` with ``L`` the only loop at its top
level (a ``for`` over a range), no loop in ``pre`` or ``post``, no branch and no array made in
``post`` (its reverse runs before ``L``, ahead of what ``post`` computes), no ``while`` and no array write
inside ``L``, nothing saved by ``post``, and no value ``post`` computes read by the reverse pass
(a partial that takes its call's result, a quotient). Every scalar ``v`` that ``L`` assigns is either

- an *accumulator*: every assignment is ``v = t`` with ``t = v + u``, ``u + v`` or ``v - u``, ``L``
  reads ``v`` nowhere else, and the reverse pass never reads ``v`` (its adjoint is then the same
  in every iteration, known from the reverse of ``post`` before the loop runs); or
- *iteration-local*: ``post`` does not read it, and no iteration of ``L`` can read it before
  assigning it (``exposed`` below: a nested loop may run zero times and a branch may not be
  taken, so an assignment inside either does not count as made).

Then the iterations are independent apart from the accumulators, and each iteration's reverse
can follow its forward. Two ways to do that:

- ``tape=False`` (one pass, nothing saved): nothing in ``L`` saves a value, no branch holds a
  loop, and every scalar assigned inside a nested loop ``N`` is an accumulator or local to
  ``N`` itself (read only inside ``N``, never before its assignment in one iteration of ``N``),
  so that ``N``'s iterations can be reversed one by one too;
- ``tape=True`` (per-iteration tape): each iteration of ``L`` runs its forward with its saves,
  then its reverse with the restores; the tape holds one iteration.
"""

from dataclasses import dataclass
from typing import Any, Tuple

from numba.core import types as nbt

from . import ir
from .residuals import adjoint_reads
from .dataflow import stmt_reads


@dataclass(frozen=True)
class Fusion:
    pre: Tuple
    loop: Any
    post: Tuple
    result: Any        # the returned atom
    tape: bool
    hoisted: Tuple = ()    # post's statements of constants and pre's values, run before the loop


def exposed(stmts, v, defined=False):
    """(whether ``stmts`` can read ``v`` before assigning it, whether they surely assign it).

    A read is exposed when some path from the start of ``stmts`` reaches it without passing an
    assignment of ``v`` that surely ran: a branch assigns only if both sides do; a ``for`` loop's
    body may run zero times; a ``while`` loop's condition block runs at least once.
    """
    hit = False
    for s in stmts:
        if isinstance(s, ir.If):
            hit = hit or (not defined and v in stmt_reads(s))
            e1, d1 = exposed(s.body, v, defined)
            e2, d2 = exposed(s.orelse, v, defined)
            hit = hit or e1 or e2
            defined = defined or (d1 and d2)
        elif isinstance(s, ir.For):
            hit = hit or (not defined and v in stmt_reads(s))
            e, _ = exposed(s.body, v, defined or s.var == v)
            hit = hit or e
        elif isinstance(s, ir.While):
            ec, dc = exposed(s.cond, v, defined)
            hit = hit or ec or (not defined and v in stmt_reads(s) and not dc)
            eb, _ = exposed(s.body, v, defined or dc)
            hit = hit or eb
            defined = defined or dc
        else:
            hit = hit or (not defined and v in stmt_reads(s))
            if isinstance(s, ir.Assign) and s.target == v:
                defined = True
    return hit, defined


def fusion(fn, plan, types=None):
    """The fused schedule of ``fn`` under ``plan``, or None (see the module docstring)."""
    body = list(fn.body)
    loops = [k for k, s in enumerate(body) if isinstance(s, (ir.For, ir.While))]
    if len(loops) != 1 or not isinstance(body[loops[0]], ir.For):
        return None
    k = loops[0]
    pre, loop, post = body[:k], body[k], body[k + 1:]
    ret = post[-1].value if post and isinstance(post[-1], ir.Return) else None
    if ret is None or any(isinstance(s, (ir.For, ir.While)) for s in ir.walk(pre + post)):
        return None
    inside = list(ir.walk(loop.body))
    if any(isinstance(s, (ir.While, ir.Store)) for s in inside):
        return None
    if any(id(s) in plan.pushes for s in ir.walk(post)):
        return None
    if any(isinstance(s, ir.Assign) and (s.target in (plan.rebound or {})
                                         or s.target in (plan.lazy_views or {})
                                         or id(s) in plan.pushes and types is not None
                                         and isinstance(types.get(s.target), nbt.Array))
           for s in inside):
        # An array rebound in the loop: its adjoint follows its reference through the sweep,
        # which needs the references saved in order (array_names._rebound).
        return None
    if any(isinstance(s, ir.If) for s in post):
        # The reverse of post runs before the loop, and so before post's forward: a branch in
        # post would be reversed on a test not computed yet (an early return after the loop).
        return None
    if types is not None and any(
            isinstance(s, ir.Assign) and s.target in plan.active
            and not isinstance(types.get(s.target), (nbt.Float, nbt.Integer)) for s in post):
        # Likewise an array (or struct, tuple) made after the loop: its adjoint is allocated
        # like its value, which post's forward only makes after the reverse of post ran.
        return None
    sites, reads = _sites_and_reads(inside)
    loop_vars = {loop.var} | {s.var for s in inside if isinstance(s, ir.For)}
    after = {n for s in post for n in stmt_reads(s)}
    if after & loop_vars:
        return None
    for v in loop_vars - {loop.var}:
        # a nested loop's variable read outside every loop over it: a value flowing out
        covered = {id(x) for n in inside if isinstance(n, ir.For) and n.var == v
                   for x in ir.walk(n.body)}
        if any(id(x) not in covered and v in stmt_reads(x) for x in inside):
            return None
    accumulators = set()
    for v, ss in sites.items():
        if _is_accumulator(v, ss, reads, inside) and v not in plan.needed:
            accumulators.add(v)
        elif v in after or exposed(loop.body, v)[0]:
            return None
    assigned = set(sites) | loop_vars
    hoisted = _hoistable(fn, pre, post)
    early = {s.target for s in hoisted}
    assigned_post = {s.target for s in post if isinstance(s, ir.Assign)} - early
    for s in post:
        if isinstance(s, ir.Assign) and s.target in plan.active:
            if set(adjoint_reads(s.expr, plan.active, lambda call: True, plan.quotients)) & (assigned | assigned_post):
                return None
        if isinstance(s, ir.Assign) and s.target in plan.needed and s.target not in early:
            # The reverse reads what post computes, e.g. tanh's partial takes tanh's own result
            # or a quotient's its quotient: post's reverse would run before post computes it
            # (seed 20261322 #69: `_t15` read before it was assigned).
            return None
    tape = (any(id(s) in plan.pushes for s in inside)
            or any(len(ss) > 1 for v, ss in sites.items() if v not in accumulators)
            or any(isinstance(s, ir.If) and any(isinstance(x, (ir.For, ir.While))
                                                for x in ir.walk(s.body + s.orelse))
                   for s in inside)
            or not _nested_loops_local(loop.body, sites, accumulators))
    return Fusion(tuple(pre), loop, tuple(post), ret, tape, hoisted)


def _hoistable(fn, pre, post):
    """Statements of ``post`` that compute from constants and ``pre``'s values alone (``return
    s * -0.5`` binds ``-0.5`` after the loop): the schedule runs them before the loop, so that the
    reverse of ``post``, which runs before the loop, can read them. Each binds a name bound
    nowhere else, with no call."""
    counts = {}
    for s in ir.walk(fn.body):
        if isinstance(s, ir.Assign):
            counts[s.target] = counts.get(s.target, 0) + 1
    # values that hold from pre to the end: parameters never assigned, pre's names assigned once
    known = {p for p in fn.params if p not in counts}
    known |= {s.target for s in pre if isinstance(s, ir.Assign) and counts[s.target] == 1}
    out = []
    for s in post:
        if isinstance(s, ir.Assign) and counts.get(s.target) == 1 \
                and isinstance(s.expr, (ir.Atom, ir.BinOp, ir.UnaryOp)) \
                and all(a.id in known for a in s.expr.atoms() if isinstance(a, ir.Name)):
            out.append(s)
            known.add(s.target)
    return tuple(out)


def _nested_loops_local(body, sites, accumulators):
    """Whether every scalar assigned inside each nested loop ``N`` lives within one iteration of
    ``N`` (or is an accumulator): assigned and read only inside ``N``, never read before its
    assignment in an iteration. ``N``'s iterations can then be reversed one at a time."""
    everything = list(ir.walk(body))
    for n in everything:
        if not isinstance(n, ir.For):
            continue
        inner_ids = {id(x) for x in ir.walk(n.body)}
        for v in {x.target for x in ir.walk(n.body) if isinstance(x, ir.Assign)} - accumulators:
            if exposed(n.body, v)[0]:
                return False
            if any(id(x) not in inner_ids for x in sites.get(v, ())):
                return False
            if any(id(x) not in inner_ids and v in stmt_reads(x) for x in everything):
                return False
    return True


def accumulators(loop):
    """The scalars ``loop`` assigns only as accumulators (``_is_accumulator``: ``s += u``,
    ``s = s - u``, and read nowhere else in the loop): what a loop's chunks may each sum on
    their own, added after the chunks (ad/parallel.py)."""
    inside = list(ir.walk(loop.body))
    sites, reads = _sites_and_reads(inside)
    return {v for v, ss in sites.items() if _is_accumulator(v, ss, reads, inside)}


def _sites_and_reads(stmts):
    """({name: the assignments of it}, {name: the statements that read it}) over ``stmts``."""
    sites, reads = {}, {}
    for s in stmts:
        if isinstance(s, ir.Assign):
            sites.setdefault(s.target, []).append(s)
        for name in stmt_reads(s):
            reads.setdefault(name, []).append(s)
    return sites, reads


def _is_accumulator(v, sites, reads, inside):
    """Every site is ``v = t`` with ``t = v + u``, ``u + v`` or ``v - u``, and ``v`` is read
    nowhere else in the loop."""
    defs = {s.target: s for s in inside if isinstance(s, ir.Assign)}
    updates = []
    for s in sites:
        if not (isinstance(s.expr, ir.Atom) and isinstance(s.expr.a, ir.Name)):
            return False
        t = defs.get(s.expr.a.id)
        if t is None or not isinstance(t.expr, ir.BinOp) or t.expr.op not in ("+", "-"):
            return False
        a_is_v, b_is_v = t.expr.a == ir.Name(v), t.expr.b == ir.Name(v)
        if t.expr.op == "+" and a_is_v == b_is_v:       # exactly one operand is v
            return False
        if t.expr.op == "-" and not (a_is_v and not b_is_v):
            return False
        updates.append(t)
    return all(any(r is u for u in updates) for r in reads.get(v, []))
