"""``fastmath=True``'s rewrite of a normalised primal (compile_flags.Flags): ``exp`` and ``tanh``
of a float64 call vmath's branch-free versions, which vectorise inside a loop where glibc's are
a call per element (this llvmlite has no SVML).

Why only under fastmath: the loops that carry a float sum (``t += math.exp(...)``, the
reverse's adjoint sums) vectorise only when the sum may be reassociated, and a vmath function
in a loop that stays scalar is slower than glibc's (logsumexp's row loop: 35 ms against 27).
The rule of each call is still the one of ``math.exp`` / ``math.tanh`` (the Call keeps its
``func``; only the name the kernel calls changes), so derivatives are unchanged.
"""

import math
from dataclasses import replace

import numba
import numpy as np

from . import ir

_LANES = {math.exp: "_vexp", np.exp: "_vexp", math.tanh: "_vtanh", np.tanh: "_vtanh"}


def names():
    """The names the rewritten kernels call, for their namespace."""
    from ..primitives import vmath
    return {"_vexp": vmath.exp_lane, "_vtanh": vmath.tanh_lane}


def rewrite(fn, types):
    """``fn`` with each float64 ``exp`` / ``tanh`` call renamed to vmath's (see above)."""
    def lane(s):
        e = getattr(s, "expr", None)
        if isinstance(s, ir.Assign) and isinstance(e, ir.Call) and not e.kwargs \
                and len(e.args) == 1 and _is_float64(e.args[0], types):
            name = _lane_name(e.func)
            if name:
                return replace(s, expr=replace(e, fname=name))
        return s
    return replace(fn, body=ir.map_statements(fn.body, lane))


def _lane_name(func):
    try:
        return _LANES.get(func)
    except TypeError:          # an unhashable callable is never one of the lanes
        return None


def _is_float64(a, types):
    if isinstance(a, ir.Name):
        return types.get(a.id) == numba.float64
    return isinstance(a, ir.Const) and type(a.value) is float
