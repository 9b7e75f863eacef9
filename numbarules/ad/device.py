"""The device schedule: forward and reverse in one function for CUDA device code.

Tapes are per-thread ``cuda.local.array``s of a capacity fixed at compile time, so a device vjp
cannot hand residuals to another function; ``device_tape_demand`` counts what a function's tapes
need where that is known statically.
"""

from numba import types as nbt

from . import ir
from .emit import _Names


class DeviceVjp:
    """The device vjp (a mixin of codegen._Gen)."""

    def device_vjp(self, capacity):
        """``vjp_<name>(args, _dout) -> (y, tangents..., need)`` for CUDA device code.

        Forward and reverse run in one function, so the tapes can be ``cuda.local.array`` of
        ``capacity`` entries each (a residual tuple holding them could not leave the frame).
        ``need`` is 0, or, when a tape here or in a callee overflowed, the entries it needed (the
        tangents are NaN then). A fused reduction loop needs no tape at all.
        """
        self.device = capacity
        self.residuals = ()
        fused = self.fused_vjp()
        if fused is not None:
            return fused
        self.tapes = set()
        self.names = _Names(set(self.types) | set(self.fn.params))
        self.pullback()
        self.forward(self.residuals)
        keys = sorted(self.tapes)
        params = ", ".join(self.fn.params)
        nan = [t if t == "None" else
               ("_math.nan" if self.types.get(p) == nbt.float64 else f"_np.{self.types[p]}(_math.nan)")
               for p, t in zip(self.fn.params, self.pullback_tangents)]
        counts = ", ".join(f"_k_{k}" for k in keys)
        where = (f"tapes of {capacity} entries in local memory" if keys else "no tape")
        lines = [f"def vjp_{self.name}({params}{', ' if params else ''}_dout):",
                 f"    # forward and reverse of {self.fn.name} ({self.fn.file}:{self.fn.firstline}) "
                 f"for device code, {where}",
                 "    _need = 0"]
        lines += self.forward_lines
        if keys:
            lines += [f"    _used = max(0, {counts})",
                      f"    if _used > {capacity}:",
                      f"        return (_y, {''.join(t + ', ' for t in nan)}_used)"]
        # a checkpointed loop's steps save during the reverse, and check there (checkpointed_rev)
        overflow = f"(_y, {''.join(t + ', ' for t in nan)}_used)"
        lines += [line.replace("return _OVERFLOW", f"return {overflow}")
                  for line in self.pullback_lines]
        lines.append(f"    return (_y, {''.join(t + ', ' for t in self.pullback_tangents)}_need)")
        return "\n".join(lines) + "\n"


def device_tape_demand(fn, plan):
    """(entries a tape may need, as far as known statically; line of the first saved statement
    inside a loop whose trip count is not a constant, or None).

    Device tapes have a fixed capacity. Pushes outside loops and inside ``range`` loops with
    constant bounds are counted here (a branch counts its larger side), and a checkpointed loop
    counts one step's; a loop of unknown length that pushes needs a bound the user gives
    (``tape=``), or the device refuses it.
    """
    def count(stmts):
        n, unbounded = 0, None
        for s in stmts:
            n += (id(s) in plan.pushes) + (
                isinstance(s, (ir.For, ir.While)) and id(s) in plan.in_loop
                and id(s) in plan.reverse_relevant)
            if isinstance(s, ir.If):
                (a, ua), (b, ub) = count(s.body), count(s.orelse)
                n += max(a, b)
                unbounded = unbounded or ua or ub
            elif isinstance(s, (ir.For, ir.While)):
                inner, u = count(s.body) if isinstance(s, ir.For) else count(s.cond + s.body)
                trip = _constant_trip(s)
                if isinstance(s, ir.For) and s.snapshots is not None:
                    n += inner          # checkpointed: one step's saves at a time (its TURN)
                elif inner and trip is None:
                    u = u or _first_push_line(s.body if isinstance(s, ir.For) else s.cond + s.body,
                                             plan)
                elif inner:
                    n += trip * inner
                unbounded = unbounded or u
        return n, unbounded

    return count(fn.body)


def _constant_trip(loop):
    if isinstance(loop, ir.For) and all(isinstance(a, ir.Const) and isinstance(a.value, int)
                                        for a in (loop.start, loop.stop, loop.step)):
        return len(range(loop.start.value, loop.stop.value, loop.step.value))
    return None


def _first_push_line(stmts, plan):
    for s in ir.walk(stmts):
        if id(s) in plan.pushes or (isinstance(s, (ir.For, ir.While)) and id(s) in plan.in_loop
                                    and id(s) in plan.reverse_relevant):
            return s.line
    return None
