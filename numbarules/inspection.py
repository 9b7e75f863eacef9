"""What a gradient generated and what it saves: ``nr.code`` and ``nr.ad_stats``."""

import numba
import numpy as np

from . import targets
from .ad import kinds
from .api import Gradient, _positional, spec_for_call


def code(f, *args, kind="forward"):
    """The generated source of ``f``'s kernels at the types of ``args``. ``f`` may also be an
    ``nr.grad`` / ``nr.value_and_grad`` object: its function's kernels for its ``argnums``, or
    an ``nr.hvp`` object (``args`` then end with the direction): the kernels of the gradient of
    the directional derivative, whose "primal" is ``f``'s tangent kernel.

    ``kind``: "forward" (primal plus saves), "pullback" (the reverse sweep), "vjp" (both fused),
    "primal" (the normalised primal the two are built from), "jvp" (forward mode's tangent
    kernel, tangents for every float argument), or "driver" (the vjp as the gradient Python
    calls runs it: a prange loop's chunk loops as functions of their own, compiled with
    ``parallel=True``, after it; ad/outline.py).
    """
    kinds_ = ("forward", "pullback", "vjp", "primal", "jvp", "driver")
    if kind not in kinds_:
        raise ValueError(f"kind must be one of {sorted(kinds_)}, not {kind!r}")
    from . import higher
    if isinstance(f, higher.Hvp):
        # nr.hvp(f): the kernels of the gradient of f's directional derivative
        f, args = f.gradient(args)
    if kind == "jvp":
        from . import tangent_kernels
        g = f.f if isinstance(f, Gradient) else f
        args = _positional(g, args, "code")
        argtypes = tuple(numba.typeof(a) for a in args)
        target, _ = targets.target_for(g, argtypes)
        mask = tuple(kinds.differentiable(t) for t in argtypes)
        targets.check_arguments(g, argtypes, mask)
        return tangent_kernels.specialize(target, argtypes, mask).source
    spec = spec_for_call(f, args, caller="code")
    if kind == "driver":
        # nr.grad's own kernel returns no value where a loop runs for the value alone
        alone = isinstance(f, Gradient) and not f.with_value and spec.kernels.value_loop
        return _driver_source(spec, value=not alone)
    sources = {"forward": spec.kernels.forward, "pullback": spec.kernels.pullback,
               "vjp": spec.kernels.vjp, "primal": spec.primal_source}
    return sources[kind]


def _driver_source(spec, value=True):
    """The vjp with the body the gradient's driver runs (``Kernels.whole_body``: a parallel
    loop's chunk loops outlined), followed by the chunk functions; the vjp itself where the
    driver calls the kernels instead. ``value=False``: nr.grad's kernel of its own, which
    returns the gradient alone (``Kernels.value_loop``)."""
    k = spec.kernels
    if not k.whole_body:
        return k.vjp
    params = ", ".join(list(spec.fn.params) + ["_dout"])
    tangents = "".join(t + ", " for t in k.whole_tangents)
    ret = (f"    return ({k.whole_value}, {tangents})\n" if value else
           f"    # no value returned: LLVM deletes the loop that computes it alone\n"
           f"    return ({tangents})\n")
    text = (f"def driver_{spec.name}({params}):\n" + "".join(line + "\n" for line in k.whole_body)
            + ret)
    return text + "".join(f"\n\n{src}" for _, src in k.chunks)


def _nbytes(v, seen):
    """Bytes a residual holds: a rule's or callee's kept residuals are tuples; the arrays a
    rebinding dropped are on lists (each array counted once: a swap puts the same two on them
    again and again)."""
    if isinstance(v, np.ndarray):
        key = (v.__array_interface__["data"][0], v.nbytes)
        if key in seen:
            return 0
        seen.add(key)
        return v.nbytes
    if isinstance(v, (tuple, numba.typed.List)):
        return sum(_nbytes(x, seen) for x in v)
    return 8


def ad_stats(f, *args, argnums=None):
    """What the reverse pass of ``nr.grad(f)`` at these arguments saves.

    ``tape_bytes``: bytes pushed on the tapes; ``residual_bytes``: tapes plus the arrays and
    scalars handed to the pullback (arrays that are inputs count too); ``fused``: whether the
    gradient runs as one fused pass (a reduction loop: nothing is saved, or at most one
    iteration's tape, reused by every iteration; both count as 0). Runs the forward kernel once.
    """
    spec = spec_for_call(f, args, argnums)
    _, residuals = spec.fwd(*args)
    names = spec.kernels.residuals
    values = dict(zip(names, residuals))
    tape = sum(int(values[f"_k_{k}"]) * values[f"_tape_{k}"].itemsize for k in spec.kernels.tape_keys)
    seen = set()
    total = sum(_nbytes(v, seen) for n, v in values.items() if not n.startswith("_tape_"))
    if spec.kernels.fused:
        # grad and value_and_grad run the fused vjp: one pass, at most one iteration saved.
        tape = total = 0
    return {"tape_bytes": tape, "residual_bytes": total + tape, "residuals": names,
            "fused": spec.kernels.fused}
