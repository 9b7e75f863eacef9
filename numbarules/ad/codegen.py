"""Emit the forward kernel, the pullback kernel and the fused vjp as readable Python source.

The generator ``_Gen`` is assembled from parts, one module each: the statement templates of the
reverse sweep (adjoints.py), the schedules other than the two-kernel one (fused_schedule.py: one
pass with the reverse of each iteration right after it; device.py: one function for device
code; checkpointing.py: checkpointed loops), the text buffer (emit.py), and the clean-up of the
result (simplify.py). This module holds the two-kernel schedule (forward with its saves, then the
reverse sweep) and the statements' reverse; the statements' forward (forward_pass.py), the tape
(tape.py) and the adjoint variables (adjoint_vars.py) are parts of their own.

Store-and-restore reverse mode (Tapenade, Tangent). Invariant of the reverse sweep: when the
adjoint of statement S runs, every variable holds the value it had right after S ran forward.
Each statement's reverse is one short template (``_adjoint``); a saved value is popped back right
after the adjoint of the statement that overwrote it; loops run backwards over the same indices
(``for``) or the counted number of iterations (``while``), re-executing at the start of each
iteration the cheap statements the plan chose to recompute instead of saving.
"""

import os
import dataclasses
from dataclasses import dataclass

from numba import types as nbt

from . import gather, ir, outline, parallel, simplify
from .adjoint_vars import AdjointVariables, forwardable
from .adjoints import Adjoints
from .checkpointing import CheckpointedLoops
from .chunk_tapes import ChunkTapes
from .chunked_reverse import ChunkedReverse
from .device import DeviceVjp
from .emit import _Names, _Out
from .forward_pass import ForwardPass
from .fused_schedule import FusedVjp
from .tape import Saves
from .dataflow import branch_key, part_of
from .kinds import holds_arrays, is_float_array, is_function

CHECKS = os.environ.get("NUMBARULES_CHECKS", "") not in ("", "0")


@dataclass(frozen=True)
class CallPlan:
    """How the reverse pass treats one call: see ``kernels.classify_call``."""
    kind: str                  # scalar | derived | identity | alloc | full | nondiff
    name: str = ""             # namespace name of the partials function or the callee's vjp
    mask: tuple = ()           # derived: which arguments carry tangents
    with_result: bool = False  # scalar: partials take the primal result as a last argument
    inline: tuple = None       # scalar: the partials as expressions (ad/partials.inline_form),
                               # written at the call instead of calling ``name``
    checked: str = ""          # derived from a user's rule: its name, to check tangent shapes
    keep: bool = False         # derived: at the top level, keep the callee's residuals from the
                               # forward instead of re-running its forward in the reverse
    tangents: tuple = ()       # derived: the Numba types of the tangents the callee returns
    residuals: object = None   # derived from an rrule: the Numba type of its residuals
    value: str = "primal"      # derived: where the forward takes the call's value from:
                               # "primal" (the function itself), "rule" (an rrule's forward,
                               # whose residuals are saved per call), "forward" (the callee's
                               # forward kernel: a rule somewhere below gives the value)
    changes_residuals: bool = True  # derived, kept: the callee's pullback changes its residuals
    relayout: str = ""         # derived from an rrule whose array has another layout than
                               # Numba's primal gives (vmath's tanh of an F-ordered array is C):
                               # the NumPy function that copies it to the primal's layout


@dataclass(frozen=True)
class Kernels:
    forward: str
    pullback: str
    vjp: str
    residuals: tuple
    tape_keys: tuple
    fused: bool = False        # the vjp runs forward and reverse in one pass (fused_vjp)
    tangent_classes: dict = None   # namespace names -> Tangent[S] classes the kernels build
    whole: str = None          # not fused: the vjp as one function, the forward then the
                               # pullback (``vjp`` calls the two kernels instead)
    whole_body: tuple = ()     # its statements (lines), between the signature and the return
    whole_tangents: tuple = () # the tangent it returns for each parameter ("None" or a name)
    whole_value: str = "_y"    # the value it returns
    changes_residuals: bool = False  # the pullback restores saved arrays or pops saved lists
                               # (or calls a callee's pullback on kept residuals): it can run
                               # once on its residuals (pullbacks.pullback runs the forward again)
    parallel: bool = False     # the vjp has a prange loop's chunks (ad/parallel.py): the
                               # driver Python calls runs them on threads
    chunks: tuple = ()         # (name, source) of each chunk loop of whole_body as a function
                               # of its own (ad/outline.py), compiled with parallel=True; empty
                               # where the parallel driver compiles whole with parallel=True
    value_loop: bool = False   # a loop of whole_body runs only for the value: its reverse is a
                               # gather that computes again what it reads. A kernel returning
                               # no value (nr.grad's) runs no such loop (LLVM drops it): grad
                               # compiles a kernel of its own instead of value_and_grad's


