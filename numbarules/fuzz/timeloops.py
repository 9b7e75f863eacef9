"""Arrays rebound in loops: two buffers swapped in a loop, and the time-stepping loops of
simulations (``u, w = w, u``, ``u = u_new``, stencils on slices, views of the rebound array,
arrays bound in branches, checkpointed loops). ``TimeLoops`` is that part of the generator (a
mixin of ``generator.Generator``).
"""


class TimeLoops:
    def s_swap_arrays(self, ctx):
        vec = self.vecs(ndim=1)
        if not vec:
            return self.s_swap(ctx)
        v = self.r.choice(vec)
        n = v.shape[0]
        a, b = self.fresh("a"), self.fresh("b")
        it, i = self.fresh("i"), self.fresh("i")
        self.use("array swap a, b = b, a in a loop")
        self.may_refuse.update({"array rebound", "tape cannot hold"})
        self.emit(ctx, f"{a} = {v.expr}.copy()")
        self.emit(ctx, f"{b} = np.zeros({n})")
        self.emit(ctx, f"for {it} in range({self.r.randint(1, 3)}):")
        c1 = ctx.inner(in_loop=True, loop_kind="for")
        self.emit(c1, f"for {i} in range({n}):")
        c2 = c1.inner(loops=ctx.loops + ((i, 0, n - 1),))
        self.emit(c2, f"{b}[{i}] = 0.5 * {a}[{i}] + {self.fexpr(c2, 1)}")
        self.emit(c1, f"{a}, {b} = {b}, {a}")
        self.emit(ctx, f"s += np.sum({a}) + {b}[0]")

    def s_timeloop(self, ctx):
        """A time loop over a local copy of a vector, in one of the forms simulations take."""
        vec = [v for v in self.vecs(ndim=1) if v.shape[0] >= 3]
        if not vec:
            return self.s_accum(ctx)
        v = self.r.choice(vec)
        n = v.shape[0]
        u, w, it, i = self.fresh("u"), self.fresh("w"), self.fresh("it"), self.fresh("i")
        c, e = self.const(0.05, 0.3), self.new_float(ctx, f"0.3 * ({self.fexpr(ctx, 1)})")
        steps = self.r.randint(0, 3)
        form = self.pick([(2, "copy"), (2, "stencil"), (2, "expr"), (2, "swap"), (1, "view"),
                          (1, "branch"), (1, "inner"), (1, "rotate"), (1.5, "slices"),
                          (1, "window"), (1, "target"), (1, "scratch"), (1, "settle"),
                          (1.5, "drop")])
        self.use(f"time loop: {form}")
        if form == "slices":
            steps = self.r.randint(2, 3)      # one step would not change the views' shapes
        self.emit(ctx, f"{u} = {v.expr}{self.pick([(2, '.copy()'), (1, ' * 1.0')])}")
        c1 = ctx.inner(in_loop=True, loop_kind="for")
        c2 = c1.inner(loops=ctx.loops + ((i, 1, n - 2),))
        b = self.fresh("b")
        if form in ("swap", "target"):
            self.emit(ctx, f"{w} = np.zeros({n})")
        elif form == "rotate":
            self.emit(ctx, f"{w} = {u} * 0.5")
            self.emit(ctx, f"{b} = np.zeros({n})")
        elif form == "settle":
            x = self.fresh("x")
            self.emit(ctx, f"{x} = {e} * 1.0")
        if self.chance(0.3):
            # reversed on a binomial schedule instead of a tape (revolve.py): more steps, few
            # snapshots, so that advances, saves and loads all happen
            self.use("time loop: checkpointed")
            steps = steps + self.r.randint(0, 4)
            if form == "slices":
                steps = min(steps, n)     # u[:n - it] and u[it:] agree in length up to it = n
            self.emit(ctx, f"for {it} in nr.checkpointed(range({steps}), "
                           f"snapshots={self.r.randint(0, 3)}):")
        else:
            self.emit(ctx, f"for {it} in range({steps}):")
        if form == "copy":             # w = u.copy(); u[i] = f(w[i-1], w[i], w[i+1])
            self.emit(c1, f"{w} = {u}.copy()")
            self.emit(c1, f"for {i} in range(1, {n - 1}):")
            self.emit(c2, f"{u}[{i}] = {w}[{i}] + {c} * ({w}[{i} - 1] - 2.0 * {w}[{i}] + "
                          f"{w}[{i} + 1]) + {e} * {w}[{i}] * {w}[{i}]")
        elif form == "stencil":        # slices of u, a fresh array, u = u_new
            self.emit(c1, f"{w} = {u}[:-2] + {u}[2:] - 2.0 * {u}[1:-1]")
            un = self.fresh("un")
            self.emit(c1, f"{un} = {self.pick([(1, f'{u}.copy()'), (1, f'np.zeros_like({u})')])}")
            self.emit(c1, f"{un}[1:-1] = {u}[1:-1] + {c} * {w} + {e} * {u}[1:-1]")
            self.emit(c1, f"{u} = {un}")
        elif form == "expr":           # u = expression of u
            self.emit(c1, f"{u} = " + self.pick([
                (2, f"{u} + {c} * {u} * (1.0 - {u}) + {e}"),
                (1, f"{u} * {e} + np.tanh({u})"),
                (1, f"{u} - {c} * np.sum({u} * {u}) + {e} * {u}")]))
        elif form == "swap":           # two buffers, element loop, swap
            self.emit(c1, f"for {i} in range(1, {n - 1}):")
            self.emit(c2, f"{w}[{i}] = {u}[{i}] + {c} * ({u}[{i} - 1] - 2.0 * {u}[{i}] + "
                          f"{u}[{i} + 1]) + {e} * {u}[{i}]")
            self.emit(c1, f"{u}, {w} = {w}, {u}")
            self.emit(ctx, f"s += {w}[1]")
        elif form == "target":         # the array an element loop writes picked by a branch:
            # sometimes the one it reads (then it updates in place, Gauss-Seidel style)
            self.emit(c1, f"if {self.cond(c1)}:")
            self.emit(c1.inner(), f"{b} = {w}")
            self.emit(c1, "else:")
            self.emit(c1.inner(), f"{b} = {u}")
            self.emit(c1, f"for {i} in range(1, {n - 1}):")
            self.emit(c2, f"{b}[{i}] = {u}[{i}] * ({c} + {e} * {u}[{i}]) + {c} * {u}[{i} - 1] * "
                          f"{u}[{i} + 1]")
            self.emit(ctx, f"s += np.sum({w}) * {c}")
        elif form == "scratch":        # a fresh scratch array an element loop fills each step
            self.emit(c1, f"{w} = np.zeros({n})")
            self.emit(c1, f"for {i} in range(1, {n - 1}):")
            self.emit(c2, f"{w}[{i}] = {u}[{i} - 1] - 2.0 * {u}[{i}] + {u}[{i} + 1]")
            self.emit(c1, f"{u} = {u} + {c} * {w} * {u}")
        elif form == "rotate":         # three buffers rotated
            self.emit(c1, f"for {i} in range({n}):")
            c3 = c1.inner(loops=ctx.loops + ((i, 0, n - 1),))
            self.emit(c3, f"{b}[{i}] = {c} * {u}[{i}] + {e} * {w}[{i}] * {u}[{i}]")
            self.emit(c1, f"{u}, {w}, {b} = {b}, {u}, {w}")
            self.emit(ctx, f"s += {w}[0] + {b}[{n - 1}]")
        elif form == "view":           # a view of the rebound array taken in the loop
            self.emit(c1, f"{w} = {u}[1:3]")
            self.emit(c1, f"s += {w}[0] * {w}[1] * {e}")
            self.emit(c1, f"{u} = {u} * {self.const(0.5, 1.1)} + {c}")
        elif form == "branch":         # bound in a branch, or in a loop and a branch
            self.emit(c1, f"if {self.cond(c1)}:")
            self.emit(c1.inner(), f"{u} = {u} * {e} + {c}")
            self.emit(c1, "else:")
            self.emit(c1.inner(), f"{u} = {u}[::-1].copy()")
        elif form == "window":         # a view at an offset the loop computes, a reshape
            a = self.fresh("a")
            self.emit(c1, f"{a} = ({it} * 2 + 1) % {n - 1}")
            self.emit(c1, f"{w} = {u}[{a}:{a} + 2]")
            self.emit(c1, f"s += {w}[0] * {w}[1] * {e}")
            self.emit(c1, f"if {self.cond(c1)}:")
            c4 = c1.inner(branch=True)
            r = self.fresh("r")
            self.emit(c4, f"{r} = {u}.reshape(({n}, 1))")
            self.emit(c4, f"s += np.sum({r} * {r}) * {c}")
            if self.chance(0.5):
                self.emit(c1, f"{u} = {u} * {self.const(0.5, 1.1)}")
        elif form == "settle":         # a while on data in the step (its test is set by its
            k = self.fresh("k")        # condition's statements) and a number carried across steps
            self.emit(c1, f"{k} = 0")
            self.emit(c1, f"while {x} < {self.const(0.5, 2.0)} and {k} < 3:")
            self.emit(c1.inner(), f"{x} = {x} * 1.3 + {c}")
            self.emit(c1.inner(), f"{k} += 1")
            self.emit(c1, f"{x} = {x} * 0.7 + {c} * np.sum({u}) * {e}")
            self.emit(c1, f"{u} = {u} * 0.9 + {c} * {x}")
            self.emit(ctx, f"s += {x}")
        elif form == "slices":         # views whose shape changes with the iteration
            y = self.fresh("y")
            self.emit(c1, f"{y} = {u}[{it}:] * {e}" if self.chance(0.5) else
                      f"{y} = {u}[:{n} - {it}] + {u}[{it}:] * {c}")
            self.emit(c1, f"s += np.sum({y} * {y}) * {c}")
            if self.chance(0.5):
                self.emit(c1, f"{u} = {u} * {self.const(0.5, 1.1)}")
        elif form == "drop":           # a fresh array each step, handed to a ufunc (whose rule
            y, z = self.fresh("y"), self.fresh("z")    # may keep it), written, then dropped
            made = self.pick([(2, f"{u} * {c} + {e}"), (1, f"{u} * {u} + {c}"), (1, f"-{u}"),
                              (1, f"np.tanh({u} * {c})"), (1, f"np.exp({u} * {c})")])
            if made.startswith("np."):   # a rule's result (its pullback may keep it)
                self.use(f"time loop: drop, result of {made.split('(')[0]}")
            self.emit(c1, f"{y} = {made}")
            label, ufunc = self.pick([(1, ("np.arctan", f"np.arctan({y})")),
                                      (1, ("np.maximum", f"np.maximum({y}, {c})")),
                                      (1, ("np.power", f"np.power({y}, 2.0)")),
                                      (1, ("np.log1p", f"np.log1p({y} * {y})")),
                                      (1, ("np.tanh", f"np.tanh({y})")),
                                      (1, ("np.sin", f"np.sin({y})")), (1, ("*", f"{y} * {y}"))])
            self.use(f"time loop: drop, {label}")
            self.emit(c1, f"{z} = {ufunc}")
            if self.chance(0.7):       # overwritten, or updated (its old value still counts)
                self.emit(c1, f"{y}[{self.r.randint(0, n - 1)}] " + self.pick([
                    (1, f"= {y}[1] * {c} + {e}"), (1, f"*= {y}[1] * {c} + 1.2"),
                    (1, f"+= {c} * {y}[1]")]))
            if self.chance(0.4):
                self.emit(c1, f"for {i} in range(1, {n - 1}):")
                self.emit(c2, f"{y}[{i}] = {y}[{i}] * 0.5 + {c} * {u}[{i}]")
            self.emit(c1, f"s += np.sum({z}) * {c}")
            self.emit(c1, f"{u} = " + self.pick([(2, f"{y} * 0.9 + {c} * {z}"),
                                                 (1, f"{u} + {c} * {y}"), (1, f"{y}")]))
        else:                          # an array temporary in an inner loop
            self.emit(c1, f"for {i} in range({n}):")
            c3 = c1.inner(loops=ctx.loops + ((i, 0, n - 1),))
            self.emit(c3, f"{w} = {u} * {u}[{i}]")
            self.emit(c3, f"s += np.sum({w}) * {c}")
            self.emit(c1, f"{u} = {u} * {e}")
        self.emit(ctx, f"s += np.sum({u} * {u}) * {self.const(0.1, 0.5)} + {u}[0]")
