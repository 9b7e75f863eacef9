"""Calls in expressions: the pool's helpers, generic functions and rules
(numbarules.fuzz.pool), recursion, structs passed to helpers, and the program's own local
helpers (plain, @numba.njit, recursive). ``Calls`` is that part of the generator (a mixin of
``generator.Generator``).
"""

from .base import _Ctx


class Calls:
    def call_expr(self, ctx, d):
        F = lambda: self.fexpr(ctx, d)  # noqa: E731
        B = lambda: self.bounded(ctx, d)  # noqa: E731
        pool = self.pool
        x = F
        vec = self.vecs(ndim=1)
        mats = self.vecs(ndim=2)
        opts = [
            (2, lambda: pool("p_mix", f"p_mix({x()}, {x()})", "plain helper")),
            (1.5, lambda: pool("p_soft", f"p_soft({x()})", "plain helper")),
            (1.5, lambda: pool("j_poly", f"j_poly({B()})", "njit helper")),
            (1, lambda: pool("j_clipsoft", f"j_clipsoft({x()})", "njit helper")),
            (1, lambda: pool("j_scaled", f"j_scaled({B()})", "njit helper")),
            (1.5, lambda: pool("g_energy", f"g_energy({x()})", "generic function")),
            (1, lambda: pool("g_scale", f"g_scale({x()}, {x()})", "generic function")),
            (1, lambda: pool("g_smooth", f"g_smooth({x()})", "generic function with a rule")),
            (1, lambda: pool("r_cube", f"r_cube({B()})", "rrule function")),
            (1, lambda: pool("r_powi", f"r_powi({B()}, {self.r.randint(1, 3)})",
                             "rrule function")),
            (1, lambda: pool("r_jsq", f"r_jsq({B()})", "rrule on an njit function")),
            (1.5, lambda: self.local_helper_call(ctx, d)),
            (1.5, lambda: self.function_value_call(f"h_apply({{}}, {B()})", "h_apply")),
        ]
        if vec:
            v = self.r.choice(vec)
            same = [u for u in vec if u.shape == v.shape]
            u = self.r.choice(same)
            opts += [
                (1, lambda: pool("p_vdot", f"p_vdot({v.expr}, {u.expr})", "plain helper, arrays")),
                (1, lambda: pool("j_sumsq", f"j_sumsq({v.expr})", "njit helper, arrays")),
                (1, lambda: pool("g_energy", f"g_energy({v.expr})", "generic function, arrays")),
                (1, lambda: pool("g_scale", f"g_scale({v.expr}, {x()})",
                                 "generic function, arrays")),
                (1, lambda: pool("g_smooth", f"g_smooth({v.expr})", "generic function, arrays")),
                (1, lambda: pool("r_vnorm2", f"r_vnorm2({v.expr})", "rrule function, arrays")),
                (1, lambda: self.function_value_call(f"h_fold({{}}, {v.expr})", "h_fold")),
            ]
        if mats:
            M = self.r.choice(mats)
            row = lambda: self.r.randrange(M.shape[0])  # noqa: E731
            opts.append((1, lambda: pool("p_rownorm", f"p_rownorm({M.expr}, {row()})",
                                         "plain helper, arrays")))
        return self.pick(opts)()

    # functions of one float passed as values: plain, njit, generic (with and without a rule),
    # an rrule's, and lambdas written in the program
    _FUNCTION_VALUES = ("p_soft", "j_poly", "j_clipsoft", "g_energy", "g_smooth", "r_cube",
                        "lambda t: 0.5 * t * t - t", "lambda t: math.sin(t) * t")

    def function_value_call(self, template, helper):
        """``helper(fn, ...)`` with ``fn`` a function passed as a value."""
        fn = self.r.choice(self._FUNCTION_VALUES)
        if not fn.startswith("lambda"):
            self.pool_names.add(fn)
        self.use("function value" + (", lambda" if fn.startswith("lambda") else ""))
        return self.pool(helper, template.format(fn), "function value")

    def pool(self, name, expr, tag):
        self.pool_names.add(name)
        self.use(tag)
        return expr

    def recursion_expr(self, ctx, d):
        B = lambda: self.bounded(ctx, d)  # noqa: E731
        pool = self.pool
        vec = self.vecs(ndim=1)
        opts = [(2, lambda: pool("p_rpow", f"p_rpow({B()}, {self.r.randint(0, 4)})",
                                      "recursion"))]
        for name in self.ints():
            opts.append((1, lambda name=name: pool(
                "p_rpow", f"p_rpow({B()}, {name})", "recursion")))
        if vec:
            v = self.r.choice(vec)
            k = lambda: self.r.randrange(v.shape[0])  # noqa: E731
            opts.append((2, lambda: pool("p_rsum", f"p_rsum({v.expr}, {k()})",
                                              "recursion over an array")))
        opts.append((2, lambda: self.local_recursive_call(ctx, d)))
        opts.append((1, lambda: self.local_mutual_recursion(ctx, d)))
        return self.pick(opts)()

    def local_mutual_recursion(self, ctx, d):
        """Two helpers calling each other (each with a base case: Numba types the recursion
        through it), differentiated in both modes (forward mode since 2026-12-07)."""
        ra, rb = self.fresh("rec"), self.fresh("rec")
        self.helpers.append(f"def {ra}(a, n):\n    if n <= 0:\n        return a\n"
                            f"    return {rb}(a * 0.7, n - 1) + 0.2 * a\n")
        self.helpers.append(f"def {rb}(a, n):\n    if n <= 0:\n        return a * a\n"
                            f"    return math.sin({ra}(a, n - 1))\n")
        self.local_helpers[ra] = self.local_helpers[rb] = ("rec", 2)
        self.use("mutual recursion")
        return f"{ra}({self.fexpr(ctx, d)}, {self.r.randint(0, 4)})"

    def struct_call(self, ctx, d):
        F = lambda: self.fexpr(ctx, d)  # noqa: E731
        pool = self.pool
        opts = [(0.1, lambda: F())]
        for a in self.args:
            if a.kind == "struct" and a.cls == "Params":
                opts.append((1, lambda a=a: pool("p_params", f"p_params({a.name}, {F()})",
                                                      "struct to a plain helper")))
                opts.append((1, lambda a=a: pool("g_energy", f"g_energy({a.name})",
                                                      "struct to a generic function")))
            if a.kind == "struct" and a.cls == "Pair":
                opts.append((1, lambda a=a: pool("r_pairdot", f"r_pairdot({a.name}, {F()})",
                                                      "struct to an rrule function")))
            if a.kind == "struct" and a.cls == "Nest2":
                opts.append((1, lambda a=a: pool("r_pairdot", f"r_pairdot({a.name}.q, {F()})",
                                                      "nested struct field to an rrule function")))
                opts.append((1, lambda a=a: pool("g_energy", f"g_energy({a.name}.v)",
                                                      "struct array field to a generic function")))
                opts.append((1, lambda a=a: f"{a.name}.q.a * {a.name}.v[0] + {a.name}.q.b"))
            if a.kind == "struct" and a.cls == "Nest":
                opts.append((1, lambda a=a: pool("p_nest", f"p_nest({a.name}, {F()})",
                                                      "nested struct to a plain helper")))
                opts.append((1, lambda a=a: pool("g_energy", f"g_energy({a.name}.p)",
                                                      "nested struct field to a generic function")))
        for name, cls in self.structs_local:
            opts.append((1, lambda name=name: pool(
                "r_pairdot", f"r_pairdot({name}, {F()})", "built struct to an rrule function")))
        return self.pick(opts)()

    # --- local helpers -------------------------------------------------------------------------

    def local_helper_call(self, ctx, d):
        existing = [n for n in self.local_helpers if self.local_helpers[n][0] == "plain"]
        if existing and self.chance(0.6):
            name = self.r.choice(existing)
        else:
            name = self.make_local_helper()
        kind, nparams = self.local_helpers[name]
        self.use("local helper" if kind == "plain" else "local njit helper")
        args = ", ".join(self.fexpr(ctx, d) for _ in range(nparams))
        return f"{name}({args})"

    def make_local_helper(self):
        name = self.fresh("h")
        njit = self.chance(0.3)
        nparams = self.r.randint(1, 2)
        params = [f"a{k}" for k in range(nparams)]
        sub = type(self).__new__(type(self))
        sub.__dict__.update(self.__dict__)
        sub.scopes = [{p: "f" for p in params}]
        sub.arrays = [[]]
        sub.args = []
        sub.structs_local = []
        sub.globals_arrays = []
        sub.features = tuple(f for f in self.features if f in ("scalar", "zeros", "branches"))
        body = []
        ctx = _Ctx(depth=1, top=False)
        for _ in range(self.r.randint(1, 3)):
            t = sub.fresh("b")
            body.append(f"    {t} = {sub.fexpr(ctx, 2)}")
            sub.declare(t, "f")
        if "branches" in sub.features and self.chance(0.5):
            body.append(f"    if {sub.cond(ctx)}:")
            body.append(f"        return {sub.fexpr(ctx, 1)}")
        body.append(f"    return {' + '.join(n for n in sub.floats())}")
        self.counter = sub.counter
        self.used |= sub.used
        deco = "@numba.njit\n" if njit else ""
        self.helpers.append(f"{deco}def {name}({', '.join(params)}):\n" + "\n".join(body) + "\n")
        self.local_helpers[name] = ("njit" if njit else "plain", nparams)
        return name

    def local_recursive_call(self, ctx, d):
        name = self.fresh("rec")
        form = self.r.randrange(2)
        if form == 0:
            src = (f"def {name}(a, n):\n"
                   f"    if n <= 0:\n"
                   f"        return a\n"
                   f"    return math.sin({name}(a, n - 1)) + 0.3 * a\n")
        else:
            src = (f"def {name}(a, n):\n"
                   f"    if n == 0:\n"
                   f"        return 1.0\n"
                   f"    b = {name}(a * 0.5, n - 1)\n"
                   f"    return a * b + 0.1\n")
        self.helpers.append(src)
        self.local_helpers[name] = ("rec", 2)
        self.use("local recursion")
        return f"{name}({self.fexpr(ctx, d)}, {self.r.randint(0, 3)})"
