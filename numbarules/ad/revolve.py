"""The reverse schedule of a checkpointed loop (``nr.checkpointed``): binomial checkpointing.

A loop of ``n`` steps whose state (the arrays and scalars the steps carry) fits ``snaps`` times
in memory is reversed without a tape that grows with ``n``. The forward runs the steps plainly
and keeps only the state at the loop's entry (slot 0). The pullback then follows a schedule of
four operations on a working state:

    LOAD k      the working state := slot k
    SAVE k      slot k := the working state
    ADVANCE a b run steps a .. b-1 plainly (nothing saved)
    TURN a      run step a saving what its reverse reads (a tape of one step), then its reverse

The schedule is Griewank's binomial one (Revolve, ACM TOMS 26(1), 2000, written from the
paper): with ``s`` free slots and ``r`` recomputations per step at most, ``beta(s, r) =
C(s + r, s)`` steps can be reversed. To reverse steps [a, b) from a saved state at a: advance to
``m = b - min(beta(s - 1, r), b - a - 1)``, save the state there in a free slot, reverse [m, b)
with one slot fewer, then reverse [a, m) with the slots back (``beta(s, r) = beta(s, r - 1) +
beta(s - 1, r)`` keeps both parts within their budgets). ``r`` is the least with
``beta(s, r) >= n``: for 2,000 steps and 100 slots, r = 2 (each step advanced about twice
besides the forward, then turned); with 20 slots r = 4 (3.7 advances per step, measured).

Peak memory: ``snaps + 1`` states and one step's tape, whatever ``n``.

The schedule is an int64 array of rows (op, a, b), made in compiled code before the reverse loop
(``_schedule(n, snaps)``) so a checkpointed function differentiates inside other compiled code.
"""

import numba
import numpy as np

LOAD, SAVE, ADVANCE, TURN = 0, 1, 2, 3


@numba.njit(cache=False)
def _beta(s, r):
    """C(s + r, s), saturated at 2**62 (only compared with step counts)."""
    out = 1
    for k in range(1, s + 1):
        out = out * (r + k) // k
        if out > 2 ** 62 // (r + s + 1):
            return 2 ** 62
    return out


@numba.njit(cache=False)
def _schedule(n, snaps):
    """The rows (op, a, b) that reverse ``n`` steps with ``snaps`` free slots besides slot 0,
    which holds the state before step 0. Rows come out in execution order."""
    if snaps < 0:
        snaps = 0
    rows = []
    if n <= 0:
        return np.zeros((0, 3), np.int64)
    r = 0
    while snaps > 0 and _beta(snaps, r) < n:
        r += 1
    # An explicit stack of ranges to reverse, each (a, b, free slots, the slot holding the
    # state at a, recomputations allowed), popped last-in first-out: the right part first.
    stack = [(0, n, snaps, 0, r)]
    while len(stack) > 0:
        a, b, s, slot, rr = stack.pop()
        if b - a == 1:
            rows.append((LOAD, slot, 0))
            rows.append((TURN, a, 0))
            continue
        if s == 0:
            # No free slot: each step from the saved state (quadratic: snapshots=0)
            for k in range(b - 1, a - 1, -1):
                rows.append((LOAD, slot, 0))
                if k > a:
                    rows.append((ADVANCE, a, k))
                rows.append((TURN, k, 0))
            continue
        while rr > 0 and _beta(s, rr - 1) >= b - a:
            rr -= 1
        right = min(_beta(s - 1, rr), b - a - 1)
        m = b - right
        free = slot + 1
        rows.append((LOAD, slot, 0))
        rows.append((ADVANCE, a, m))
        rows.append((SAVE, free, 0))
        stack.append((a, m, s, slot, rr - 1 if rr > 0 else 0))
        stack.append((m, b, s - 1, free, rr))
    out = np.empty((len(rows), 3), np.int64)
    for k in range(len(rows)):
        op, x, y = rows[k]
        out[k, 0] = op
        out[k, 1] = x
        out[k, 2] = y
    return out
