"""The constructs the README lists as refused (writes into argument arrays, views and array
temporaries in loops, arrays bound in branches, structs built in branches, hidden writes,
NumPy functions without a rule, ...): the engine must refuse them cleanly or differentiate them
right. Each records in ``may_refuse`` the refusal classes (``generator.REFUSAL_CLASSES``) it may
legitimately get. ``Refusals`` is that part of the generator (a mixin of
``generator.Generator``).
"""


class Refusals:
    def s_refusal(self, ctx):
        vec = self.vecs(ndim=1)
        names = {a.name for a in self.args if a.kind == "v"}
        args_vec = [v for v in vec if v.expr in names]
        forms = [(1, "struct in branch")]
        if args_vec:
            forms += [(1, "arg write"), (1, "view in loop"), (1, "temporary in loop"),
                      (1, "rebound in branch"), (1, "for over array"), (0.5, "cumprod"),
                      (0.5, "alias write")]
        form = self.pick(forms)
        i = self.fresh("i")
        inner = ctx.inner(in_loop=True, loop_kind="for")
        if form == "struct in branch":
            self.use("refusal: struct built in a branch")
            self.may_refuse.add("struct built in loop or branch")
            self.pool_names.add("Pair")
            q = self.fresh("q")
            self.emit(ctx, f"if {self.cond(ctx)}:")
            self.emit(ctx.inner(), f"{q} = Pair({self.fexpr(ctx, 1)}, 0.5)")
            self.emit(ctx, "else:")
            self.emit(ctx.inner(), f"{q} = Pair({self.fexpr(ctx, 1)}, 1.5)")
            self.emit(ctx, f"s += {q}.a * {q}.b")
            return
        v = self.r.choice(args_vec)
        n = v.shape[0]
        if form == "arg write":
            self.use("refusal: write into an argument array")
            self.may_refuse.update({"argument write", "write through a returned view"})
            self.emit(ctx, f"{v.expr}[0] = {self.fexpr(ctx, 1)}")
        elif form == "view in loop":
            self.use("refusal: view taken in a loop")
            self.may_refuse.add("view in loop or branch")
            w = self.fresh("w")
            self.emit(ctx, f"for {i} in range({n - 1}):")
            self.emit(inner, f"{w} = {v.expr}[{i}:{i} + 2]")
            self.emit(inner, f"s += {w}[0] * {w}[1]")
        elif form == "temporary in loop":
            self.use("refusal: array temporary in a loop")
            self.may_refuse.update({"view in loop or branch", "array rebound", "tape cannot hold"})
            self.emit(ctx, f"for {i} in range(2):")
            self.emit(inner, f"s += np.sum({v.expr} * {v.expr}) * {self.fexpr(ctx, 1)}")
        elif form == "rebound in branch":
            self.use("refusal: array bound in a branch")
            self.may_refuse.update({"array rebound", "view in loop or branch", "tape cannot hold"})
            w = self.fresh("w")
            self.emit(ctx, f"{w} = {v.expr} * 2.0")
            self.emit(ctx, f"if {self.cond(ctx)}:")
            self.emit(ctx.inner(), f"{w} = {v.expr} * 3.0")
            self.emit(ctx, f"s += {w}[0]")
        elif form == "alias write":
            self.use("refusal: write through np.asarray")
            self.may_refuse.update({"write through a returned view", "outside the language"})
            a, w = self.fresh("a"), self.fresh("w")
            self.emit(ctx, f"{a} = {v.expr} * 1.0")
            how = self.pick([(1, "asarray"), (1, "ascontiguousarray"), (0.5, "out"),
                             (0.5, "fill"), (1, "part"), (1, "helper"), (0.5, "flat"),
                             (1, "fancy"), (0.5, "tuple helper"), (0.5, "view helper"),
                             (0.5, "recursive writers")])
            if how == "fancy":       # an array of indices or a mask (a copy, not a view)
                self.may_refuse.add("fancy index")
                idx = self.pick([(1, f"np.arange(0, {v.shape[0]}, 2)"), (1, f"{a} > 0.1")])
                self.emit(ctx, f"{w} = np.sum({a}[{idx}] * {a}[{idx}])")
                self.emit(ctx, f"s += {w}")
            elif how == "flat":      # through an attribute the analysis does not follow
                self.may_refuse.add("hidden write")
                self.emit(ctx, f"{a}.{self.pick([(1, 'flat'), (1, 'real')])}[0] = "
                               f"{self.fexpr(ctx, 1)}")
                self.emit(ctx, f"{w} = 0.0")
            elif how == "helper":    # a helper that fills the array it is given
                self.may_refuse.add("hidden write")
                self.pool_names.add("j_fill")
                self.emit(ctx, f"{w} = j_fill({a}, {self.fexpr(ctx, 1)})")
            elif how == "tuple helper":     # a helper writing into an array a tuple holds
                self.use("refusal: a helper writes into an array a tuple holds")
                self.may_refuse.add("hidden write")
                h = self.fresh("hp")
                self.helpers.append(f"def {h}(t, v):\n    t[0][1] = v * t[1]\n    return v\n")
                self.emit(ctx, f"{w} = {h}(({a}, 0.5), {self.fexpr(ctx, 1)})")
                self.emit(ctx, f"s += {w}")
            elif how == "view helper":      # a helper writing through a view another returned
                self.use("refusal: a helper writes through a view another returned")
                self.may_refuse.add("hidden write")
                self.pool_names.add("p_mid")
                h = self.fresh("hv")
                self.helpers.append(f"def {h}(u, v):\n    r = p_mid(u)\n    r[0] = v\n"
                                    f"    return v * 0.5\n")
                self.emit(ctx, f"{w} = {h}({a}, {self.fexpr(ctx, 1)})")
                self.emit(ctx, f"s += {w}")
            elif how == "recursive writers":   # mutually recursive helpers, one writes
                self.use("refusal: mutually recursive helpers, one writes")
                self.may_refuse.add("hidden write")
                ra, rb = self.fresh("ra"), self.fresh("rb")
                self.helpers.append(f"def {ra}(u, n, v):\n    if n <= 0:\n        return v\n"
                                    f"    return {rb}(u, n - 1, v)\n")
                # a base case in both: Numba cannot type the recursion otherwise
                self.helpers.append(f"def {rb}(u, n, v):\n    if n <= 0:\n        return v\n"
                                    f"    k = n % u.shape[0]\n    u[k] = u[k] + v\n"
                                    f"    return {ra}(u, n - 1, v * 0.5)\n")
                self.emit(ctx, f"{w} = {ra}({a}, {self.r.randint(2, 3)}, {self.fexpr(ctx, 1)})")
                self.emit(ctx, f"s += {w}")
            elif how == "part":      # an array taken out of a local tuple
                self.may_refuse.add("write into a part")
                self.emit(ctx, f"{w} = ({a}, 1.0)")
                self.emit(ctx, f"{w}[0][0] = {self.fexpr(ctx, 1)}")
            elif how == "out":       # a ufunc's output argument
                self.emit(ctx, f"{w} = np.multiply({a}, {self.fexpr(ctx, 1)}, {a})")
            elif how == "fill":      # an in-place method
                self.emit(ctx, f"{w} = {a}.fill({self.fexpr(ctx, 1)})")
            else:
                self.emit(ctx, f"{w} = np.{how}({a})")
                self.emit(ctx, f"{w}[0] = {self.fexpr(ctx, 1)}")
            self.emit(ctx, f"s += np.sum({a} * {a})")
        elif form == "for over array":
            self.use("refusal: for over an array")
            self.may_refuse.add("outside the language")
            e = self.fresh("e")
            self.emit(ctx, f"for {e} in {v.expr}:")
            self.emit(inner, f"s += {e} * {e}")
        else:
            self.use("refusal: NumPy function without a rule")
            self.may_refuse.update({"no rule", "outside the language"})
            self.emit(ctx, f"s += np.sum(np.cumprod({v.expr}))")
