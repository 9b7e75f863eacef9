"""The schedule of a prange loop whose chunks keep tapes of their own from forward to reverse.

A mixin of the kernel generator (``codegen._Gen``). A loop over rows with a loop inside (the
row-wise map ``for i in prange(n): for j in range(m): out[i, j] = f(x[i, j])``), a triangle
``range(i + 1)`` or a branch saves, in the two-pass schedule, values whose places on the tape
depend on what every iteration before it saved: the slots of ad/parallel.py cannot lay them out.
Its iterations are independent (Numba's rule for prange), so each chunk of iterations may run
the two-pass schedule on its own: its forward saves on a tape of the chunk's own, kept at the
end of a list per tape (``_kt_f8_<k>``, a place per chunk), with what its last iteration leaves
in the variables its reverse starts from (``ends``: a value saved before it is overwritten, a
nested loop's trip count); the chunk's reverse takes that tape back and pops it, its iterations
last to first. Both passes split the iterations alike: the forward takes the reverse's partition
(contiguous, or every nch-th iteration where an adjoint array is written away from the
iteration's own index) and chunk count, which it pushes on the int tape for the reverse. The work
is the serial two-pass schedule's, on every thread; the memory, its tape.

Which loops: ``prange_shapes.row_loops`` (the shape, known to the analysis) and a dry run of both
passes' texts through ``parallel.rewrite`` (``chunk_tapes``), else the two-pass schedule, serial.
"""

import copy

from numba import types as nbt

from . import ir, parallel
from .dataflow import stmt_reads
from .emit import _Out
from .tape import _TAPE_KEYS

_DTYPES = {key: t for t, key in _TAPE_KEYS.items()}


class ChunkTapes:
    """Methods of ``_Gen`` for prange loops whose chunks keep tapes of their own."""

    def chunk_tapes(self, loop):
        """The ``parallel.Keep`` both passes of ``loop`` share, or None (the two-pass schedule,
        serial). Forward and reverse decide alike: from the texts of both, made once."""
        if not isinstance(loop, ir.For) or id(loop) not in (self.plan.rows or ()) \
                or self.device is not None or self.fusing or self.plain or self.serial \
                or self.loop_views(loop):
            return None
        if self.dry_run is not None:
            return self.dry_run if self.dry_run.k == loop.id else None
        memo = self.__dict__.setdefault("_chunk_tapes", {})
        if id(loop) not in memo:
            memo[id(loop)] = self._try_chunk_tapes(loop)
        return memo[id(loop)]

    def _try_chunk_tapes(self, loop):
        keep = parallel.Keep(loop.id, reverse=True)
        self.dry_run = keep
        try:
            self.tape_key(nbt.int64)               # the chunk count's tape
            rev = _Out()
            self.chunks_rev_text(loop, rev)
            if parallel.rewrite(self, loop, rev.lines, 1, two_pass=True, reverse=True,
                                keep=keep) is None:
                return None
            fwd = _Out()
            self.stmt_fwd(loop, fwd, False)
            head = f"    for {loop.var} in "
            at = next((k for k, ln in enumerate(fwd.lines) if ln.startswith(head)), None)
            keep = copy.copy(keep)
            keep.reverse = False
            if at is None or parallel.rewrite(self, loop, fwd.lines[at:], 1, two_pass=True,
                                              keep=keep) is None:
                return None
        finally:
            self.dry_run = None
        keep.reverse, keep.fixed = True, True
        return keep

    def chunk_lists(self):
        """name -> the element type of each list of kept chunk tapes (tape_inits)."""
        out = {}
        for x in ir.walk(self.fn.body):
            keep = self.chunk_tapes(x) if isinstance(x, ir.For) and x.parallel else None
            for key in (keep.keys if keep else ()):
                out[f"_kt_{key}_{x.id}"] = nbt.Array(_DTYPES[key], 1, "C")
        return out

    def chunk_restored(self, loop):
        """The names the loop overwrites whose values from before it something outside the loop
        reads (the plan saves them at their first assignment, which in a chunk saves the
        chunk's own start): pushed before the forward's chunks, popped after the reverse's."""
        inside = list(ir.walk(loop.body))
        ids = {id(x) for x in inside}
        saved = {x.target for x in inside if isinstance(x, ir.Assign) and id(x) in self.plan.pushes}
        saved |= {x.var for x in inside if isinstance(x, ir.For) and id(x) in self.plan.pushes}
        outside = {n for x in ir.walk(self.fn.body) if id(x) not in ids and x is not loop
                   for n in stmt_reads(x)}
        return sorted(saved & outside)

    def chunk_rev(self, loop, out):
        """The reverse of a loop with chunk tapes, emitted into ``out``."""
        keep = self.chunk_tapes(loop)
        start, indent = len(out.lines), out.indent
        self.chunks_rev_text(loop, out)
        chunked = parallel.rewrite(self, loop, out.lines[start:], indent, two_pass=True,
                                   reverse=True, keep=copy.copy(keep))
        assert chunked is not None, "the reverse's text changed since the dry run"
        out.lines[start:] = chunked
        self.parallel = True
        for name in ["_tape_i8", "_k_i8"] + [f"_kt_{key}_{loop.id}" for key in keep.keys]:
            out.read(name)
        for v in reversed(self.chunk_restored(loop)):
            self.pop(out, v, self.types[v])
        self.chunks_end(loop, out)
        return True
