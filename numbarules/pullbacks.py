"""``nr.pullback``: the value of a function and a pullback to call later with any cotangent.

The forward kernel runs at once and hands its residuals to Python; each call of the pullback
runs the pullback kernel on them, compiled now and kept (the world the pullback was made in).
The cotangent is checked against the result's kind and shape, a rule's tangents against its
arguments' shapes.
"""

import copy

import numba
import numpy as np

from . import compile_flags, kernels, rules
from .ad import kinds
from .api import Gradient, _positional, spec_for_call
from .errors import RuleError
from .structs import Tangent, isstruct


def pullback(f, *args, boundscheck=False, fastmath=False):
    """``(y, pb)``: the value of ``f(*args)`` and its pullback; ``pb(dy)`` returns one tangent per
    argument (None for integers and booleans).

    ``dy`` must have the kind and shape of ``y`` (a float for a float, an array of the same
    shape for an array, a tuple or ``nr.Tangent`` of those for a tuple or struct); anything else
    raises ValueError naming ``f``. A rule's tangents are checked against the arguments' shapes
    (``nr.RuleError``). ``boundscheck``, ``fastmath``: as for ``nr.grad``.
    """
    given = len(args)
    args = _positional(f.f if isinstance(f, Gradient) else f, args, "pullback")
    spec = spec_for_call(f, args, flags=compile_flags.Flags(boundscheck, fastmath))
    y, residuals = spec.fwd(*args)
    name = f"pullback({getattr(f, '__qualname__', f)})"
    bwd = _frozen_pullback(spec, residuals, y)
    # A reverse pass that restores the arrays the forward overwrote (or pops saved references)
    # leaves its residuals as they were before the forward: run again, it would start from the
    # wrong arrays (silently wrong). Such a pullback keeps a copy of the arguments, and each
    # call after the first runs the forward again on it.
    state = {"residuals": residuals, "fresh": True,
             "args": _copied(args) if spec.kernels.changes_residuals else None}
    fwd = _frozen_forward(spec, args) if state["args"] is not None else None

    def pb(dy):
        dy = _cotangent(name, y, dy)
        if not state["fresh"] and state["args"] is not None:
            state["residuals"] = fwd(*state["args"])[1]
        state["fresh"] = False
        tangents = bwd(state["residuals"], dy)
        if isinstance(spec.target, rules.Rule):
            for k, (a, t) in enumerate(zip(args, tangents)):
                _check_tangent(f"{spec.target!r}", f"tangent {k}", a, t)
        return tangents[:given]     # one per argument passed (defaults are not)
    pb.__qualname__ = name
    return y, pb


def _copied(args):
    """A deep copy of ``args`` that shares the functions among them (passed as values)."""
    return copy.deepcopy(args, {id(a): a for a in args if callable(a)})


def _frozen_forward(spec, args):
    """The forward kernel as compiled now for ``args`` (the world the pullback was made in, as
    _frozen_pullback), or its dispatcher where that compiled version is not found."""
    try:
        entry = spec.fwd.overloads.get(tuple(numba.typeof(a) for a in args))
    except (ValueError, TypeError):
        entry = None
    return entry.entry_point if entry is not None else spec.fwd


def _frozen_pullback(spec, residuals, y):
    """The pullback kernel as compiled now, for the cotangent ``_cotangent`` makes of any ``dy``.

    A pullback runs in the world it was made in (Julia's world age): a method or rule added
    later recompiles what depends on it, but this ``pb`` keeps the code its forward ran with,
    and calling it never compiles anything. Where the cotangent's type has no compiled version
    (a result of no float kind), the kernel is called through its dispatcher while it is current.
    """
    try:
        ty = numba.typeof(y)
        sig = (numba.typeof(residuals), kernels.tangent_type(ty))
    except ValueError:
        return spec.bwd
    if not kinds.differentiable(ty):
        return spec.bwd
    spec.bwd.compile(sig)
    return spec.bwd.overloads[sig].entry_point


def _cotangent(name, y, dy, where="the cotangent"):
    """``dy`` checked against the result ``y`` it is the cotangent of (and converted to y's
    float type); ValueError naming the pullback otherwise."""
    def refuse(expected):
        raise ValueError(f"{name}: {where} must be {expected}, like the result, not "
                         f"{describe(dy)}")
    if isinstance(y, np.ndarray):
        if not isinstance(dy, np.ndarray) or dy.shape != y.shape or dy.dtype.kind not in "fiu":
            refuse(f"an array of shape {y.shape}")
        # the result's own type (dtype, layout): the pullback was compiled for it
        if y.flags.f_contiguous and not y.flags.c_contiguous:
            return np.asfortranarray(dy, dtype=y.dtype)
        return np.ascontiguousarray(dy, dtype=y.dtype)
    if isinstance(y, (float, np.floating)):
        if isinstance(dy, (bool, np.bool_)) or not isinstance(dy, (int, float, np.integer,
                                                                   np.floating)):
            refuse("a real number")
        return np.float32(dy) if isinstance(y, np.float32) else float(dy)
    if isinstance(y, tuple):
        kind = Tangent[type(y)] if isstruct(type(y)) else tuple
        if not isinstance(dy, tuple) or len(dy) != len(y) or (
                kind is not tuple and type(dy) is not kind):
            refuse(f"a {kind.__qualname__} of {len(y)} entries")
        parts = [_cotangent(name, a, b, f"{where}[{k}]") for k, (a, b) in enumerate(zip(y, dy))]
        return tuple(parts) if kind is tuple else kind(*parts)
    if dy is not None and not isinstance(dy, (int, float, np.integer, np.floating)):
        refuse("None (the result carries no tangent)")
    return None


def _check_tangent(rule, what, arg, t):
    """A rule's tangent ``t`` for argument ``arg``: arrays of the argument's shape."""
    if t is None:
        return
    if isinstance(arg, np.ndarray):
        if not isinstance(t, np.ndarray) or t.shape != arg.shape:
            raise RuleError(f"{rule}: {what} is {describe(t)}, but the argument is an array "
                            f"of shape {arg.shape}")
    elif isinstance(arg, tuple) and isinstance(t, tuple):
        for k, (a, b) in enumerate(zip(arg, t)):
            _check_tangent(rule, f"{what}[{k}]", a, b)


def describe(v):
    if isinstance(v, np.ndarray):
        return f"a {v.dtype} array of shape {v.shape}"
    return f"{type(v).__name__} {v!r:.60}"
