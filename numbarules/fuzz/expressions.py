"""Float expressions, conditions and in-bounds indices over what is in scope: float variables,
array elements, struct fields and tuple items, combined by arithmetic, math functions and
conditional expressions. Calls in expressions are calls.py's. ``Expressions`` is that part of
the generator (a mixin of ``generator.Generator``).
"""

import re

from .base import _Vec


class Expressions:
    def idx(self, n, ctx):
        """An in-bounds index expression for an axis of length ``n``."""
        opts = [(2, str(self.r.randrange(n)))]
        if self.has("arrays") or self.has("scalar"):
            opts.append((0.3, str(-self.r.randint(1, n))))
        for name, lo, hi in ctx.loops:
            offs = list(range(-lo, n - hi)) if hi - lo < n else []
            if offs:
                off = self.r.choice(offs)
                e = name if off == 0 else (f"{name} + {off}" if off > 0 else f"{name} - {-off}")
                opts.append((4, e))
                cs = list(range(hi, n + lo))
                if cs:
                    opts.append((1, f"{self.r.choice(cs)} - {name}"))
            if lo >= 0:
                opts.append((1, f"{name} % {n}"))
        return self.pick(opts)

    def elem(self, vec, ctx):
        if vec.ndim == 1:
            return f"{vec.expr}[{self.idx(vec.shape[0], ctx)}]"
        return f"{vec.expr}[{self.idx(vec.shape[0], ctx)}, {self.idx(vec.shape[1], ctx)}]"

    def struct_atoms(self):
        out = []
        for a in self.args:
            if a.kind != "struct":
                continue
            out += self._struct_paths(a.name, a.cls, a.sizes)
        for name, cls in self.structs_local:
            out += [(f"{name}.a", "f"), (f"{name}.b", "f")]
        return out

    def _struct_paths(self, base, cls, sizes):
        if cls == "Params":
            return [(f"{base}.a", "f"), (f"{base}.w", ("v", sizes["w"])), (f"{base}.k", "i")]
        if cls == "Pair":
            return [(f"{base}.a", "f"), (f"{base}.b", "f")]
        if cls == "Nest":
            return self._struct_paths(f"{base}.p", "Params", sizes) + [(f"{base}.c", "f")]
        return self._struct_paths(f"{base}.q", "Pair", sizes) + [(f"{base}.v", ("v", sizes["v"]))]

    def atom(self, ctx):
        opts = []
        for name in self.floats():
            opts.append((3, name))
        for v in self.vecs():
            opts.append((3 if v.ndim == 1 else 2, ("elem", v)))
        for path, kind in self.struct_atoms():
            if kind == "f":
                opts.append((3, path))
            elif kind == "i":
                opts.append((0.5, f"{path} * 0.5"))
            else:
                opts.append((2, ("elem", _Vec(path, (kind[1],)))))
        for a in self.args:
            if a.kind == "tf":
                opts.append((3, f"{a.name}[{self.r.randrange(a.shape[0])}]"))
                if self.has("tuple_loop"):
                    for name, lo, hi in ctx.loops:
                        if lo >= 0 and hi < a.shape[0]:
                            opts.append((6, f"{a.name}[{name}]"))
                            self.use("tuple indexed by a loop variable")
            elif a.kind == "th":
                opts.append((2, f"{a.name}[0]"))
                opts.append((1, f"{a.name}[0] * {a.name}[1]"))
            elif a.kind == "ta":
                for k in range(a.shape[0]):
                    opts.append((1, ("elem", _Vec(f"{a.name}[{k}]", (a.shape[1],)))))
        for name in self.ints():
            opts.append((0.5, f"{name} * {self.const(0.1, 0.5)}"))
        for name, lo, hi in ctx.loops:
            opts.append((0.7, f"{name} * {self.const(0.1, 0.5)}"))
        opts.append((0.5, self.const(-1.0, 1.0)))
        choice = self.pick(opts)
        if isinstance(choice, tuple):
            return self.elem(choice[1], ctx)
        return choice

    def pos(self, ctx, depth):
        """A float expression bounded below by about 0.5."""
        a = self.fexpr(ctx, depth)
        sq = f"{a} * {a}" if re.fullmatch(r"[\w.\[\], ]+", a) else f"({a}) * ({a})"
        return self.pick([       # (a) * (a): a - b * a - b is not a square (seed 20261215 #78)
            (2, f"(1.0 + {sq})"), (2, f"(2.0 + math.sin({a}))"),
            (1, f"(1.5 + math.tanh({a}))"), (1, f"({sq} + 0.5)"),
            (1, f"math.exp(math.sin({a}))"), (1, f"(3.0 + math.cos({a}))")])

    def bounded(self, ctx, depth):
        a = self.fexpr(ctx, depth)
        return self.pick([(2, f"math.tanh({a})"), (2, f"math.sin({a})"), (1, f"math.cos({a})"),
                          (1, f"(0.5 * math.atan({a}))")])

    def fexpr(self, ctx, depth=2):
        if depth <= 0 or self.chance(0.25):
            return self.atom(ctx)
        d = depth - 1
        F = lambda: self.fexpr(ctx, d)  # noqa: E731
        P = lambda: self.pos(ctx, d)  # noqa: E731
        B = lambda: self.bounded(ctx, d)  # noqa: E731
        T = self.tag
        opts = [
            (3, lambda: f"{F()} + {F()}"),
            (2, lambda: f"{F()} - {F()}"),
            (3, lambda: f"{F()} * {F()}"),
            (2, lambda: f"{self.const()} * {F()}"),
            (1, lambda: f"({F()} - {F()})"),
            (1, lambda: f"math.tanh({F()})"),
        ]
        if self.has("scalar"):
            opts += [
                (2, lambda: T("division", f"{F()} / {P()}")),
                (1, lambda: T("division", f"{F()} / {self.const(0.5, 3)}")),
                (1, lambda: T("unary minus", f"-{F()}")),
                (1, lambda: T("unary minus", f"-({F()})")),
                (1, lambda: T("power", f"({F()}) ** {self.r.choice([2, 3])}")),
                (1, lambda: T("power", f"{P()} ** {self.r.choice(['0.5', '1.5', '2.5', '-0.5'])}")),
                (0.5, lambda: T("power", f"{self.r.choice(['0.5', '2.0', '1.5'])} ** {B()}")),
                (0.5, lambda: T("power", f"{P()} ** {B()}")),
                (0.5, lambda: T("power", f"pow({P()}, {self.const(0.5, 2.0)})")),
                (1, lambda: T("math", f"math.sin({F()})")),
                (1, lambda: T("math", f"math.cos({F()})")),
                (1, lambda: T("math", f"math.exp({B()})")),
                (0.5, lambda: T("math", f"math.exp(-({F()}) ** 2)")),
                (1, lambda: T("math", f"math.log({P()})")),
                (0.5, lambda: T("math", f"math.log1p({P()})")),
                (0.3, lambda: T("math", f"math.log2({P()})")),
                (0.3, lambda: T("math", f"math.log10({P()})")),
                (0.5, lambda: T("math", f"math.expm1({B()})")),
                (1, lambda: T("math", f"math.sqrt({P()})")),
                (1, lambda: T("math", f"math.atan({F()})")),
                (0.5, lambda: T("math", f"math.atan2({F()}, {P()})")),
                (0.7, lambda: T("math", f"math.hypot({F()}, {P()})")),
                (0.3, lambda: T("math", f"math.hypot({F()}, {F()})")),
                (0.5, lambda: T("math", f"math.sinh({B()})")),
                (0.5, lambda: T("math", f"math.cosh({B()})")),
                (0.5, lambda: T("math", f"math.tan(0.5 * {B()})")),
                (0.5, lambda: T("math", f"math.asin(0.9 * {B()})")),
                (0.5, lambda: T("math", f"math.acos(0.9 * {B()})")),
                (0.5, lambda: T("math", f"math.erf({F()})")),
                (0.3, lambda: T("math", f"math.fabs({F()})")),
                # float(): math.floor returns an int (in Python and in Numba), and a float
                # expression may become a Float64 struct field
                (0.3, lambda: T("math", f"float(math.floor({F()}))")),
                (1, lambda: T("abs", f"abs({F()})")),
                (1, lambda: T("min/max", f"min({F()}, {F()})")),
                (1, lambda: T("min/max", f"max({F()}, {F()})")),
                (0.3, lambda: T("floordiv/mod", f"({F()}) // {self.const(0.5, 2)}")),
                (0.3, lambda: T("floordiv/mod", f"({F()}) % {self.const(0.5, 2)}")),
                (1.5, lambda: T("conditional expression",
                                       f"({F()} if {self.cond(ctx, d)} else {F()})")),
            ]
        if self.has("zeros"):
            opts += [
                (2, lambda: T("0.0 / x", f"0.0 / {P()}")),
                (2, lambda: T("0.0 ** y", f"0.0 ** {P()}")),
                (1, lambda: T("0.0 * x", f"0.0 * {F()}")),
                (1, lambda: T("x ** 1.0", f"{P()} ** 1.0")),
            ]
        if self.has("calls"):
            opts += [(4, lambda: self.call_expr(ctx, d))]
        if self.has("recursion"):
            opts += [(1.5, lambda: self.recursion_expr(ctx, d))]
        if self.has("structs") or self.has("nested_structs"):
            opts += [(1.5, lambda: self.struct_call(ctx, d))]
        return self.pick(opts)()

    def tag(self, t, s):
        self.use(t)
        return s

    def cond(self, ctx, depth=1):
        d = max(depth - 1, 0)
        a, b = self.fexpr(ctx, d), self.fexpr(ctx, d)
        op = self.r.choice(["<", ">", "<=", ">="])
        base = f"{a} {op} {b}"
        opts = [(4, base), (1, f"{a} {op} {self.const(-0.5, 0.5)}")]
        if self.has("scalar"):
            c = f"{self.fexpr(ctx, 0)} {self.r.choice(['<', '>'])} {self.const(-0.5, 0.5)}"
            opts += [(1, self.tag("and/or/not", f"{base} and {c}")),
                     (1, self.tag("and/or/not", f"{base} or {c}")),
                     (1, self.tag("and/or/not", f"not {base}")),
                     (0.5, self.tag("and/or/not", f"not ({base} and {c})"))]
        for name, lo, hi in ctx.loops:
            opts.append((0.7, f"{name} % 2 == {self.r.randint(0, 1)}"))
        for name in self.ints():
            opts.append((0.3, f"{name} > {self.r.randint(0, 3)}"))
        return self.pick(opts)
