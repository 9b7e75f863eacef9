"""How a gradient's kernels are compiled: the options a user picks per gradient object
(``nr.grad(f, boundscheck=..., fastmath=...)``), carried by every AD specialization under it
(a callee's kernels are compiled with its caller's flags, and cached under them)."""

from dataclasses import dataclass

# Numba's fastmath flags behind fastmath=True: reassociation only, so that a float sum carried
# across a loop's iterations may be split into SIMD lanes (LLVM vectorises a reduction only when
# it may reorder it). Not 'nnan', 'ninf' or 'nsz': LLVM would then assume no NaN or inf exists,
# and a NaN gradient must come out as NaN, never silently as a number; not 'contract' or 'afn',
# which change single operations' rounding for no measured gain here.
FASTMATH = frozenset({"reassoc"})


@dataclass(frozen=True)
class Flags:
    boundscheck: bool = False   # every index checked (IndexError), as Numba's boundscheck=True
    fastmath: bool = False      # sums reassociated, exp and tanh from vmath (see nr.grad)

    def __post_init__(self):
        # the public keywords take any truthy value; the key of every cache holds the bools
        object.__setattr__(self, "boundscheck", bool(self.boundscheck))
        object.__setattr__(self, "fastmath", bool(self.fastmath))

    def options(self, options=None):
        """Numba's compile options ``options`` with these flags added."""
        out = dict(options or {})
        if self.boundscheck:
            out["boundscheck"] = True
        if self.fastmath:
            out["fastmath"] = set(FASTMATH)
        return out

    def _nr_fingerprint(self):
        # part of the disk cache's key of every kernel compiled under these flags
        return ("flags", self.boundscheck, self.fastmath)


DEFAULT = Flags()
