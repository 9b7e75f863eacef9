"""``nr.checkpointed``: the marker of a time loop whose reverse pass recomputes instead of saving.

    for t in nr.checkpointed(range(steps), snapshots=20):
        ...one time step...

Run as plain Python or compiled by Numba it is the range itself. Differentiated, the loop's
forward saves nothing per step and its pullback follows a binomial checkpointing schedule
(ad/revolve.py): peak memory ``snapshots + 1`` copies of the loop's state plus one step's tape,
whatever the number of steps, for at most a few extra runs of each step (docs/ad-engine.md,
"Checkpointed loops").
"""

from numba.extending import overload


def checkpointed(steps, snapshots=16):
    """Mark ``for t in checkpointed(range(...), snapshots=k)`` for checkpointing (see module)."""
    if not isinstance(steps, range):
        raise TypeError("nr.checkpointed takes a range: for t in nr.checkpointed(range(n), "
                        "snapshots=k)")
    return steps


@overload(checkpointed)
def _checkpointed_impl(steps, snapshots=16):
    # Numba compiles the marked loop as the plain loop over the range (only this function of
    # ours is overloaded: nothing else Numba compiles changes)
    def impl(steps, snapshots=16):
        return steps
    return impl
