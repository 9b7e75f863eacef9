"""The code of a prange loop whose reverse runs each iteration's forward again, in parallel chunks.

A mixin of the kernel generator (``codegen._Gen``). A loop over rows with a loop inside (the
row-wise map ``for i in prange(n): for j in range(m): out[i, j] = f(x[i, j])``) saves, in the
two-pass schedule, values whose places on the tape depend on what every iteration before it
saved: its chunks could not start apart. Its iterations are independent (Numba's rule for
prange), so the reverse may instead run each iteration's forward again, saving on a tape of
that one iteration, then the iteration's reverse: each chunk of iterations with its own tape,
as the fused schedule's tape mode runs (ad/parallel.py). The forward runs the loop saving
nothing, in chunks too. Memory: one iteration's tape per thread instead of every iteration's;
work: the loop's forward runs twice (which the chunks more than pay for on two threads).

Which loops: ``parallel.rerun_loops`` (the shape, known to the analysis, which then lets their
reverse read what their iterations read, as for a checkpointed loop) and ``rerun_parallel``
(what the plan decided: nothing the loop overwrites is saved element by element). Else the
two-pass schedule, serial.
"""

from numba import types as nbt

from . import fusion, ir, parallel
from .dataflow import stmt_reads


class RerunLoops:
    """Methods of ``_Gen`` for prange loops whose iterations the reverse runs again."""

    def rerun_parallel(self, loop):
        """Whether ``loop`` runs so (forward and reverse decide alike: the plan alone says)."""
        if not isinstance(loop, ir.For) or id(loop) not in (self.plan.reruns or ()) \
                or self.device is not None or self.fusing or self.plain:
            return False
        memo = self.__dict__.setdefault("_reruns", {})
        if id(loop) not in memo:
            memo[id(loop)] = self._rerun_allowed(loop)
        return memo[id(loop)]

    def _rerun_allowed(self, loop):
        inside = list(ir.walk(loop.body))
        acc = fusion.accumulators(loop)
        for x in inside:
            if isinstance(x, ir.Store) and self.taped(x):
                return False         # an overwritten element saved: the forward saves nothing
            if isinstance(x, (ir.For, ir.While)) and self.snapshots(x):
                return False
            if isinstance(x, ir.Assign) and x.target in acc and id(x) in self.plan.pushes:
                return False         # an accumulator's value before the loop, saved
        # a value from before the loop the loop overwrites and some reverse after reads: kept
        # aside once (_pv), which a loop nested in another would need once per entry
        return not (self.rerun_restored(loop) and id(loop) in self.plan.in_loop)

    def rerun_restored(self, loop):
        """The names the loop overwrites whose values from before it something outside the loop
        reads (the plan saves them at their first assignment): kept aside before the forward's
        chunks, set back after the reverse's."""
        inside = list(ir.walk(loop.body))
        ids = {id(x) for x in inside}
        saved = {x.target for x in inside if isinstance(x, ir.Assign) and id(x) in self.plan.pushes}
        saved |= {x.var for x in inside if isinstance(x, ir.For) and id(x) in self.plan.pushes}
        outside = {n for x in ir.walk(self.fn.body) if id(x) not in ids and x is not loop
                   for n in stmt_reads(x)}
        return sorted(saved & outside)

    def rerun_fwd(self, s, out, reserved):
        """The loop's forward: its iterations saving nothing, in chunks."""
        for w in self.snapshots(s):
            self.push_view(out, w, self.types[w].dtype)   # restored after the reverse
        if id(s) in self.plan.pushes:
            self.push(out, s.var, self.pushed_type(s), reserved)
        if id(s) in self.plan.reverse_relevant:
            if id(s) in self.plan.in_loop:
                self.push(out, f"_n{s.id}", nbt.int64, reserved)
            out.add(f"_n{s.id} = _trip({s.start.src()}, {s.stop.src()}, {s.step.src()})")
        for v in self.rerun_restored(s):
            out.add(f"_pv{s.id}_{v} = {v}")
        at = len(out.lines)
        out.add(f"for {s.var} in {ir.range_src(s.start, s.stop, s.step)}:")
        with self.plainly():
            self.nested(s.body, out, False)
        self.parallelize(s, out, at, two_pass=True)
        # the tapes the reverse's iterations use are declared by the forward (tape_inits):
        # emit an iteration with its saves once, into nothing
        self.block_fwd(s.body, type(out)(), False)

    def rerun_rev(self, loop, out):
        """The loop's reverse: each iteration's forward again, saving on a tape of its own
        chunk, then its reverse; the stores and accumulators of the forward are left out (the
        arrays hold what the forward stored, the sums are done)."""
        start, indent = len(out.lines), out.indent
        inside = list(ir.walk(loop.body))
        assigned = {x.target for x in inside if isinstance(x, ir.Assign)}
        assigned |= {x.var for x in inside if isinstance(x, ir.For)}
        for name in [a.id for a in (loop.start, loop.stop, loop.step) if isinstance(a, ir.Name)]:
            out.read(name)
        for x in inside:
            for r in stmt_reads(x):
                if r not in assigned:
                    out.read(r)
        acc = fusion.accumulators(loop)
        sums = [x for x in inside if isinstance(x, ir.Assign) and x.target in acc]
        # s = _t with _t = s + u (fusion.py), the temporary read by the update alone
        temps = {x.expr.a.id for x in sums}
        temps = {t for t in temps
                 if sum(stmt_reads(x).count(t) for x in inside) == 1}
        skip = {id(x) for x in inside if isinstance(x, ir.Store)
                or isinstance(x, ir.Assign) and x.target in temps} | {id(x) for x in sums}
        out.add(f"for {loop.var} in {ir.range_src(loop.start, loop.stop, loop.step)}:")
        out.indent += 1
        out.local.append({loop.var} | assigned)
        self.rerun_skip = skip
        try:
            self.block_fwd(loop.body, out, False)
        finally:
            self.rerun_skip = frozenset()
        self.block_rev(loop.body, out)
        out.local.pop()
        out.indent -= 1
        chunked = parallel.rewrite(self, loop, out.lines[start:], indent)
        if chunked is None:
            out.lines.insert(start, "    " * indent + "# prange: serial here (each iteration's "
                                                      "forward again, then its reverse)")
        else:
            out.lines[start:] = chunked
            self.parallel = True
        for v in self.rerun_restored(loop):
            out.add(f"{v} = _pv{loop.id}_{v}")
            out.read(f"_pv{loop.id}_{v}")
        if id(loop) in self.plan.in_loop:
            self.pop(out, f"_n{loop.id}", nbt.int64)
        if id(loop) in self.plan.pushes:
            self.pop(out, loop.var, self.pushed_type(loop))
        for w in reversed(self.snapshots(loop)):
            self.restore(out, w)
        return True
