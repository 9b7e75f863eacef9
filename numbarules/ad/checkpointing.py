"""The code of a checkpointed loop (``nr.checkpointed``; its schedule: revolve.py).

A mixin of the kernel generator (``codegen._Gen``): the state a step carries, the forward that
keeps slot 0 and runs the steps saving nothing, and the reverse that runs the binomial schedule's
operations on the working state, on the CPU and in device code. docs/ad-engine.md, "Checkpointed
loops", says why each part is as it is.
"""

import contextlib

from numba import types as nbt

from ..errors import UnsupportedSyntaxError
from . import ir, revolve
from .dataflow import stmt_reads
from .dataflow import where as where_in


class CheckpointedLoops:
    """Methods of ``_Gen`` for ``for t in nr.checkpointed(range(...), snapshots=k)``."""


    def checkpoint_state(self, loop):
        """The names whose values at the start of a step the step depends on and changes:
        (arrays, scalars). A name read in the body before the body certainly assigns it, that
        the body assigns, or (arrays) that shares memory with an array the body stores into."""
        alias = self.plan.alias_of
        assigned = {x.target for x in ir.walk(loop.body) if isinstance(x, ir.Assign)}
        assigned |= {x.var for x in ir.walk(loop.body) if isinstance(x, ir.For)}
        stored = {alias.get(x.array, x.array) for x in ir.walk(loop.body)
                  if isinstance(x, ir.Store)}
        exposed = []

        def read(names, defined):
            for n in names:
                if n not in defined and n not in exposed:
                    exposed.append(n)

        def visit(block, defined):
            """Record the reads in ``block`` of names no statement before them certainly set
            (in this step); ``defined`` grows with the block's own assignments."""
            for x in block:
                if isinstance(x, ir.While):
                    # its test is read after its condition's statements set it
                    inner = set(defined)
                    visit(x.cond, inner)
                    read(stmt_reads(x), inner)
                    visit(x.body, inner)
                    continue
                read(stmt_reads(x), defined)
                if isinstance(x, ir.Assign):
                    defined.add(x.target)
                elif isinstance(x, ir.If):
                    a, b = set(defined), set(defined)
                    visit(x.body, a)
                    visit(x.orelse, b)
                    defined |= a & b            # set on both paths
                elif isinstance(x, ir.For):
                    visit(x.body, defined | {x.var})

        visit(loop.body, {loop.var})
        before = set(self.fn.params)
        for x in ir.walk(self.fn.body):
            if x is loop:
                break
            if isinstance(x, ir.Assign):
                before.add(x.target)
            elif isinstance(x, ir.For):
                before.add(x.var)
        for n in exposed:
            if n not in before and n in assigned:
                raise UnsupportedSyntaxError(
                    f"'{n}', which a step of a checkpointed loop may read before setting it, and "
                    f"which is not set before the loop\n{where_in(self.fn, loop.line)}\n"
                    f"Hint: set it before the loop (or on every path of the step before reading "
                    f"it).")
        arrays, scalars = [], []
        for n in exposed:
            t = self.types.get(n)
            if isinstance(t, nbt.Array) and (n in assigned or alias.get(n, n) in stored):
                arrays.append(n)
            elif n in assigned and self.zero(t) is not None and not isinstance(t, nbt.BaseTuple):
                scalars.append(n)
            elif n in assigned:
                raise UnsupportedSyntaxError(
                    f"'{n}' ({t}), carried from one step of a checkpointed loop to the next\n"
                    f"{where_in(self.fn, loop.line)}\n"
                    f"Hint: carry arrays and numbers (unpack tuples and structs before the loop).")
        return sorted(arrays), sorted(scalars)

    def checkpointed_fwd(self, s, out, reserved):
        """The forward of a checkpointed loop: keep its state at entry (slot 0), then run the
        steps saving nothing."""
        arrays, scalars = self.checkpoint_state(s)
        if self.device is not None:
            self.device_snapshots(s)
        if id(s) in self.plan.pushes:
            self.push(out, s.var, self.pushed_type(s), reserved)
        out.add(f"_n{s.id} = _trip({s.start.src()}, {s.stop.src()}, {s.step.src()})")
        for a in arrays:
            out.add(f"_cr{s.id}_{a} = {a}")
            out.add(f"_cv{s.id}_{a} = {a}.copy()")
        for v in scalars:
            out.add(f"_cv{s.id}_{v} = {v}")
        out.add(f"for {s.var} in {ir.range_src(s.start, s.stop, s.step)}:")
        with self.plainly():
            self.nested(s.body, out, False)
        # the lists and tapes the pullback's steps use are made here (tape_inits): emit a step
        # with its saves once, into nothing, to declare them
        self.block_fwd(s.body, type(out)(), False)

    def device_snapshots(self, s):
        """The slot count of a checkpointed loop in device code: a constant (local arrays have a
        size fixed at compile time)."""
        k = s.snapshots
        if not (isinstance(k, ir.Const) and isinstance(k.value, int)
                and not isinstance(k.value, bool)):
            raise UnsupportedSyntaxError(
                f"a checkpointed loop in device code with snapshots={k.src()}\n"
                f"{where_in(self.fn, s.line)}\n"
                f"Hint: device code keeps its slots in local memory, whose size is fixed when "
                f"the kernel compiles: write the number itself (snapshots=16).")
        return max(k.value, 0)

    @contextlib.contextmanager
    def plainly(self):
        """Emit steps that save nothing (a checkpointed loop's forward and its advances)."""
        self.plain, self.fusing, fusing = True, True, self.fusing
        try:
            yield
        finally:
            self.plain, self.fusing = False, fusing

    def checkpointed_rev(self, s, out):
        """The reverse of a checkpointed loop: the schedule's rows (revolve.py) on the working
        state, each slot holding for every state array the array bound then (its reference)
        and a copy of its values, and the scalars."""
        arrays, scalars = self.checkpoint_state(s)
        self.changes_residuals = True       # LOAD writes into the state's arrays
        i, n, k = s.id, f"_n{s.id}", s.snapshots.src()
        for name in [n, *(f"_cr{i}_{a}" for a in arrays), *(f"_cv{i}_{a}" for a in arrays),
                     *(f"_cv{i}_{v}" for v in scalars), *arrays, *scalars] + [
                a.id for a in (s.start, s.step, s.snapshots) if isinstance(a, ir.Name)]:
            out.read(name)
        # the steps read what was bound before the loop: residuals too
        for x in ir.walk(s.body):
            for r in stmt_reads(x):
                out.read(r)
        # the schedule, one row at a time (revolve.py): a stack of a few rows per slot
        if self.device is not None:
            k = self.device_snapshots(s)
            out.add(f"_st{i} = _cuda.local.array(({revolve.stack_rows(k)}, "
                    f"{revolve.STACK_COLUMNS}), _np.int64)")
        else:
            out.add(f"_st{i} = _np.empty((max({k}, 0) + {revolve.STACK_SPARE}, "
                    f"{revolve.STACK_COLUMNS}), _np.int64)")
        out.add(f"_h{i} = _rv_start(_st{i}, {n}, {k})")
        for a in arrays:
            out.add(f"_sr{i}_{a} = _List()")
            out.add(f"_sr{i}_{a}.append(_cr{i}_{a})")
            out.add(f"_sv{i}_{a} = _List()")
            out.add(f"_sv{i}_{a}.append(_cv{i}_{a})")
        for v in scalars:
            dtype = "bool_" if isinstance(self.types[v], nbt.Boolean) else str(self.types[v])
            if self.device is not None:
                out.add(f"_ss{i}_{v} = _cuda.local.array({k + 1}, _np.{dtype})")
            else:
                out.add(f"_ss{i}_{v} = _np.empty(max({k}, 0) + 1, _np.{dtype})")
            out.add(f"_ss{i}_{v}[0] = _cv{i}_{v}")
        out.add(f"while _h{i} > 0:")
        out.indent += 1
        out.local.append({s.var})
        out.add(f"_op, _oa, _ob, _h{i} = _rv_next(_st{i}, _h{i})")
        # op 6 (revolve.LOAD_TURN): LOAD slot _oa, then TURN step _ob
        out.add(f"if _op == {revolve.LOAD} or _op == {revolve.LOAD_TURN}:  # LOAD slot _oa "
                f"(6: then TURN step _ob)")
        for a in arrays:
            out.add(f"    {a} = _sr{i}_{a}[_oa]")
            out.add(f"    _copy_into({a}, _sv{i}_{a}[_oa])")
        for v in scalars:
            out.add(f"    {v} = _ss{i}_{v}[_oa]")
        if not arrays and not scalars:
            out.add("    pass")
        out.add(f"if _op == {revolve.LOAD_TURN}:")
        out.add(f"    _op, _oa = {revolve.TURN}, _ob")
        out.add(f"if _op == {revolve.SAVE}:  # SAVE slot _oa")
        for a in arrays:
            out.add(f"    if _oa == len(_sv{i}_{a}):")
            out.add(f"        _sr{i}_{a}.append({a})")
            out.add(f"        _sv{i}_{a}.append({a}.copy())")
            out.add("    else:")
            out.add(f"        _sr{i}_{a}[_oa] = {a}")
            out.add(f"        _sv{i}_{a}[_oa] = {a}.copy()")
        for v in scalars:
            out.add(f"    _ss{i}_{v}[_oa] = {v}")
        if not arrays and not scalars:
            out.add("    pass")
        out.add(f"elif _op == {revolve.ADVANCE}:  # ADVANCE through steps _oa .. _ob - 1")
        out.indent += 1
        out.add(f"for _a{i} in range(_oa, _ob):")
        out.indent += 1
        out.add(f"{s.var} = {s.start.src()} + _a{i} * {s.step.src()}")
        with self.plainly():
            self.block_fwd(s.body, out, False)
        out.indent -= 2
        out.add(f"elif _op == {revolve.TURN}:  # TURN step _oa: its forward, saving, then its "
                f"reverse")
        out.indent += 1
        out.add(f"{s.var} = {s.start.src()} + _oa * {s.step.src()}")
        innermost = not any(isinstance(x, (ir.For, ir.While)) for x in ir.walk(s.body))
        if innermost and self.device is None:
            for key, count in sorted(self.count_pushes(s.body).items()):
                out.add(f"_tape_{key} = _reserve(_tape_{key}, _k_{key}, {count})")
        self.block_fwd(s.body, out, innermost)
        if self.device is not None and self.tapes:
            # a device tape is fixed in size and this step saved during the reverse: past the
            # bound the pops would read nothing saved, so leave with NaN tangents (device_vjp)
            out.add(f"_used = max(0, {', '.join(f'_k_{t}' for t in sorted(self.tapes))})")
            out.add(f"if _used > {self.device}:")
            out.add("    return _OVERFLOW")
        # The adjoints of the arrays the step binds afresh (swap temporaries, new arrays) were
        # last looked up for the bindings some other op left: look them up again for this
        # step's, the state's adjoints first (they hold what later steps accumulated).
        rebound = self.plan.rebound or {}
        assigned = {x.target for x in ir.walk(s.body) if isinstance(x, ir.Assign)}
        done = []
        for v in sorted(rebound):
            if v in arrays or v not in assigned or v not in self.plan.active \
                    or v in self.forwarded:
                continue
            others = [m for m in arrays if m in rebound[v]] + [m for m in done if m in rebound[v]]
            out.add(self.adjoint_lookup(v, tuple(others)))
            done.append(v)
        self.recompute(s, out)
        self.block_rev(s.body, out)
        out.indent -= 1
        out.local.pop()
        out.indent -= 1
        if id(s) in self.plan.pushes:
            self.pop(out, s.var, self.pushed_type(s))
