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

The pullback makes the schedule one operation at a time in compiled code (``_rv_start``,
``_rv_next``, below), so a checkpointed function differentiates inside other compiled code and in
device code, where nothing can be allocated; ``_schedule(n, snaps)`` collects the rows (op, a, b)
for tests.
"""

import math

import numba
import numpy as np

from ..numba_glue import njit_unliteral

LOAD, SAVE, ADVANCE, TURN = 0, 1, 2, 3


# Compiled once for all constant arguments (njit_unliteral) and kept in Numba's disk cache
# (they depend on nothing outside this file).
@njit_unliteral(cache=True)
def _beta(s, r):
    """C(s + r, s), saturated at 2**62 past 2**40 (only compared with step counts).

    The pullback calls this a few times per range it splits, about once per step, so it is
    made cheap for device code, where a 64-bit integer division costs dozens of instructions:
    the loop runs over the smaller of s and r (C(s + r, s) = C(s + r, r)), in float64, rounding
    each partial binomial (an integer below 2**40, exact to far better than 1/2)."""
    k_max, m = (s, r) if s < r else (r, s)
    out = 1.0
    for k in range(1, k_max + 1):
        out = math.floor(out * (m + k) / k + 0.5)
        if out > 1099511627776.0:        # 2**40
            return 2 ** 62
    return int(out)


# The schedule is made one row at a time (``_rv_start``, ``_rv_next``) from a small stack of
# pending work, so that a pullback needs no array of rows: device code cannot allocate one, and
# the stack's depth is bounded by the slot count (below). A record is the four operations above,
# RANGE (reverse steps [a, b) from the state in ``slot`` with ``s`` free slots and ``r``
# recomputations each) or QUAD (reverse [a, b) with no free slot: each step from the saved
# state), stored as four int64 (a, b, r, and kind, s, slot packed in 3 + 30 + 30 bits): on a
# GPU every thread's stack lives in local memory, whose traffic this keeps small.
RANGE, QUAD = 4, 5
LOAD_TURN = 6       # what _rv_next returns for LOAD a then TURN b: the schedule's leaves
STACK_SPARE = 8     # rows besides one per free slot: at most 4 operations and a QUAD or RANGE
STACK_COLUMNS = 4
_SLOT_BITS = 2 ** 30 - 1        # slot counts past 2**30 would not be allocated anyway


def stack_rows(snaps):
    """The rows of the stack ``_rv_start`` needs for ``snaps`` free slots (at most: a pending
    left part per slot on the path of right parts, then one expansion's records)."""
    return max(snaps, 0) + STACK_SPARE


@njit_unliteral(cache=True)
def _rv_push(stack, top, kind, a, b, s, slot, r):
    stack[top, 0] = a
    stack[top, 1] = b
    stack[top, 2] = r
    stack[top, 3] = kind | (s << 3) | (slot << 33)
    return top + 1


@njit_unliteral(cache=True)
def _rv_start(stack, n, snaps):
    """The stack's height after pushing the reversal of all ``n`` steps (0: nothing to do)."""
    if n <= 0:
        return 0
    if snaps < 0:
        snaps = 0
    r = 0
    while snaps > 0 and _beta(snaps, r) < n:
        r += 1
    return _rv_push(stack, 0, RANGE, 0, n, snaps, 0, r)


@njit_unliteral(cache=True)
def _rv_next(stack, top):
    """(op, a, b, new height): the next operation of the schedule (pops and expands records
    until an operation is on top). Call while the height is positive."""
    while True:
        top -= 1
        a, b, rr, packed = stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3]
        kind, s, slot = packed & 7, (packed >> 3) & _SLOT_BITS, packed >> 33
        if kind < RANGE:
            return kind, a, b, top
        # Records are pushed in the reverse of the order they run in; each expansion begins
        # with a LOAD, returned at once rather than pushed and popped (with the TURN that
        # follows it when nothing comes between: one record fewer per step in local memory).
        if b - a == 1:
            return LOAD_TURN, slot, a, top
        if kind == QUAD or s == 0:
            # no free slot: the last step from the saved state, then the others
            top = _rv_push(stack, top, QUAD, a, b - 1, 0, slot, 0)
            top = _rv_push(stack, top, TURN, b - 1, 0, 0, 0, 0)
            top = _rv_push(stack, top, ADVANCE, a, b - 1, 0, 0, 0)
        else:
            while rr > 0 and _beta(s, rr - 1) >= b - a:
                rr -= 1
            m = b - min(_beta(s - 1, rr), b - a - 1)
            top = _rv_push(stack, top, RANGE, a, m, s, slot, rr - 1 if rr > 0 else 0)
            top = _rv_push(stack, top, RANGE, m, b, s - 1, slot + 1, rr)
            top = _rv_push(stack, top, SAVE, slot + 1, 0, 0, 0, 0)
            top = _rv_push(stack, top, ADVANCE, a, m, 0, 0, 0)
        return LOAD, slot, 0, top


@numba.njit(cache=False)
def _schedule(n, snaps):
    """The rows (op, a, b) that reverse ``n`` steps with ``snaps`` free slots besides slot 0,
    which holds the state before step 0, in execution order (for tests and ``nr.code`` readers:
    pullbacks step through ``_rv_next`` themselves)."""
    stack = np.empty((max(snaps, 0) + STACK_SPARE, STACK_COLUMNS), np.int64)
    top = _rv_start(stack, n, snaps)
    rows = []
    while top > 0:
        op, a, b, top = _rv_next(stack, top)
        if op == LOAD_TURN:
            rows.append((LOAD, a, 0))
            rows.append((TURN, b, 0))
        else:
            rows.append((op, a, b))
    out = np.empty((len(rows), 3), np.int64)
    for k in range(len(rows)):
        out[k, 0] = rows[k][0]
        out[k, 1] = rows[k][1]
        out[k, 2] = rows[k][2]
    return out
