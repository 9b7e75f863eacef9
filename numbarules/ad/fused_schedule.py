"""The fused schedule: each iteration's reverse right after its forward, in one pass.

Legal when ``fusion.fusion`` says so (ad/fusion.py states the rule); then a reduction loop needs
no tape, or a tape of one iteration ("tape mode"). The code of that schedule.
"""

import dataclasses
import re

from . import fusion, gather, ir, parallel
from .dataflow import stmt_reads
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
            return self._fused_vjp(pre, loop, post, ret, tape, plan.hoisted)
        finally:
            self.kept = kept
            self.checkpointed = set()

    def _fused_vjp(self, pre, loop, post, ret, tape, hoisted=()):
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
        # post's values of constants and pre's values (fusion._hoistable), which post's reverse
        # reads before the loop
        self.block_fwd(hoisted, out, reserved=False)
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
            start = len(out.lines)
            out.add(f"for {loop.var} in {ir.range_src(loop.start, loop.stop, loop.step)}:")
            out.indent += 1
            # (What the reverse would recompute per iteration still holds its forward value.)
            self.block_fwd(loop.body, out, reserved=False)
            self.bind_views(loop, out)
            self.block_rev(loop.body, out)
            out.indent -= 1
            if loop.parallel and self.device is None:
                self.parallelize(loop, out, start)
        else:
            self.fusing = True
            self.top_fused_loop = loop
            try:
                self.fused_loop(loop, out)
            finally:
                self.fusing = False
                self.top_fused_loop = None
        self.block_fwd([x for x in post[:-1] if not any(x is h for h in hoisted)], out,
                       reserved=False)
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
        if loop is self.top_fused_loop and loop.parallel and self.device is None:
            if self.gathered_loop(loop, out, in_chunks=True):
                return
            out.comment(self.fn, loop.line)
            start = len(out.lines)
            self.serial_fused_loop(loop, out)
            self.parallelize(loop, out, start)
            return
        if self.gathered_loop(loop, out):
            return
        out.comment(self.fn, loop.line)
        self.serial_fused_loop(loop, out)

    def parallelize(self, loop, out, start, two_pass=False):
        """The prange loop emitted from ``out.lines[start]`` in parallel chunks where
        ad/parallel.py's rule allows, else left serial with a comment saying so. ``two_pass``:
        the forward loop of the two-pass schedule (codegen's ``two_pass_parallel``)."""
        keep = self.chunk_tapes(loop) if two_pass else None
        if keep is not None and self.dry_run is keep:
            return                   # (its texts tried: chunk_tapes.py)
        if keep is not None:
            # its chunks keep their tapes for the reverse (chunk_tapes.py)
            chunked = parallel.rewrite(self, loop, out.lines[start:], out.indent, two_pass,
                                       keep=dataclasses.replace(keep, reverse=False))
            assert chunked is not None, "the forward's text changed since the dry run"
        else:
            chunked = parallel.rewrite(self, loop, out.lines[start:], out.indent, two_pass,
                                       slots=self.slotted(loop) if two_pass else None) \
                if not two_pass or self.two_pass_parallel(loop) else None
        if chunked is not None:
            out.lines[start:] = chunked
            self.parallel = True
        elif self.serial:
            out.lines.insert(start, "    " * out.indent + "# prange: serial (this kernel binds an "
                             "array name to several arrays, which Numba's parallel analysis "
                             "mis-sizes: ad/parallel.py rebinds_arrays)")
        elif two_pass:
            out.lines.insert(start, "    " * out.indent + "# prange: serial in this schedule "
                             "(ad/parallel.py)")
        else:
            out.lines.insert(start, "    " * out.indent + "# prange: serial here (the "
                             "iterations carry state the parallel schedule does not split)")

    def serial_fused_loop(self, loop, out):
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

    def gathered_loop(self, loop, out, in_chunks=False):
        """A stencil-shaped reduction loop in two passes: the forward loop, then its reverse as
        a gather (ad/gather.py), which vectorises where the fused pass's scatter (``g[i] += a;
        g[i + 1] += b``) carried a dependence from one iteration to the next. Whether it applies
        is decided on the text of the reverse loop written the two-kernel way, with each
        iteration's forward values recomputed; the accumulators' own statements stay in the
        forward loop only (the reverse never reads them: ad/fusion.py). ``in_chunks``: a prange
        loop, both passes in chunks on the threads (the forward loop's accumulators summed per
        chunk by ad/parallel.py, the gather's elements split between the chunks), or
        nothing."""
        if self.device is not None or loop is not self.top_fused_loop or loop.step != ir.Const(1) \
                or not all(isinstance(x, (ir.Assign, ir.Store)) for x in loop.body) \
                or not gather.GATHER or self.loop_views(loop):
            return False
        assigned = {x.target for x in loop.body if isinstance(x, ir.Assign)}
        carried = {v for v in assigned if fusion.exposed(loop.body, v)[0]}
        # the gathered reverse leaves the loop's names as the scatter would (its first
        # iteration's values), not as the forward loop did: nothing after the loop may read them
        at = next(k for k, x in enumerate(self.fn.body) if x is loop)
        later = set().union(*[stmt_reads(x) for x in ir.walk(self.fn.body[at + 1:])])
        if later & ((assigned - carried) | {loop.var}):
            return False
        if any(isinstance(x, ir.Store) for x in loop.body):
            return False
        local = [x for x in loop.body if not (x.target in carried or carried & {
            a.id for a in x.expr.atoms() if isinstance(a, ir.Name)})]
        dropped = assigned - {x.target for x in local}
        n, j = f"_n{loop.id}", f"_j{loop.id}"
        trial = _Out()
        trial.indent = out.indent
        trial.add(f"{j} = {n} - 1")
        trial.add(f"while {j} >= 0:")
        trial.indent += 1
        trial.add(f"{loop.var} = {ir.affine_src(loop.start, j, loop.step)}")
        for x in local:
            self.stmt_fwd(x, trial, True)
        first_rev = len(trial.lines)
        for x in reversed(loop.body):
            if id(x) in self.plan.reverse_relevant:
                self.stmt_rev(x, trial)
        # An accumulator's adjoint is the same in every iteration (ad/fusion.py): its reverse
        # takes it out and adds it back (``_g = d_s; d_s = -0.0; ...; d_s += _g``); the
        # gathered reverse only reads it.
        for v in carried:
            dv = self.names.adj.get(v)
            if dv is not None:
                trial.lines[first_rev:] = [
                    line for line in trial.lines[first_rev:]
                    if not re.fullmatch(rf"\s*{re.escape(dv)} (= -0\.0|\+= .*)", line)]
        # (comments left out: they quote the source line, which names what the loop drops)
        reverse_text = "\n".join(line for line in trial.lines[first_rev:]
                                  if not line.lstrip().startswith("#"))
        if any(re.search(rf"\b{re.escape(v)}\b", reverse_text) for v in dropped):
            return False
        trial.add(f"{j} -= 1")
        trial.lines = [line for line in trial.lines if not line.strip().startswith("#")]
        fresh = gather.rewrite(self, trial, 0, [loop], in_chunks, _untouched_zeros(out.lines))
        if fresh is None:
            return False
        forward = _Out()
        forward.indent = out.indent
        forward.add(f"for {loop.var} in {ir.range_src(loop.start, loop.stop, loop.step)}:")
        forward.indent += 1
        for x in loop.body:
            self.stmt_fwd(x, forward, True)
        forward.indent -= 1
        if in_chunks:
            chunked = parallel.rewrite(self, loop, forward.lines, out.indent)
            if chunked is None:
                return False
            forward.lines = chunked
            self.parallel = True
        for k, line in enumerate(out.lines):
            m = parallel.ZEROS.fullmatch(line)
            if m and m.group(1) in fresh:
                # the gather writes every element (gather.rewrite): no memset first
                out.lines[k] = line.replace("_zeros_like(", "_empty_like(", 1)
        out.comment(self.fn, loop.line)
        out.lines += forward.lines
        out.add(f"{n} = _trip({loop.start.src()}, {loop.stop.src()}, 1)")
        for line in trial.lines:
            out.lines.append(line)
        # The forward loop now computes the accumulators alone. Where nothing after it reads
        # them but a ``return s``, it computes the value alone (Kernels.value_loop; a chunked one
        # is a call of a parallel function, which LLVM keeps; ``return log(s)`` has a reverse
        # that reads ``s``)
        if not in_chunks and all(
                (isinstance(x, ir.Return) and isinstance(x.value, ir.Name))
                or not stmt_reads(x) & carried for x in ir.walk(self.fn.body[at + 1:])):
            self.value_loop = True
        return True


def _untouched_zeros(lines):
    """The adjoint arrays the kernel's header allocates with ``_zeros_like`` that no line after
    the allocation mentions: still all zeros, and no other name refers to them."""
    found = set()
    for k, line in enumerate(lines):
        m = parallel.ZEROS.fullmatch(line)
        if m and not any(re.search(rf"(?<![\w.]){re.escape(m.group(1))}\b", later)
                         for later in lines[k + 1:]):
            found.add(m.group(1))
    return found
