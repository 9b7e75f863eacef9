"""The forward kernel: the primal's statements with the saves the reverse sweep needs.

A part of the generator (codegen._Gen): each statement of the primal is emitted as it runs,
preceded by what the plan saves before the statement overwrites a value (tape.py: pushes,
snapshots of the arrays a sweep overwrites, copies kept in the gradient's arena), a rule's
call with the residuals its pullback will take, and each loop with its trip count and the
tape room its iterations reserve at once. The reverse sweep, which pops those saves back, is
codegen.py's; the fused and device schedules emit their forward through the same methods.
"""

from numba import types as nbt

from . import ir
from .emit import _Out


class ForwardPass:

    def forward(self, residuals):
        self.rule_lists = {}
        out = _Out()
        fn = self.fn
        out.add(f"# forward of {fn.name} ({fn.file}:{fn.firstline}): the primal, saving what "
                f"the pullback needs")
        # Saved or handed-over scalars get a typed zero first: Numba rejects a variable that some
        # path (a loop that runs zero times) leaves unset.
        for line in self.primal_inits(set(residuals)):
            out.add(line)
        tape_init = len(out.lines)
        self.block_fwd(fn.body, out, reserved=False)
        inits = self.tape_inits()
        out.lines[tape_init:tape_init] = ["    " + t for t in inits]
        self.forward_lines = out.lines
        return f"def fwd_{self.name}({', '.join(fn.params)}):\n" + "\n".join(out.lines) + "\n"

    def primal_inits(self, names):
        """A typed zero for ``names`` and every saved scalar: Numba rejects a variable that some
        path (a loop that runs zero times) leaves unset."""
        fn = self.fn
        saved = {s.target if isinstance(s, ir.Assign) else s.var for s in ir.walk(fn.body)
                 if id(s) in self.plan.pushes and isinstance(s, (ir.Assign, ir.For))}
        # The result too, when early returns assign it in branches: Numba's SSA may join paths
        # that all leave it unset (behind the return flags) and then cannot type it.
        returns = sum(1 for s in ir.walk(fn.body) if isinstance(s, ir.Assign) and s.target == "_rv")
        if returns > 1:
            saved.add("_rv")
        pre = sorted(v for v in (set(names) | saved)
                     if v not in fn.params and v in self.types and self.zero(self.types[v]))
        lines = [f"{v} = {self.zero(self.types[v])}" for v in pre]
        # An array whose first binding is in a loop or a branch: its first saved reference is
        # an empty array of its type (the reverse takes it back and nothing reads it).
        top = {id(x) for x in fn.body}
        first = {}
        for x in ir.walk(fn.body):
            if isinstance(x, ir.Assign):
                first.setdefault(x.target, x)
        for v in sorted({x.target for x in ir.walk(fn.body) if id(x) in self.plan.pushes
                         and self.reference(x) and not self.reference_unread(x)}):
            if v in fn.params or id(first[v]) in top:
                continue
            lines.append(f"{v} = {self.empty_of(self.types[v], fn, first[v])}")
        # Trip counts too: a loop inside a branch that is not taken never sets its own.
        for x in ir.walk(fn.body):
            if isinstance(x, (ir.For, ir.While)) and id(x) not in top \
                    and id(x) in self.plan.reverse_relevant:
                lines.append(f"_{'n' if isinstance(x, ir.For) else 'w'}{x.id} = 0")
        return lines


    def block_fwd(self, stmts, out, reserved):
        for s in stmts:
            self.stmt_fwd(s, out, reserved)

    def stmt_fwd(self, s, out, reserved):
        out.comment(self.fn, s.line)
        pushed = id(s) in self.plan.pushes and not self.plain
        if isinstance(s, ir.For) and s.snapshots is not None and not self.plain:
            return self.checkpointed_fwd(s, out, reserved)
        if isinstance(s, ir.Assign):
            if pushed and self.reference(s):
                if not self.reference_unread(s):
                    self.push_reference(out, s)
            elif pushed and id(s) not in self.shifted:
                self.push(out, s.target, self.pushed_type(s), reserved, s)
            kept = self.kept.get(id(s.expr)) if self.device is None else None
            cp = self.calls.get(id(s.expr))
            args = ", ".join(a.src() for a in getattr(s.expr, "args", ()))
            if kept:
                out.add(f"{s.target}, {kept} = fwd_{cp.name}({args})")
            elif self.rule_site(s.expr):
                # the rule's forward gives the value; its residuals wait for the reverse
                site = self.rule_site(s.expr)
                out.add(f"{s.target}, {site} = fwd_{cp.name}({args})")
                if cp.relayout:
                    # every later type (the residual lists of the calls that read it) was
                    # inferred from the primal's: keep its layout (fuzz 20261532 #1610)
                    out.add(f"{s.target} = _np.{cp.relayout}({s.target})")
                parts = self.taped_residuals(cp)
                if self.fusing:
                    pass
                elif parts is not None:
                    for j, t in enumerate(parts):
                        self.push(out, f"{site}[{j}]", t, reserved)
                else:
                    out.add(f"_l{site}.append({site})")
                    self.rule_lists[f"_l{site}"] = cp.residuals
            elif cp is not None and cp.kind == "derived" and cp.value != "primal" \
                    and self.device is None:
                out.add(f"{s.target} = fwd_{cp.name}({args})[0]")
            elif not self.arena_copy(out, s):
                out.add(f"{s.target} = {ir.expr_src(s.expr)}")
            if pushed and id(s) in self.shifted:
                # saved for the next iteration, which would push it before overwriting it
                key, at = self.shifted[id(s)]
                out.add(f"_tape_{key}[_k_{key} + {at}] = {s.target}")
        elif isinstance(s, ir.Store):
            idx = ", ".join(a.src() for a in s.index)
            pushed = pushed and not self.snapshotted(s)
            if pushed and self.region(s):
                self.push_view(out, f"{s.array}[{idx}]", self.pushed_type(s))
            elif pushed:
                self.push(out, f"{s.array}[{idx}]", self.pushed_type(s), reserved)
            out.add(f"{s.array}[{idx}] = {s.value.src()}")
        elif isinstance(s, ir.If):
            out.add(f"if {s.test.src()}:")
            self.nested(s.body, out, reserved)
            if s.orelse:
                out.add("else:")
                self.nested(s.orelse, out, reserved)
        elif isinstance(s, ir.For):
            for w in self.snapshots(s):
                # the elements the loop overwrites, saved whole (residuals._snapshots)
                self.push_view(out, w, self.types[w].dtype)
            if pushed:
                self.push(out, s.var, self.pushed_type(s), reserved)
            keep = self.chunk_tapes(s) if s.parallel else None
            # (a loop whose chunks keep tapes of their own checks each push: its chunks' tapes
            # start small)
            innermost = not keep and not any(isinstance(x, (ir.For, ir.While))
                                             for x in ir.walk(s.body))
            shifted = {}
            if id(s) in self.plan.reverse_relevant and not self.plain:
                n = f"_n{s.id}"
                if id(s) in self.plan.in_loop:
                    self.push(out, n, nbt.int64, reserved)
                out.add(f"{n} = _trip({s.start.src()}, {s.stop.src()}, {s.step.src()})")
                if innermost and self.device is None:
                    # One capacity check per entry of an innermost loop instead of one per push.
                    # (Outer loops check each push: an inner loop's pushes would eat their
                    # reservation.)
                    shifted = self.shifted_saves(s)
                    for key, count in sorted(self.count_pushes(s.body).items()):
                        # a shifted tape also takes the values before the first iteration and
                        # the last iteration's, which the next push overwrites
                        trips = f"({n} + 1)" if key in shifted else n
                        out.add(f"_tape_{key} = _reserve(_tape_{key}, _k_{key}, {trips} * {count})")
                    for key, saves in sorted(shifted.items()):
                        out.add(f"# {', '.join(x.target for x in saves)}: saved as assigned, "
                                f"for the next iteration (the first one's before the loop)")
                        for at, x in enumerate(saves):
                            out.add(f"_tape_{key}[_k_{key}{f' + {at}' if at else ''}] = {x.target}")
                            self.shifted[id(x)] = (key, len(saves) + at)
                for key, sizes in sorted(self.snapshot_room(s).items()):
                    # the whole-array saves of the sweeps in each step, reserved at once: growing
                    # a tape of a hundred MB by doubling costs more than the sweeps (a hint:
                    # were the arrays to grow, _push_view still grows the tape)
                    out.add(f"_tape_{key} = _reserve(_tape_{key}, _k_{key}, {n} * ({sizes}))")
            for v in (self.chunk_restored(s) if keep else ()):
                self.push(out, v, self.types[v], reserved)    # popped after its reverse
            at = len(out.lines)
            out.add(f"for {s.var} in {ir.range_src(s.start, s.stop, s.step)}:")
            self.nested(s.body, out, innermost)
            for key, saves in sorted(shifted.items()):
                out.add(f"    _k_{key} += {len(saves)}")
                for x in saves:         # this loop's only: other kernels emit it their own way
                    del self.shifted[id(x)]
            if s.parallel and self.device is None and not self.fusing:
                self.parallelize(s, out, at, two_pass=True)
            for v in (self.chunk_restored(s) if keep and self.dry_run is None else ()):
                # what the serial loop leaves in it is read by nothing but a save (the reverse
                # pops the value from before the loop): set here, its chunks' values stay
                # theirs (and the chunk loop is outlined: ad/outline.py)
                out.add(f"{v} = {self.zero(self.types[v])}")
        elif isinstance(s, ir.While):
            relevant = id(s) in self.plan.reverse_relevant and not self.plain
            w = f"_w{s.id}"
            if relevant:
                if id(s) in self.plan.in_loop:
                    self.push(out, w, nbt.int64, reserved)
                out.add(f"{w} = 0")
            out.add("while True:")
            out.indent += 1
            self.block_fwd(s.cond, out, False)
            out.add(f"if not {s.test.src()}:")
            out.add("    break")
            if relevant:
                out.add(f"{w} += 1")
            self.block_fwd(s.body, out, False)
            out.indent -= 1
        elif isinstance(s, ir.Return) and self.device is not None:
            out.add(f"_y = {s.value.src()}")
        elif isinstance(s, ir.Return):
            res = ", ".join(self.residuals) + ("," if len(self.residuals) == 1 else "")
            out.add(f"return {s.value.src()}, ({res})")

    def rule_site(self, e):
        """The residual name of a call whose rule's residuals are saved, or None."""
        if self.device is not None or id(e) in self.checkpointed:
            return None
        return self.rule_sites.get(id(e))


    def nested(self, stmts, out, reserved):
        out.indent += 1
        n = len(out.lines)
        self.block_fwd(stmts, out, reserved)
        if len(out.lines) == n or all(l.strip().startswith("#") for l in out.lines[n:]):
            out.add("pass")
        out.indent -= 1