def generate(fn, types, plan, name, mask):
    """Sources of ``fwd_<name>``, ``bwd_<name>``, ``vjp_<name>`` for this plan."""
    gen = _Gen(fn, types, plan, name, mask)
    kernels = gen.build()
    if not kernels.parallel:
        return kernels
    arrays = parallel.array_names(types, gen.names.adj)
    # The driver runs its chunk loops as functions of their own, compiled with parallel=True
    # (ad/outline.py): Numba's parallel analysis of a whole kernel mis-sizes an array name
    # bound to several arrays (parallel.rebinds_arrays), which the chunks' arguments never are
    outlined = outline.outline(kernels.whole_body, name, fn.params)
    if outlined is not None and not any(parallel.rebinds_arrays(src, arrays)
                                        for _, src in outlined[1]):
        return dataclasses.replace(kernels, whole_body=outlined[0], chunks=outlined[1])
    if parallel.rebinds_arrays(kernels.whole or kernels.vjp, arrays):
        # neither outlined nor safe whole: such a kernel runs its prange loops serially
        kernels = _Gen(fn, types, plan, name, mask, serial=True).build()
    return kernels


class _Gen(CheckpointedLoops, ChunkedReverse, ChunkTapes, FusedVjp, DeviceVjp, Adjoints,
           AdjointVariables, Saves, ForwardPass):
    def __init__(self, fn, types, plan, name, mask, serial=False):
        self.fn, self.types, self.plan, self.name = fn, types, plan, name
        self.serial = serial        # no prange loop in chunks (parallel.rewrite)
        self.calls = plan.calls
        self.views = plan.views or {}
        self.mask = tuple(mask)
        self.names = _Names(set(types) | set(fn.params))
        self.sites = {}
        for s in ir.walk(fn.body):
            if isinstance(s, ir.Assign):
                self.sites.setdefault(s.target, []).append(s)
        self.tapes = set()
        self.whole_body, self.whole_tangents, self.whole_value = [], (), "_y"
        self.recomputed = {id(s) for g in plan.recompute.values() for s in g}
        self.forwarded, self.forwarded_by = forwardable(fn, types, plan)
        self.fusing = False
        self.shifted = {}           # id(Assign) -> (tape key, offset): shifted saves (tape.py)
        self.top_fused_loop = None     # the fused schedule's loop (fused_schedule.gathered_loop)
        self.value_loop = False     # Kernels.value_loop (set by fused_schedule.gathered_loop)
        self.arena = False          # copies kept for the reverse live in an arena (tape.py)
        self.plain = False          # the steps a checkpointed loop advances: no saves at all
        self.dry_run = None         # the Keep of the loop whose texts chunk_tapes tries
        self.seed_as = None         # the adjoint a statement's reverse starts from, when not
                                    # its target's (stmt_rev_body with views)
        # Top-level calls whose callee's residuals the forward keeps (call id -> residual name);
        # the others are checkpointed (their forward runs again in the reverse).
        self.kept = {id(x.expr): f"_rr{k}" for k, x in enumerate(fn.body)
                     if isinstance(x, ir.Assign) and isinstance(x.expr, ir.Call)
                     and not x.expr.kwargs and id(x.expr) in plan.calls
                     and plan.calls[id(x.expr)].kind == "derived" and plan.calls[id(x.expr)].keep}
        # Calls of rrules in loops and branches save the rule's residuals per call, on a list
        # (call id -> residual name): the rule's forward gives the value and runs once.
        self.rule_sites = {id(x.expr): f"_rs{k}" for k, x in enumerate(ir.walk(fn.body))
                           if isinstance(x, ir.Assign) and id(x.expr) in plan.calls
                           and plan.calls[id(x.expr)].kind == "derived"
                           and plan.calls[id(x.expr)].value == "rule"
                           and id(x.expr) not in self.kept}
        self.rule_lists = {}        # the residual lists the forward filled -> residual type
        self.checkpointed = set()   # calls whose reverse runs before their forward (fused post)
        self.changes_residuals = False  # see Kernels.changes_residuals
        self.parallel = False       # see Kernels.parallel
        # Device code (numbarules.cuda): the tape capacity, a compile-time constant; None on
        # the CPU. See device_vjp.
        self.device = None
        self.tangent_classes = {}
        # Adjoints that are a part of another adjoint: an array or an aggregate holding arrays
        # read from an aggregate's field or item, or such an aggregate copied. Bound when the
        # pullback starts (their arrays are the source's): v -> (source, index or None).
        self.sourced = {}
        # Aggregates built here (a struct constructor, a tuple) that hold arrays: their tangents
        # hold the very adjoint arrays of the arrays they were built from (one binding each).
        self.built = set()
        for s in ir.walk(fn.body):
            if not (isinstance(s, ir.Assign) and s.target in plan.active):
                continue
            t = types.get(s.target)
            src = part_of(s.expr, types)
            if src is not None and src in plan.active and (is_float_array(t) or holds_arrays(t)):
                self.sourced[s.target] = (src, self.part_index(s.expr))
            elif holds_arrays(t) and (isinstance(s.expr, ir.MakeTuple) or (
                    isinstance(s.expr, ir.Call) and id(s.expr) in plan.calls
                    and plan.calls[id(s.expr)].kind == "struct")):
                self.built.add(s.target)

    # --- shared ----------------------------------------------------------------------------


    def part_index(self, e):
        """The field or item index a part-of expression reads (None for a whole copy)."""
        if isinstance(e, ir.Attr):
            return self.types[e.a.id].instance_class._fields.index(e.attr)
        if isinstance(e, ir.Index):
            return e.index[0].value
        return None


    def region(self, s):
        """Whether the store ``s`` writes a region (a slice, or a row ``h[t] = ...`` of a matrix),
        not one element."""
        t = self.types.get(s.array)
        return ir.has_slice(s.index) or (isinstance(t, nbt.Array) and len(s.index) < t.ndim)


    def adjoint_lookup(self, v, others):
        """``d_v = `` the adjoint of whichever of ``others`` holds the array ``v`` holds, else a
        zero array (one line of Python, a conditional expression)."""
        d = self.names.d
        expr = f"_zeros_like({v})"
        for m in reversed(others):
            expr = f"{d(m)} if {v} is {m} else {expr}"
        return f"{d(v)} = {expr}"

    # --- pullback -------------------------------------------------------------------------

    def pullback(self):
        fn, plan = self.fn, self.plan
        body = _Out()
        body.indent = 1
        ret = next(s for s in ir.walk(fn.body) if isinstance(s, ir.Return)).value
        if isinstance(ret, ir.Name) and ret.id in plan.active:
            body.add(self.seed_result(ret.id))
        self.block_rev(fn.body, body)
        reads = body.reads
        header = self.adjoint_header(reads)
        tangents = self.tangents(reads)
        checks = []
        if CHECKS:
            checks = [f"if _k_{k} != 0:\n        raise AssertionError('tape {k} unbalanced')"
                      for k in sorted(self.tapes)]
        synthesized = {f"_{c}{x.id}" for x in ir.walk(fn.body) if isinstance(x, (ir.For, ir.While))
                       for c in ("n", "w")}
        synthesized |= set(self.kept.values()) | {f"_l{n}" for n in self.rule_sites.values()}
        synthesized |= {f"_l{c}_{v}" for v in self.types for c in "rs"} | set(self.chunk_lists())
        for x in ir.walk(fn.body):          # a checkpointed loop's state at entry (slot 0)
            if isinstance(x, ir.For) and x.snapshots is not None:
                synthesized |= {f"_c{c}{x.id}_{v}" for v in self.types for c in "rv"}
        primal = (set(self.types) | set(fn.params) | synthesized) - set(self.names.adj.values())
        # a function passed as a value is a constant of the specialization (its type is the
        # function): the pullback names it from its namespace, and compiled code could not box
        # it into the residuals handed to Python (nr.pullback)
        constants = {v for v, t in self.types.items() if is_function(t)}
        residuals = sorted(v for v in reads if v in primal and v not in constants)
        residuals += [x for k in sorted(self.tapes) for x in (f"_tape_{k}", f"_k_{k}")]
        self.residuals = tuple(residuals)
        lines = [f"def bwd_{self.name}(_res, _dout):",
                 f"    # pullback of {fn.name} ({fn.file}:{fn.firstline}): the reverse sweep"]
        if residuals:
            unpack = ", ".join(residuals) + ("," if len(residuals) == 1 else "")
            lines.append(f"    {unpack} = _res")
        lines += ["    " + h for h in header]
        lines += body.lines
        lines += ["    " + c for c in checks]
        self.pullback_lines = ["    " + h for h in header] + body.lines
        self.pullback_tangents = tangents
        tup = ", ".join(tangents) + ("," if len(tangents) == 1 else "")
        lines.append(f"    return ({tup})")
        return "\n".join(lines) + "\n"


    # --- the fused vjp of a reduction loop ------------------------------------------------


    def block_rev(self, stmts, out):
        lazy = self.plan.lazy_views or {}
        for s in reversed(stmts):
            views = [x for x in stmts if isinstance(x, ir.Assign) and lazy.get(x.target) == id(s)]
            if isinstance(s, ir.Assign) and id(s) in self.plan.pushes and self.reference(s) \
                    and any(s.target in _names(x.expr) for x in views):
                # the last use rebinds the base (u = u[::-1].copy()): the view is of the array
                # the base held before, taken again once the reverse has restored it
                self.stmt_rev(s, out, views)
                continue
            for x in views:
                self.take_view_again(x, out)
            if id(s) in self.plan.reverse_relevant:
                self.stmt_rev(s, out)

    def take_view_again(self, s, out):
        """A view and its adjoint taken again before the reverse of its last use
        (array_names._lazy_views): its base and indices hold their values from then."""
        for a in s.expr.atoms():
            if isinstance(a, ir.Name):
                out.read(a.id)
        out.add(f"{s.target} = {ir.expr_src(s.expr)}")
        if s.target in self.plan.active:
            reads = set()
            out.add(f"{self.names.d(s.target)} = {self.adjoint_view(s, reads)}")
            for name in reads:
                out.read(name)

    def stmt_rev(self, s, out, views=()):
        self.stmt_rev_body(s, out, views)
        for name in sorted(out.fresh):   # the reader made no contribution: it is zero
            var = self.names.primal_of(name)
            zero = f"_zeros_like({var})" if is_float_array(self.types.get(var)) else "0.0"
            if zero != "0.0":
                out.read(var)
            out.add(f"{name} = {zero}")
        out.fresh = set()

    def stmt_rev_body(self, s, out, views=()):
        out.comment(self.fn, s.line)
        plan, d = self.plan, self.names.d
        out.fresh = {d(v) for v in self.forwarded_by.get(id(s), ())}
        out.casts = {d(v): self.types[v].dtype for v in self.forwarded_by.get(id(s), ())
                     if is_float_array(self.types[v]) and self.types[v].dtype != nbt.float64}
        if isinstance(s, ir.Assign) and views:
            # (see block_rev) the adjoint of the new array first, then the old one restored
            # and its views taken again, then the statement's adjoint
            gr = self.names.fresh("_gr")
            if s.target in plan.active:
                out.add(f"{gr} = {d(s.target)}")
            self.pop_reference(out, s)
            for x in views:
                self.take_view_again(x, out)
            if s.target in plan.active:
                self.seed_as = gr
                try:
                    self.adjoint(s, out)
                finally:
                    self.seed_as = None
        elif isinstance(s, ir.Assign):
            if s.target in plan.active:
                self.adjoint(s, out)
            if id(s) in plan.pushes and self.reference(s):
                if not self.reference_unread(s):
                    self.pop_reference(out, s)
            elif id(s) in plan.pushes:
                self.pop(out, s.target, self.pushed_type(s))
        elif isinstance(s, ir.Store):
            idx = ", ".join(a.src() for a in s.index)
            [out.read(a.id) for a in ir.index_atoms(s.index) if isinstance(a, ir.Name)]
            if s.array in plan.active:
                if isinstance(s.value, ir.Name) and s.value.id in plan.active:
                    g = f"{d(s.array)}[{idx}]"
                    if self.region(s):
                        # the value was broadcast into the slice: sum over the broadcast axes
                        g = f"_np.sum({g})" if self.rank(s.value) == 0 else f"_ub({g}, {s.value.id})"
                        out.read(s.value.id)
                    alias = plan.alias_of
                    if self.region(s) and self.rank(s.value) > 0 and alias.get(
                            s.value.id, s.value.id) == alias.get(s.array, s.array):
                        # the value is a view of the same array (u[1:] = u[:-1]): its adjoint
                        # overlaps the slice's, so take the slice's adjoint out before zeroing
                        # it, and add it after (adding first, the zeroing erased the overlap)
                        gs = f"_gs{len(out.lines)}"       # one name per store: its own type
                        out.add(f"{gs} = {g}.copy()")
                        out.add(f"{d(s.array)}[{idx}] = 0.0")
                        out.add(f"{d(s.value.id)} += {gs}")
                    else:
                        out.add(f"{d(s.value.id)} += {g}")
                        out.add(f"{d(s.array)}[{idx}] = 0.0")
                else:
                    out.add(f"{d(s.array)}[{idx}] = 0.0")
            if id(s) in plan.pushes and not self.snapshotted(s):
                pop = self.pop_view if self.region(s) else self.pop
                pop(out, f"{s.array}[{idx}]", self.pushed_type(s))
                out.read(s.array)
        elif isinstance(s, ir.If):
            if isinstance(s.test, ir.Name):
                out.read(s.test.id)
            out.add(f"if {s.test.src()}:")
            self.nested_rev(s.body, out, branch_key(s, 0))
            if any(id(x) in plan.reverse_relevant for x in s.orelse):
                out.add("else:")
                self.nested_rev(s.orelse, out, branch_key(s, 1))
        elif isinstance(s, ir.For) and s.snapshots is not None:
            self.checkpointed_rev(s, out)
        elif isinstance(s, ir.For) and self.parallel_reverse(s, out):
            pass
        elif isinstance(s, ir.For):
            j, n = f"_j{s.id}", f"_n{s.id}"
            for name in [n] + [a.id for a in (s.start, s.step) if isinstance(a, ir.Name)]:
                out.read(name)
            # A while loop, not range(n - 1, -1, -1): its guard tells LLVM that j >= 0, so the
            # negative-index wraparound Numba puts on x[j] folds away and the loop can
            # vectorize (measured 5-7x faster on a plain adjoint loop).
            nest = gather.nest_of(self, s)
            start = len(out.lines)
            out.add(f"{j} = {n} - 1")
            out.add(f"while {j} >= 0:")
            out.indent += 1
            out.local.append({s.var})
            out.add(f"{s.var} = {ir.affine_src(s.start, j, s.step)}")
            self.recompute(s, out)
            self.block_rev(s.body, out)
            out.add(f"{j} -= 1")
            out.local.pop()
            out.indent -= 1
            if nest:
                gather.rewrite(self, out, start, nest)
            if id(s) in plan.in_loop:
                self.pop(out, n, nbt.int64)
            if id(s) in plan.pushes:
                self.pop(out, s.var, self.pushed_type(s))
            for w in reversed(self.snapshots(s)):
                self.restore(out, w)
        elif isinstance(s, ir.While):
            w = f"_w{s.id}"
            out.read(w)
            out.add(f"for _j{s.id} in range({w}):")
            out.indent += 1
            out.local.append(set())
            self.recompute(s, out)
            self.block_rev(s.body, out)
            out.local.pop()
            out.indent -= 1
            if id(s) in plan.in_loop:
                self.pop(out, w, nbt.int64)

    def nested_rev(self, stmts, out, key=None):
        out.indent += 1
        n = len(out.lines)
        if key is not None:
            # what the plan recomputes for this branch (recompute._branch_recomputes)
            self.recompute_group(self.plan.recompute.get(key, ()), (), out)
        self.block_rev(stmts, out)
        if len(out.lines) == n or all(l.strip().startswith("#") for l in out.lines[n:]):
            out.add("pass")
        out.indent -= 1

    def recompute(self, loop, out):
        """At the start of a reverse iteration: re-execute what the plan recomputes, then bind
        the adjoints of the views taken in this loop (``d_r = d_M[t]``) for this iteration."""
        views = self.loop_views(loop)
        indices = {a.id for v in views for a in v.expr.atoms() if isinstance(a, ir.Name)}
        self.recompute_group(self.plan.recompute.get(loop.id, ()), indices, out)
        self.bind_views(loop, out)

    def recompute_group(self, group, indices, out):
        for s in group:
            if s.target not in self.plan.needed and s.target not in indices:
                continue
            for a in s.expr.atoms():
                if isinstance(a, ir.Name):
                    out.read(a.id)
            out.add(f"{s.target} = {ir.expr_src(s.expr)}")
            out.local[-1].add(s.target)

    def loop_views(self, loop):
        """The view statements whose adjoints each reverse iteration of ``loop`` binds."""
        mine = {v for v, k in (self.plan.loop_views or {}).items() if k == loop.id}
        return [s for s in ir.walk(loop.body) if isinstance(s, ir.Assign) and s.target in mine]

    def bind_views(self, loop, out):
        for s in self.loop_views(loop):
            reads = set()
            out.add(f"{self.names.d(s.target)} = {self.adjoint_view(s, reads)}")
            for name in reads:
                out.read(name)


    # --- assembly --------------------------------------------------------------------------


    def build(self):
        self.residuals = ()
        bwd = self.pullback()
        changes = self.changes_residuals
        fwd = self.forward(self.residuals)
        fused = self.fused_vjp()
        params = ", ".join(self.fn.params)
        outs = ", ".join(f"_d[{k}]" for k in range(len(self.fn.params)))
        vjp = (f"def vjp_{self.name}({params}{', ' if params else ''}_dout):\n"
               f"    _y, _res = fwd_{self.name}({params})\n"
               f"    _d = bwd_{self.name}(_res, _dout)\n"
               f"    return (_y, {outs}{',' if len(self.fn.params) == 0 else ''})\n")
        if fused is None:
            whole = self.whole_vjp()
            self.whole_tangents, self.whole_value = tuple(self.pullback_tangents), "_y"
        else:
            whole = None
        fwd, bwd = self.simplified(fwd), self.simplified(bwd)
        fused, whole = fused and self.simplified(fused), whole and self.simplified(whole)
        body = self.simplified_whole_body()
        if self.parallel:
            # the kernels that run chunks on threads zero their adjoint arrays on them too
            fused, whole = (text and "\n".join(parallel.zeroed_in_chunks(text.split("\n")))
                            for text in (fused, whole))
            body = tuple(parallel.zeroed_in_chunks(body))
        return Kernels(fwd, bwd, fused or vjp, self.residuals, tuple(sorted(self.tapes)),
                       fused is not None, dict(self.tangent_classes), whole,
                       body, self.whole_tangents, self.whole_value, changes, self.parallel,
                       value_loop=fused is not None and self.value_loop)

    def simplified(self, source):
        """``source`` without dead declarations and stores (ad/simplify.py)."""
        source = gather.drop_unread_leftovers(source)
        return simplify.drop_dead_inits(source, frozenset(self.types) | frozenset(self.fn.params))

    def simplified_whole_body(self):
        """``whole_body`` without the declarations ``drop_dead_inits`` drops from the whole
        kernel (the entry's driver is built from these lines and its own return)."""
        if not self.whole_body:
            return ()
        ret = f"    return ({self.whole_value}, {''.join(t + ', ' for t in self.whole_tangents)})"
        text = "def _w():\n" + "\n".join(self.whole_body) + "\n" + ret + "\n"
        return tuple(self.simplified(text).split("\n")[1:-2])

    def whole_vjp(self):
        """The forward's statements, then the pullback's, in one function: one kernel to compile
        instead of three (forward, pullback, the vjp calling them), and no residual tuple. The
        residuals are the forward's own variables, still in scope when the reverse sweep starts;
        the forward's one return (the normalised primal returns once, at the end) becomes
        ``_y = ...``."""
        fwd = list(self.forward_lines)
        last = max(i for i, line in enumerate(fwd) if line.startswith("    return "))
        value = fwd[last][len("    return "):].rsplit(", (", 1)[0]
        fwd[last] = f"    _y = {value}"
        params = ", ".join(self.fn.params)
        tangents = self.pullback_tangents
        lines = [f"def vjp_{self.name}({params}{', ' if params else ''}_dout):",
                 f"    # forward and reverse of {self.fn.name} ({self.fn.file}:"
                 f"{self.fn.firstline}) in one function"]
        body = fwd[1:] if fwd and fwd[0].lstrip().startswith("# forward of") else fwd
        body += self.pullback_lines
        self.whole_body = body
        lines += body
        lines.append(f"    return (_y, {''.join(t + ', ' for t in tangents)})")
        return "\n".join(lines) + "\n"


def generate_device(fn, types, plan, name, mask, capacity):
    """Source of the device vjp ``vjp_<name>`` (see ``_Gen.device_vjp``)."""
    gen = _Gen(fn, types, plan, name, mask)
    return gen.simplified(gen.device_vjp(capacity))


def _names(expr):
    return {a.id for a in expr.atoms() if isinstance(a, ir.Name)}

