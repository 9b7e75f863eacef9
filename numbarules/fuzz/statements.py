"""Statements and control flow: the choice of the next statement (``statement``, ``block``),
assignments and accumulation into ``s``, branches, loops (for, while, break, continue), early
returns, values read after their loop (``loopflow``), structs built in code, tuples and scalar
swaps. Array statements are arrays.py's, time loops timeloops.py's, refused constructs
refusals.py's. ``Statements`` is that part of the generator (a mixin of
``generator.Generator``).
"""


class Statements:
    def emit(self, ctx, line):
        self.lines.append("    " * (ctx.depth + 1) + line)
        self.nstmts += 1

    def budget_left(self):
        return self.nstmts < self.MAX_STATEMENTS

    def block(self, ctx, k):
        start = len(self.lines)
        for _ in range(k):
            if not self.budget_left() and len(self.lines) > start:
                break
            self.statement(ctx)
        if len(self.lines) == start:
            self.s_accum(ctx)

    def statement(self, ctx):
        h = self.has
        nested_ok = ctx.depth < 3
        opts = [
            (4, self.s_assign), (5, self.s_accum), (2, self.s_update),
        ]
        if h("branches") and nested_ok:
            opts += [(3, self.s_if), (1.5, self.s_if_const)]
        if h("loops") and nested_ok:
            opts += [(3, self.s_for), (1, self.s_while), (1, self.s_while_data)]
            if ctx.in_loop:
                opts += [(1.5, self.s_break), (1.5, self.s_continue)]
        if h("loopflow") and ctx.depth < 2:
            opts += [(3, self.s_loopflow)]
        if h("return"):
            opts += [(1.5, self.s_return)]
        if h("arrays"):
            if ctx.top:
                opts += [(3, self.s_alloc)]
            if self.vecs(writable=True):
                opts += [(3, self.s_elem_write)]
                if nested_ok:
                    opts += [(2, self.s_elem_loop)]
        if h("rows") and ctx.top:
            opts += [(3, self.s_rows)]
        if h("views") and ctx.top:
            opts += [(3, self.s_view)]
        if h("numpy") and ctx.top:
            opts += [(4, self.s_numpy)]
        if h("numpy") and ctx.in_loop:
            opts += [(3, self.s_loop_reduction)]
        if h("globals") and ctx.top:
            opts += [(2, self.s_globals)]
        if h("viewcalls") and ctx.top:
            opts += [(3, self.s_viewcall)]
        if h("structs") and ctx.top:
            opts += [(1.5, self.s_struct_build)]
        if h("tuples"):
            opts += [(2, self.s_tuple)]
        if h("tuple_loop") and nested_ok:
            opts += [(2.5, self.s_tuple_loop)]
        if h("swaps"):
            opts += [(2, self.s_swap)]
            if ctx.top:
                opts += [(1.5, self.s_swap_arrays)]
        if h("timeloops") and ctx.top:
            opts += [(3, self.s_timeloop)]
        if h("refusals") and ctx.top:
            opts += [(2, self.s_refusal)]
        self.pick(opts)(ctx)

    def new_float(self, ctx, expr):
        name = self.fresh("t")
        self.emit(ctx, f"{name} = {expr}")
        self.declare(name, "f")
        return name

    def s_assign(self, ctx):
        self.new_float(ctx, self.fexpr(ctx, self.r.randint(1, 3)))

    def s_accum(self, ctx):
        e = self.fexpr(ctx, self.r.randint(1, 3))
        form = self.pick([(5, f"s += {e}"), (1, f"s -= {e}"), (1, f"s = 0.5 * s + {e}"),
                          (1, f"s = s * {self.const(0.5, 1.1)} - {e}"),
                          (0.5, f"s = math.tanh(s) + {e}")])
        self.emit(ctx, form)

    def s_update(self, ctx):
        names = [n for n in self.floats() if n != "s" and n not in self.protected]
        if not names:
            return self.s_assign(ctx)
        v = self.r.choice(names)
        e = self.fexpr(ctx, self.r.randint(1, 2))
        self.emit(ctx, self.pick([(2, f"{v} = {e}"), (2, f"{v} += {e}"),
                                  (1, f"{v} *= {self.const(0.3, 0.9)}"),
                                  (1, f"{v} = {v} * {self.const(0.3, 0.9)} + {e}")]))

    def body(self, ctx, k=None):
        self.push()
        self.block(ctx, k if k is not None else self.r.randint(1, 2))
        self.pop()

    def s_if(self, ctx):
        self.use("if on data")
        self.emit(ctx, f"if {self.cond(ctx)}:")
        inner = ctx.inner(branch=True)
        self.body(inner)
        if self.chance(0.35):
            self.use("elif")
            self.emit(ctx, f"elif {self.cond(ctx)}:")
            self.body(inner)
        if self.chance(0.6):
            self.use("else")
            self.emit(ctx, "else:")
            self.body(inner)

    def s_if_const(self, ctx):
        self.use("constant condition")
        c = self.r.choice(["1.0 < 0.5", "2 > 1", "False", "True", "0.5 > 1.5", "3 < 2"])
        self.emit(ctx, f"if {c}:")
        inner = ctx.inner(branch=True)
        self.push()
        if self.has("loops") or self.chance(0.7):
            self.s_for(inner, force=True)
        self.block(inner, self.r.randint(0, 1))
        self.pop()
        if self.chance(0.4):
            self.emit(ctx, "else:")
            self.body(inner)

    def loop_range(self, ctx, force_nonempty=False):
        """(header source, lo, hi, nonempty) for a range loop over indices of an array or
        constants: values lo..hi inclusive."""
        vec = self.vecs()
        n = (self.r.choice([v.shape[0] for v in vec]) if vec and self.chance(0.7)
             else self.r.randint(2, 5))
        src = None
        for v in vec:
            if v.shape[0] == n and self.chance(0.5):
                src = f"{v.expr}.shape[0]" if self.chance(0.7) else f"len({v.expr})"
                break
        n_src = src or str(n)
        forms = [(4, ("range({n})", 0, n - 1, n > 0))]
        if n >= 2:
            a = self.r.randint(1, n - 1)
            forms.append((2, (f"range({a}, {{n}})", a, n - 1, True)))
            st = self.r.choice([2, 3])
            last = ((n - 1) // st) * st
            forms.append((1.5, (f"range(0, {{n}}, {st})", 0, last, True)))
            forms.append((1.5, (f"range({n - 1}, -1, -1)", 0, n - 1, True)))
            if n >= 3:
                lo = n - 1 - 2 * ((n - 2) // 2)
                forms.append((1, (f"range({n - 1}, 0, -2)", lo, n - 1, True)))
        if not force_nonempty:
            z = self.r.choice([0, 1, 2])
            forms.append((1, (f"range({z}, {z})", 0, 0, False)))
            forms.append((0.5, (f"range({z + 1}, {z})", 0, 0, False)))
            for a in self.args:
                if a.kind == "i" and a.int_value <= n:
                    forms.append((2, (f"range({a.name})", 0, max(a.int_value - 1, 0),
                                      a.int_value > 0)))
        fmt, lo, hi, nonempty = self.pick(forms)
        if fmt.startswith("range(") and "{n}" in fmt:
            header = fmt.format(n=n_src)
        else:
            header = fmt
        if not nonempty:
            self.use("loop that runs zero times")
        if "-1)" in header or "-2)" in header:
            self.use("loop with a negative step")
        elif header.count(",") == 2:
            self.use("loop with a step")
        return header, lo, hi, nonempty

    def s_for(self, ctx, force=False, force_nonempty=False, body_k=None):
        self.use("for loop")
        header, lo, hi, nonempty = self.loop_range(ctx, force_nonempty)
        i = self.fresh("i")
        self.emit(ctx, f"for {i} in {header}:")
        inner = ctx.inner(loops=ctx.loops + ((i, lo, hi),), in_loop=True, loop_kind="for")
        self.push()
        if self.chance(0.3) and ctx.depth < 2:
            self.use("nested loops")
            self.s_for(inner)
        self.block(inner, body_k if body_k is not None else self.r.randint(1, 2))
        self.pop()
        return i, lo, hi, nonempty

    def s_while(self, ctx):
        self.use("while loop")
        k = self.fresh("k")
        n = self.r.randint(0, 4)
        self.emit(ctx, f"{k} = 0")
        self.declare(k, "i")
        self.emit(ctx, f"while {k} < {n}:")
        inner = ctx.inner(loops=ctx.loops + ((f"({k} - 1)", 0, max(n - 1, 0)),), in_loop=True,
                          loop_kind="while")
        self.push()
        self.emit(inner, f"{k} += 1")
        self.block(inner, self.r.randint(1, 2))
        self.pop()

    def s_while_data(self, ctx):
        self.use("while loop on data")
        k = self.fresh("k")
        n = self.r.randint(1, 5)
        w = self.new_float(ctx, self.fexpr(ctx, 1))
        self.emit(ctx, f"{k} = 0")
        self.declare(k, "i")
        self.emit(ctx, f"while {w} < {self.const(0.5, 3.0)} and {k} < {n}:")
        inner = ctx.inner(loops=ctx.loops + ((f"({k} - 1)", 0, n - 1),), in_loop=True,
                          loop_kind="while")
        self.push()
        self.emit(inner, f"{k} += 1")
        self.protected.add(w)
        self.emit(inner, f"{w} = {w} + {self.pos(inner, 1)} * 0.5")
        self.block(inner, self.r.randint(0, 2))
        self.protected.discard(w)
        self.pop()

    def s_break(self, ctx):
        self.use("break")
        self.emit(ctx, f"if {self.cond(ctx)}:")
        self.emit(ctx.inner(), "break")

    def s_continue(self, ctx):
        self.use("continue")
        self.emit(ctx, f"if {self.cond(ctx)}:")
        self.emit(ctx.inner(), "continue")

    def s_return(self, ctx):
        self.use("early return" + (" in a loop" if ctx.in_loop else ""))
        self.returned_early = True      # what follows runs only when no return was taken
        self.emit(ctx, f"if {self.cond(ctx)}:")
        self.emit(ctx.inner(), f"return {self.fexpr(ctx, 2)} + s")

    def s_loopflow(self, ctx):
        form = self.r.randrange(5)
        outer_n, inner_n = self.r.randint(1, 4), self.r.randint(1, 4)
        i, j = self.fresh("i"), self.fresh("j")
        vec = self.vecs(ndim=1)
        oc = ctx.inner(loops=ctx.loops + ((i, 0, outer_n - 1),), in_loop=True, loop_kind="for")
        ic = oc.inner(loops=oc.loops + ((j, 0, inner_n - 1),))
        if vec:
            v = self.r.choice(vec)
            inner_n = min(inner_n, v.shape[0])
            ic = oc.inner(loops=oc.loops + ((j, 0, inner_n - 1),))
            read = f"{v.expr}[{j}]"
        else:
            read = self.atom(ic)
        self.push()
        if form == 0:
            # the brief's example: t computed in the inner loop, summed there and read after it
            self.use("value from an inner loop read after it")
            t = self.fresh("t")
            self.emit(ctx, f"for {i} in range({outer_n}):")
            self.emit(oc, f"for {j} in range({inner_n}):")
            self.emit(ic, f"{t} = {read} * {self.const(0.5, 2.0)} + {self.fexpr(ic, 1)}")
            self.emit(ic, f"s += {t}")
            self.emit(oc, f"s += {t} * {self.fexpr(oc, 1)}")
        elif form == 1:
            self.use("inner-loop accumulator read after the inner loop")
            acc = self.fresh("acc")
            self.emit(ctx, f"for {i} in range({outer_n}):")
            self.emit(oc, f"{acc} = {self.fexpr(oc, 1)}")
            self.emit(oc, f"for {j} in range({inner_n}):")
            self.emit(ic, f"{acc} = {acc} * {self.const(0.3, 0.9)} + {read} * {self.fexpr(ic, 1)}")
            self.emit(oc, f"s += {acc} * {self.fexpr(oc, 1)}")
        elif form == 2:
            self.use("running max in an inner loop read after it")
            m = self.fresh("m")
            self.emit(ctx, f"for {i} in range({outer_n}):")
            self.emit(oc, f"{m} = {self.fexpr(oc, 1)}")
            self.emit(oc, f"for {j} in range({inner_n}):")
            self.emit(ic, f"{m} = max({m}, {read} * {self.fexpr(ic, 1)})")
            self.emit(oc, f"s += {m}")
        elif form == 3:
            self.use("value from a loop read after it")
            t = self.fresh("t")
            ic1 = ctx.inner(loops=ctx.loops + ((j, 0, inner_n - 1),), in_loop=True, loop_kind="for")
            self.emit(ctx, f"for {j} in range({inner_n}):")
            self.emit(ic1, f"{t} = {read} * {self.fexpr(ic1, 1)}")
            self.emit(ic1, f"s += {t}")
            self.pop()
            self.push()
            self.emit(ctx, f"s += {t} * {self.fexpr(ctx, 1)}")
        else:
            self.use("value carried across outer iterations through an inner loop")
            c = self.new_float(ctx, self.fexpr(ctx, 1))
            self.protected.add(c)
            self.emit(ctx, f"for {i} in range({outer_n}):")
            self.emit(oc, f"for {j} in range({inner_n}):")
            self.emit(ic, f"{c} = math.tanh({c} + {read} * {self.fexpr(ic, 1)})")
            self.emit(oc, f"s += {c} * {self.fexpr(oc, 1)}")
            self.protected.discard(c)
        self.pop()

    # --- structs, tuples, scalar swaps ---------------------------------------------------------

    def s_struct_build(self, ctx):
        name = self.fresh("q")
        self.use("struct built in code")
        self.pool_names.add("Pair")
        self.emit(ctx, f"{name} = Pair({self.fexpr(ctx, 1)}, {self.fexpr(ctx, 1)})")
        self.structs_local.append((name, "Pair"))

    def s_tuple(self, ctx):
        forms = [(2, "pack")]
        targs = [a for a in self.args if a.kind == "tf"]
        if targs:
            forms.append((3, "unpack"))
        if self.has("calls"):
            forms.append((1, "call"))
        form = self.pick(forms)
        a, b = self.fresh("t"), self.fresh("t")
        if form == "pack":
            self.use("tuple packing and unpacking")
            self.emit(ctx, f"{a}, {b} = {self.fexpr(ctx, 1)}, {self.fexpr(ctx, 1)}")
        elif form == "unpack":
            self.use("unpacking a tuple argument")
            T = self.r.choice(targs)
            names = [self.fresh("t") for _ in range(T.shape[0])]
            self.emit(ctx, f"{', '.join(names)} = {T.name}")
            for nm in names:
                self.declare(nm, "f")
        else:
            self.pool_names.add("p_pair")
            self.use("tuple returned by a helper")
            self.emit(ctx, f"{a}, {b} = p_pair({self.fexpr(ctx, 1)}, {self.fexpr(ctx, 1)})")
        self.declare(a, "f")
        self.declare(b, "f")
        if form == "unpack":
            self.scopes[-1].pop(a)
            self.scopes[-1].pop(b)

    def s_tuple_loop(self, ctx):
        targs = [a for a in self.args if a.kind == "tf"]
        if not targs:
            return self.s_accum(ctx)
        T = self.r.choice(targs)
        n = T.shape[0]
        i = self.fresh("i")
        self.use("tuple indexed by a loop variable")
        hdr = self.r.choice([f"range({n})", f"range(len({T.name}))", f"range({n - 1}, -1, -1)"])
        self.emit(ctx, f"for {i} in {hdr}:")
        inner = ctx.inner(loops=ctx.loops + ((i, 0, n - 1),), in_loop=True, loop_kind="for")
        self.push()
        self.emit(inner, f"s += {T.name}[{i}] * {self.fexpr(inner, 1)}")
        self.block(inner, self.r.randint(0, 1))
        self.pop()

    def s_swap(self, ctx):
        names = [n for n in self.floats() if n != "s" and n not in self.protected]
        if len(names) < 2:
            self.new_float(ctx, self.fexpr(ctx, 1))
            self.new_float(ctx, self.fexpr(ctx, 1))
            names = [n for n in self.floats() if n != "s" and n not in self.protected]
        a, b = self.r.sample(names, 2)
        self.use("scalar swap a, b = b, a")
        if self.chance(0.5) and ctx.depth < 2:
            i = self.fresh("i")
            self.emit(ctx, f"for {i} in range({self.r.randint(1, 4)}):")
            inner = ctx.inner(in_loop=True, loop_kind="for")
            self.emit(inner, f"{a}, {b} = {b}, {a}")
            self.emit(inner, f"{a} = {a} * {self.const(0.3, 0.9)} + {self.fexpr(inner, 1)}")
        else:
            self.emit(ctx, f"{a}, {b} = {b}, {a}")
