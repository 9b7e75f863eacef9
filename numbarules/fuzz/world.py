"""World changes: a generic function of the program's own, and ``world_change()``, which changes
its methods or rules after the first gradients. Drawn from a random stream of its own
(``generator.WORLD_CHANCE``). ``World`` is that part of the generator (a mixin of
``generator.Generator``).
"""

#: Bodies of a generic function's methods in the world form, with their derivatives (for rules):
#: (value of x, d/dx), constants {a} and {b} drawn per program.
_WORLD_BODIES = (
    ("{a} * x + math.sin({b} * x)", "{a} + {b} * math.cos({b} * x)"),
    ("x * math.tanh({a} * x)",
     "math.tanh({a} * x) + {a} * x * (1.0 - math.tanh({a} * x) ** 2)"),
    ("math.exp({a} * math.sin(x))", "{a} * math.cos(x) * math.exp({a} * math.sin(x))"),
    ("{a} * x * x - x", "2.0 * {a} * x - 1.0"),
    ("{a} * math.log(1.0 + x * x)", "{a} * 2.0 * x / (1.0 + x * x)"),
    ("math.cos({a} * x) + {b}", "-{a} * math.sin({a} * x)"),
)


class World:
    def s_world(self, ctx):
        """A generic function ``w_g`` of the program's own, called from ``f``, and
        ``world_change()``, which the runner calls after the first gradients: it adds a more
        specific method, replaces the method, makes an int result a float, adds a rule, or adds a
        method that writes into its array argument. Old and new gradient objects must then follow
        the new method (the old pullback keeps its world)."""
        kinds = [(2, "method"), (1.5, "replace"), (1.5, "int"), (1, "rule"),
                 (1.5, "method+rule"), (1, "write")]
        if self.vecs(ndim=1):
            kinds.append((1.5, "vector"))
        kind = self.pick(kinds)
        self.use("world: " + kind)
        a, b = self.const(0.3, 1.5), self.const(0.5, 1.5)
        old, new = self.r.sample(_WORLD_BODIES, 2)
        old = tuple(t.format(a=a, b=b) for t in old)
        new = tuple(t.format(a=b, b=a) for t in new)
        blocks, change = [], []

        def generic(sig, body):
            blocks.append(f"@nr.generic\ndef w_g({sig}):\n{body}")

        def fn(name, params, body):
            blocks.append(f"def {name}({params}):\n{body}")

        def rule(body, deriv):
            fn("w_g_rule", "x", f"    y = {body}\n\n    def w_g_pullback(dy):\n"
                                f"        return (dy * ({deriv}),)\n    return y, w_g_pullback\n")
            change.append("nr.rrule(w_g, nr.Float64)(w_g_rule)")

        if kind == "vector":
            loop = "    s = 0.0\n    for i in range(v.shape[0]):\n        x = v[i]\n"
            generic("v: nr.AbstractVector", f"{loop}        s += {old[0]}\n    return s\n")
            fn("w_g_new", "v", f"{loop}        s += {new[0]}\n    return s\n")
            change.append("w_g.method(nr.Vector[nr.Float64])(w_g_new)")
            call = lambda e: f"w_g({self.r.choice(self.vecs(ndim=1)).expr})"  # noqa: E731
        elif kind == "write":
            generic("a: nr.AbstractVector, x: nr.Float64", f"    return {old[0]}\n")
            fn("w_g_new", "a, x", f"    a[0] = a[0] + {b} * x\n    return {old[0]}\n")
            change.append("w_g.method(nr.Vector[nr.Float64], nr.Float64)(w_g_new)")
            self.may_refuse.add("hidden write")
            buf = self.fresh("wb")
            self.emit(ctx, f"{buf} = np.zeros(3)")
            call = lambda e: f"w_g({buf}, {e})"  # noqa: E731
        else:
            sig = "x: nr.Real" if kind in ("method", "int", "method+rule") else "x: nr.Float64"
            generic(sig, "    return 2\n" if kind == "int" else f"    return {old[0]}\n")
            if kind == "rule":
                rule(*old)
            else:
                fn("w_g_new", "x", f"    return {new[0]}\n")
                change.append("w_g.method(nr.Float64)(w_g_new)")
                if kind == "method+rule":
                    rule(*new)
            call = lambda e: f"w_g({e})"  # noqa: E731
        # the call site: straight, in a loop, in a branch, or through a plain helper
        site = self.pick([(2, "straight"), (2, "loop"), (1, "branch"), (2, "helper")])
        self.use("world call: " + site)
        if site == "helper" and kind in ("write", "vector"):
            # the array is f's: the helper takes it as a parameter
            helper = self.fresh("hw")
            arr = buf if kind == "write" else self.r.choice(self.vecs(ndim=1)).expr
            inner = "w_g(a, t)" if kind == "write" else "w_g(a)"
            blocks.append(f"def {helper}(a, t):\n    return {self.const()} * {inner} + t\n")
            call = lambda e: f"{helper}({arr}, {e})"  # noqa: E731
        elif site == "helper":
            helper = self.fresh("hw")
            blocks.append(f"def {helper}(t):\n    return {self.const()} * {call('t')} + t\n")
            call = lambda e: f"{helper}({e})"  # noqa: E731
        if site == "loop":
            i, n = self.fresh("i"), self.r.randint(1, 3)
            self.emit(ctx, f"for {i} in range({n}):")
            inner = ctx.inner(loops=ctx.loops + ((i, 0, n - 1),), in_loop=True, loop_kind="for")
            self.push()
            self.emit(inner, f"s += {self.const()} * {call(self.bounded(inner, 1))}")
            self.pop()
        elif site == "branch":
            self.emit(ctx, f"if {self.cond(ctx)}:")
            self.emit(ctx.inner(branch=True),
                      f"s += {self.const()} * {call(self.bounded(ctx, 1))}")
        else:
            self.emit(ctx, f"s += {self.const()} * {call(self.bounded(ctx, 1))}")
        if kind == "write":
            self.emit(ctx, f"s += {buf}[0] * {self.bounded(ctx, 1)}")
        blocks.append("def world_change():\n"
                      f'    """Called by the fuzzer after the first gradients ({kind})."""\n'
                      + "".join(f"    {c}\n" for c in change))
        self.helpers += blocks
