"""Small compiled helpers the generated kernels call: trip counts and tape growth."""

import numba
import numpy as np


@numba.njit(inline="always")
def _trip(start, stop, step):
    """len(range(start, stop, step)), the trip count the reverse loop replays."""
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // (-step))


@numba.njit
def _grow(buf):
    new = np.empty(2 * buf.shape[0] + 16, buf.dtype)
    new[:buf.shape[0]] = buf
    return new


@numba.njit
def _reserve(buf, used, more):
    """A tape with room for ``more`` pushes after ``used``: grows at most once per loop entry."""
    if used + more <= buf.shape[0]:
        return buf
    new = np.empty(max(2 * buf.shape[0], used + more), buf.dtype)
    new[:used] = buf[:used]
    return new


@numba.njit(inline="always")
def _iadd(acc, x):
    """acc += x in place (an array field of an immutable Tangent)."""
    acc += x


HELPERS = {"_trip": _trip, "_grow": _grow, "_reserve": _reserve, "_iadd": _iadd, "_np": np}
