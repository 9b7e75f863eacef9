"""The fused schedule: each iteration's reverse right after its forward, in one pass.

Legal when ``fusion.fusion`` says so (ad/fusion.py states the rule); then a reduction loop needs
no tape, or a tape of one iteration ("tape mode"). The code of that schedule.
"""

from . import fusion, ir
from .emit import _Out


class FusedVjp:
    """The fused one-pass vjp (a mixin of codegen._Gen)."""

    def fused_vjp(self):
        """One kernel that runs each iteration's reverse right after its forward, or None.

        For a function ``pre; loop; post; return`` whose loop only accumulates into scalars
        (``s += ...``) and otherwise keeps every value within one iteration, the adjoint of each
        accumulator is known before the loop (the reverse of ``post`` gives it, reading only
        values from ``pre``). Then nothing needs saving or recomputing: one pass over the data,
        as a hand-written adjoint would do.
        """
        plan = fusion.fusion(self.fn, self.plan, self.types)
        if plan is None:
            return None
        pre, loop, post, ret, tape = plan.pre, plan.loop, list(plan.post), plan.result, plan.tape
        if tape and self.device is not None:
            return None     # device tapes are sized for the whole run (device_tape_demand)
        # post's reverse runs before its forward here: its calls are checkpointed
        post_calls = {id(x.expr) for x in post if isinstance(x, ir.Assign)}
        kept, self.kept = self.kept, {k: v for k, v in self.kept.items() if k not in post_calls}
        self.checkpointed = post_calls
        try:
            return self._fused_vjp(pre, loop, post, ret, tape)
        finally:
            self.kept = kept
            self.checkpointed = set()

    def _fused_vjp(self, pre, loop, post, ret, tape):
        self.rule_lists = {}
        fn = self.fn
        out = _Out()
        out.add(f"# fused forward and reverse of {fn.name} ({fn.file}:{fn.firstline}): each "
                f"iteration's adjoint runs right after it")
        if self.device is not None:
            out.add("_need = 0")   # a callee's tape overflow, reported to the caller
        if tape:
            assigned = {x.target for x in ir.walk(loop.body) if isinstance(x, ir.Assign)}
            for line in self.primal_inits(assigned):
                out.add(line)
        start = len(out.lines)
        self.block_fwd(pre, out, reserved=False)
        tape_at = start
        reads = set()
        for h in self.adjoint_header(reads):
            out.add(h)
        if isinstance(ret, ir.Name) and ret.id in self.plan.active:
            out.add(self.seed_result(ret.id))
        self.block_rev(post, out)
        if tape:
            # The tape is empty at each iteration's start and end: it holds one iteration.
            out.comment(fn, loop.line)
            out.add(f"for {loop.var} in {ir.range_src(loop.start, loop.stop, loop.step)}:")
            out.indent += 1
            # (What the reverse would recompute per iteration still holds its forward value.)
            self.block_fwd(loop.body, out, reserved=False)
            self.bind_views(loop, out)
            self.block_rev(loop.body, out)
            out.indent -= 1
        else:
            self.fusing = True
            try:
                self.fused_loop(loop, out)
            finally:
                self.fusing = False
        self.block_fwd(post[:-1], out, reserved=False)
        self.block_rev(pre, out)
        tangents = self.tangents(reads)
        out.lines[tape_at:tape_at] = ["    " + t for t in self.tape_inits()]
        params = ", ".join(fn.params)
        # Device code also reports a callee's tape overflow (see device_vjp); its own tapes
        # hold only pushes outside the loop, a number known here.
        need = "_need, " if self.device is not None else ""
        self.whole_body, self.whole_tangents = list(out.lines[1:]), tuple(tangents)
        self.whole_value = ret.src()
        out.add(f"return ({ret.src()}, {''.join(t + ', ' for t in tangents)}{need})")
        return (f"def vjp_{self.name}({params}{', ' if params else ''}_dout):\n"
                + "\n".join(out.lines) + "\n")

    def fused_loop(self, loop, out):
        out.comment(self.fn, loop.line)
        out.add(f"for {loop.var} in {ir.range_src(loop.start, loop.stop, loop.step)}:")
        out.indent += 1
        n = len(out.lines)
        for s in loop.body:
            if isinstance(s, ir.For):
                self.fused_loop(s, out)
            else:
                self.stmt_fwd(s, out, True)
        self.bind_views(loop, out)
        for s in reversed(loop.body):
            if not isinstance(s, ir.For) and id(s) in self.plan.reverse_relevant:
                self.stmt_rev(s, out)
        if all(line.strip().startswith("#") for line in out.lines[n:]):
            out.add("pass")
        out.indent -= 1
