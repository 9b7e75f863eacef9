"""The reverse of a prange loop in parallel chunks, in the two-pass schedule.

A mixin of the kernel generator (``codegen._Gen``): which loops (``two_pass_parallel``: the
shape ``prange_shapes.two_pass_shape`` allows and every save in slots of its iteration's own;
else chunk tapes, ad/chunk_tapes.py), the reverse loop's text for ``parallel.rewrite`` to split
(``chunks_rev_text``) and what follows the chunks (``chunks_end``). The forward's chunks are
made where the forward loop is emitted (``fused_schedule.parallelize``).
"""

from numba.core import types as nbt

from . import fusion, ir, parallel, prange_shapes


class ChunkedReverse:
    """Methods of ``_Gen`` for the reverse of prange loops in chunks."""

    def two_pass_parallel(self, loop):
        """Whether the two-pass schedule may run the prange ``loop``'s forward and reverse in
        parallel chunks (ad/parallel.py): its shape allows (``prange_shapes.two_pass_shape``),
        on the CPU, and every value it saves is saved in slots of its iteration's own
        (``slotted``)."""
        return (loop.parallel and self.device is None and not self.fusing and not self.plain
                and loop.snapshots is None and not self.loop_views(loop)
                and prange_shapes.two_pass_shape(self.fn.body, loop)
                and self.independent_saves(loop))

    def independent_saves(self, loop):
        """Whether every value ``loop`` saves is saved in slots (``slotted``) and none is read
        by the next iteration before the body assigns it again (``t = 0.5 * t + x[i]`` carries
        ``t`` from one iteration to the next: its chunks could not start apart)."""
        slots = self.slotted(loop)
        return slots is not None and not any(fusion.exposed(loop.body, x.target)[0]
                                             for saves in slots.values() for x in saves)

    def parallel_reverse(self, loop, out):
        """The reverse of a prange loop the two-pass schedule splits into chunks (its
        iterations independent: any order), emitted into ``out``; False where it does not."""
        if self.chunk_tapes(loop):
            return self.chunk_rev(loop, out)
        if not self.two_pass_parallel(loop):
            return False
        start, indent = len(out.lines), out.indent
        slots = self.slotted(loop)
        self.chunks_rev_text(loop, out, slots)
        chunked = parallel.rewrite(self, loop, out.lines[start:], indent, two_pass=True,
                                   slots=slots, reverse=True)
        if chunked is None:
            del out.lines[start:]
            return False
        out.lines[start:] = chunked
        self.parallel = True
        self.chunks_end(loop, out)
        return True

    def chunks_rev_text(self, loop, out, slots=None):
        """The text of a prange loop's reverse, its iterations in any order, for
        ``parallel.rewrite`` to split into chunks (each chunk's iterations last to first);
        ``slots``: the values it saves in slots of each iteration's own (``slotted``)."""
        for name in [a.id for a in (loop.start, loop.stop, loop.step) if isinstance(a, ir.Name)]:
            out.read(name)
        out.add(f"for {loop.var} in {ir.range_src(loop.start, loop.stop, loop.step)}:")
        out.indent += 1
        out.local.append({loop.var})
        for key, saves in sorted((slots or {}).items()):
            # this iteration's values from its slots (parallel.rewrite sets _k_<key> to where
            # the iteration began); the pops below read the values from before it
            for at, x in enumerate(saves):
                out.add(f"{x.target} = _tape_{key}[_k_{key} + {len(saves) + at}]")
            out.add(f"_k_{key} += {len(saves)}")
            out.read(f"_tape_{key}")
            out.read(f"_k_{key}")
            for x in saves:
                out.read(x.target)   # the last iteration's, put back first (parallel._chunked)
        self.recompute(loop, out)
        self.block_rev(loop.body, out)
        out.local.pop()
        out.indent -= 1

    def chunks_end(self, loop, out):
        """After the chunks of a prange loop's reverse, as the serial reverse ends (a prange in
        a time loop: its trip count and variable from the step before, the array it writes as
        the step before left it)."""
        if id(loop) in self.plan.in_loop:
            self.pop(out, f"_n{loop.id}", nbt.int64)
        if id(loop) in self.plan.pushes:
            self.pop(out, loop.var, self.pushed_type(loop))
        for w in reversed(self.snapshots(loop)):
            self.restore(out, w)         # the elements the loop overwrote, saved whole
