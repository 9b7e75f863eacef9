"""Array statements: local arrays, element writes, rows, views, whole-array NumPy and its
reductions, module-level constant arrays, helpers that return views, and loops over argument
arrays. ``Arrays`` is that part of the generator (a mixin of ``generator.Generator``).
"""

from .base import _Vec


class Arrays:
    def s_alloc(self, ctx):
        vec = self.vecs(ndim=1)
        mats = self.vecs(ndim=2)
        name = self.fresh("a")
        if mats and self.chance(0.3):
            M = self.r.choice(mats)
            r, c = M.shape
            self.use("local 2-D array")
            init = self.pick([(2, f"np.zeros(({r}, {c}))"), (1, f"np.zeros_like({M.expr})"),
                              (1, f"{M.expr}.copy()"), (1, f"np.ones(({r}, {c}))")])
            contig = not init.startswith("np.zeros_like") or M.contig
            self.emit(ctx, f"{name} = {init}")
            A = _Vec(name, (r, c), contig=contig, writable=True, local=True)
            self.declare_array(A)
            if self.chance(0.7):
                i, j = self.fresh("i"), self.fresh("j")
                self.emit(ctx, f"for {i} in range({r}):")
                c1 = ctx.inner(loops=ctx.loops + ((i, 0, r - 1),), in_loop=True, loop_kind="for")
                self.emit(c1, f"for {j} in range({c}):")
                c2 = c1.inner(loops=c1.loops + ((j, 0, c - 1),))
                op = self.r.choice(["=", "+="])
                self.emit(c2, f"{name}[{i}, {j}] {op} {self.fexpr(c2, 2)}")
            return
        n = (self.r.choice([v.shape[0] for v in vec]) if vec and self.chance(0.8)
             else self.r.randint(3, 5))
        same = [v for v in vec if v.shape[0] == n]
        src = self.r.choice(same) if same else None
        forms = [(2, (f"np.zeros({n})", True)), (1, (f"np.ones({n})", True)),
                 (1, (f"np.full({n}, {self.const(-1, 1)})", True))]
        if src is not None:
            forms += [(2, (f"{src.expr}.copy()", True)),
                      (2, (f"np.zeros_like({src.expr})", src.contig)),
                      (0.5, (f"np.empty_like({src.expr})", src.contig))]
        else:
            forms.append((0.5, (f"np.empty({n})", True)))
        init, contig = self.pick(forms)
        if self.chance(0.12):
            # an array literal of scalar expressions (the frontend writes it element by element)
            init, contig = "np.array([" + ", ".join(self.fexpr(ctx, 1) for _ in range(n)) \
                + "])", True
        self.use("local array " + init.split("(")[0].replace(src.expr if src else "#", "x"))
        self.emit(ctx, f"{name} = {init}")
        A = _Vec(name, (n,), contig=contig, writable=True, local=True)
        needs_fill = "empty" in init
        if needs_fill or self.chance(0.6):
            i = self.fresh("i")
            self.emit(ctx, f"for {i} in range({n}):")
            c1 = ctx.inner(loops=ctx.loops + ((i, 0, n - 1),), in_loop=True, loop_kind="for")
            op = "=" if needs_fill else self.r.choice(["=", "+=", "-=", "*="])
            self.emit(c1, f"{name}[{i}] {op} {self.fexpr(c1, 2)}")
        if n >= 3 and self.chance(0.25):
            # a slice stored from an overlapping view of the same array (u[1:] = u[:-1])
            self.use("slice stored from an overlapping view")
            self.emit(ctx, f"{name}[1:] = {name}[:-1]" if self.chance(0.5) else
                      f"{name}[:-1] = {name}[1:] * {self.const(0.5, 1.5)}")
        self.declare_array(A)

    def s_elem_write(self, ctx):
        A = self.r.choice(self.vecs(writable=True))
        self.use("element write" if A.ndim == 1 else "2-index element write")
        target = self.elem(A, ctx)
        op = self.pick([(2, "="), (3, "+="), (1, "-="), (1, "*=")])
        e = self.fexpr(ctx, 2) if op != "*=" else self.const(0.3, 1.2)
        self.emit(ctx, f"{target} {op} {e}")

    def s_elem_loop(self, ctx):
        A = self.r.choice(self.vecs(writable=True))
        n = A.shape[0]
        i = self.fresh("i")
        self.use("element writes in a loop")
        self.emit(ctx, f"for {i} in range({n}):")
        inner = ctx.inner(loops=ctx.loops + ((i, 0, n - 1),), in_loop=True, loop_kind="for")
        self.push()
        if A.ndim == 1:
            self.emit(inner, f"{A.expr}[{i}] {self.r.choice(['=', '+='])} {self.fexpr(inner, 2)}")
        else:
            j = self.idx(A.shape[1], inner)
            self.emit(inner, f"{A.expr}[{i}, {j}] += {self.fexpr(inner, 2)}")
        self.block(inner, self.r.randint(0, 1))
        self.pop()

    def s_rows(self, ctx):
        mats = self.vecs(ndim=2)
        M = self.r.choice(mats)
        r, c = M.shape
        form = self.r.randrange(4)
        if form in (0, 1):
            # h[t] = x[t]: row writes into a 2-D local array in a loop
            h = self.fresh("h")
            t = self.fresh("i")
            self.emit(ctx, f"{h} = np.zeros(({r}, {c}))")
            self.emit(ctx, f"for {t} in range({r}):")
            inner = ctx.inner(loops=ctx.loops + ((t, 0, r - 1),), in_loop=True, loop_kind="for")
            if form == 0:
                self.use("row write h[t] = x[t]")
                self.emit(inner, f"{h}[{t}] = {M.expr}[{t}]")
            else:
                self.use("row write h[t, :] = x[t, :]")
                self.emit(inner, f"{h}[{t}, :] = {M.expr}[{t}, :]")
            if self.chance(0.5):
                self.emit(inner, f"{h}[{t}, {self.r.randrange(c)}] += {self.fexpr(inner, 1)}")
            self.declare_array(_Vec(h, (r, c), contig=True, writable=True, local=True))
        elif form == 2:
            self.use("row read A[i, :]")
            name = self.fresh("r")
            self.emit(ctx, f"{name} = {M.expr}[{self.r.randrange(r)}, :]")
            self.declare_array(_Vec(name, (c,), contig=M.contig, writable=M.writable,
                                    local=M.local))
        else:
            self.use("row write A[i, :] = ...")
            h = self.fresh("h")
            self.emit(ctx, f"{h} = np.zeros(({r}, {c}))")
            k = self.r.randrange(r)
            vec = [v for v in self.vecs(ndim=1) if v.shape[0] == c]
            rhs = (self.r.choice(vec).expr if vec
                   else f"{M.expr}[{self.r.randrange(r)}, :] * {self.const()}")
            self.emit(ctx, f"{h}[{k}, :] = {rhs}")
            self.emit(ctx, f"{h}[{(k + 1) % r}] = {M.expr}[{k}]")
            self.declare_array(_Vec(h, (r, c), contig=True, writable=True, local=True))

    def s_view(self, ctx):
        vec = [v for v in self.vecs(ndim=1) if v.shape[0] >= 3]
        mats = self.vecs(ndim=2)
        name = self.fresh("w")
        opts = []
        if vec:
            v = self.r.choice(vec)
            n = v.shape[0]
            a = self.r.randint(0, n - 2)
            b = self.r.randint(a + 1, n)
            opts.append((3, (f"{v.expr}[{a}:{b}]", (b - a,), v.contig, "slice x[a:b]", v)))
            opts.append((1, (f"{v.expr}[1:]", (n - 1,), v.contig, "slice x[a:]", v)))
            opts.append((1, (f"{v.expr}[::2]", ((n + 1) // 2,), False, "slice x[::2]", v)))
            if n % 2 == 0 and v.contig:
                opts.append((2, (f"{v.expr}.reshape((2, {n // 2}))", (2, n // 2), True,
                                 "reshape", v)))
        if mats:
            M = self.r.choice(mats)
            r, c = M.shape
            opts.append((3, (f"{M.expr}.T", (c, r), False, ".T", M)))
            opts.append((1, (f"{M.expr}.transpose()", (c, r), False, ".transpose()", M)))
            opts.append((2, (f"{M.expr}.ravel()", (r * c,), True, "ravel", M)))
            opts.append((2, (f"{M.expr}[:, {self.r.randrange(c)}]", (r,), False,
                             "column x[:, j]", M)))
            if M.contig:
                opts.append((1, (f"{M.expr}.reshape({r * c})", (r * c,), True, "reshape", M)))
        if not opts:
            return self.s_accum(ctx)
        expr, shape, contig, tag, base = self.pick(opts)
        self.use("view " + tag)
        if tag in ("reshape", "ravel") and self.returned_early:
            # after an early return the rest of the function is a branch for the engine: a
            # reshape/ravel there is refused like one inside a branch (README)
            self.may_refuse.add("view in loop or branch")
        self.emit(ctx, f"{name} = {expr}")
        writable = base.writable and tag != "ravel"
        self.declare_array(_Vec(name, shape, contig=contig, writable=writable, local=base.local))
        if writable and self.chance(0.5):
            self.use("write through a view of a local array")
            self.emit(ctx, f"{name}[{', '.join('0' for _ in shape)}] += {self.fexpr(ctx, 1)}")

    def s_numpy(self, ctx):
        vec = self.vecs(ndim=1)
        mats = self.vecs(ndim=2)
        if not vec:
            return self.s_accum(ctx)
        v = self.r.choice(vec)
        n = v.shape[0]
        same = [u for u in vec if u.shape == v.shape]
        u = self.r.choice(same)
        x = lambda: self.fexpr(ctx, 1)  # noqa: E731
        arr = [
            (2, (f"np.exp(np.sin({v.expr}))", (n,), "np.exp/np.sin")),
            (2, (f"np.tanh({v.expr}) * {self.const()} + {u.expr}", (n,), "np.tanh, broadcasting")),
            (2, (f"{v.expr} * {u.expr}", (n,), "array *")),
            (1, (f"{v.expr} - {u.expr} / {self.const(1, 3)}", (n,), "array - /")),
            (1, (f"{v.expr} / (1.0 + {u.expr} * {u.expr})", (n,), "array /")),
            (1, (f"({v.expr} * {v.expr} + 1.0) ** 0.5", (n,), "array **")),
            (1, (f"{v.expr} ** 2", (n,), "array **")),
            (1, (f"{x()} * {v.expr}", (n,), "scalar * array")),
            (1.5, (f"np.maximum({v.expr}, {self.const(-0.5, 0.5)})", (n,), "np.maximum")),
            (1, (f"np.maximum({v.expr}, {u.expr})", (n,), "np.maximum")),
            (1, (f"np.minimum({v.expr}, {u.expr} * 0.5)", (n,), "np.minimum")),
            (1.5, (f"np.where({v.expr} > {self.const(-0.3, 0.3)}, {v.expr}, 0.5 * {u.expr})",
                   (n,), "np.where")),
            (1, (f"np.clip({v.expr}, -0.7, 0.8)", (n,), "np.clip")),
            (1, (f"np.cumsum({v.expr})", (n,), "np.cumsum")),
            (1, (f"np.sqrt({v.expr} * {v.expr} + 0.5)", (n,), "np.sqrt")),
            (1, (f"np.log(1.0 + {v.expr} * {v.expr})", (n,), "np.log")),
            (1, (f"np.abs({v.expr})", (n,), "np.abs")),
            (1, (f"np.cos({v.expr}) + np.sin({u.expr})", (n,), "np.cos/np.sin")),
            (1, (f"np.outer({v.expr}, {u.expr})", (n, n), "np.outer")),
            (1, (f"np.concatenate(({v.expr}, {u.expr}))", (2 * n,), "np.concatenate")),
            (1, (f"np.stack(({v.expr}, {u.expr}))", (2, n), "np.stack")),
        ]
        if mats:
            M = self.r.choice(mats)
            r, c = M.shape
            rowv = [w for w in vec if w.shape[0] == c and w.contig]
            colv = [w for w in vec if w.shape[0] == r and w.contig]
            arr += [
                (2, (f"np.sum({M.expr}, axis=0)", (c,), "np.sum(axis=0)")),
                (1, (f"np.sum({M.expr}, axis=1)", (r,), "np.sum(axis=1)")),
                (1, (f"np.mean({M.expr}, axis=0)", (c,), "np.mean(axis=0)")),
                (1, (f"np.max({M.expr}, axis=1)", (r,), "np.max(axis=1)")),
                (1.5, (f"{M.expr}.T @ {M.expr}", (c, c), "@ matrix")),
                (1, (f"np.dot({M.expr}, {M.expr}.T)", (r, r), "np.dot matrix")),
                (1, (f"np.tanh({M.expr}) * {M.expr}", (r, c), "array * matrix")),
                (1, (f"{M.expr} * 2.0 - 1.0", (r, c), "matrix broadcasting")),
            ]
            if rowv:
                w = self.r.choice(rowv)
                arr += [(2, (f"{M.expr} @ {w.expr}", (r,), "@ matvec")),
                        (1, (f"np.dot({M.expr}, {w.expr})", (r,), "np.dot matvec")),
                        (1, (f"{M.expr} * {w.expr}", (r, c), "broadcast rows"))]
            if colv:
                w = self.r.choice(colv)
                arr += [(1, (f"{w.expr} @ {M.expr}", (c,), "@ vecmat"))]
        red_of = lambda e: self.pick([  # noqa: E731
            (3, (f"np.sum({e})", "np.sum")), (1, (f"np.mean({e})", "np.mean")),
            (1, (f"np.max({e})", "np.max")), (1, (f"np.min({e})", "np.min")),
            (1, (f"{e}.sum()", ".sum()")), (0.5, (f"np.prod(np.tanh({e}))", "np.prod"))])
        if self.chance(0.65):
            expr, shape, tag = self.pick(arr)
            self.use(tag)
            name = self.fresh("y")
            self.emit(ctx, f"{name} = {expr}")
            Y = _Vec(name, shape, contig=True, writable=False, local=True)
            self.declare_array(Y)
            if self.chance(0.25):
                # written in place after the call: a rule's pullback may keep its result
                # (np.exp's: dy * y), which must read the values from before the write (a
                # store into a rule's result was not undone for it until 2026-12-07)
                self.use("write into an operation's result")
                op = self.pick([(1, "="), (2, "+="), (2, "*=")])
                e = self.fexpr(ctx, 1) if op != "*=" else self.const(0.3, 1.5)
                self.emit(ctx, f"{self.elem(Y, ctx)} {op} {e}")
            red, rtag = red_of(name)
            if self.chance(0.6):
                self.use(rtag)
                self.emit(ctx, f"s += {red} * {self.fexpr(ctx, 1)}")
            self.write_after_use(ctx, [A for A in vec + mats if A.expr in expr])
        else:
            tag, e = self.pick(self.reductions(v, u))
            self.use(tag)
            self.emit(ctx, f"s += {e} * {self.fexpr(ctx, 1)}")
            self.write_after_use(ctx, [v, u])

    def reductions(self, v, u):
        return [(2, ("np.dot", f"np.dot({v.expr}, {u.expr})")),
                (1, ("vector @ vector", f"{v.expr} @ {u.expr}")) if v.contig and u.contig
                else (0, None),
                # shifted: the zeros feature can scale a vector by an exact 0.0, and the
                # 2-norm's gradient at the zero vector is NaN by convention (JAX's; see
                # primitives/linalg.py), which finite differences do not see (seed
                # 20261531 #1233)
                (1, ("np.linalg.norm", f"np.linalg.norm({v.expr} + 2.0)")),
                (2, ("np.sum", f"np.sum({v.expr} * {u.expr})")),
                (1, ("np.sum", f"np.sum(np.sin({v.expr}))")),
                (1, ("np.sum of a negation", f"np.sum(-{v.expr})"))]

    def s_reduction_sweep(self, ctx):
        """A loop over an array taking a whole-array reduction of it each iteration and then
        writing its element: each iteration's reduction sees the writes of the ones before."""
        vec = [v for v in self.vecs(ndim=1, writable=True) if v.local]
        if not vec:
            return self.s_loop_reduction(ctx)
        A = self.r.choice(vec)
        u = self.r.choice([w for w in self.vecs(ndim=1) if w.shape == A.shape])
        i = self.fresh("i")
        self.use("reduction of an array its loop writes")
        self.emit(ctx, f"for {i} in range({A.shape[0]}):")
        inner = ctx.inner(loops=ctx.loops + ((i, 0, A.shape[0] - 1),), in_loop=True,
                          loop_kind="for")
        self.push()
        tag, e = self.pick(self.reductions(*self.r.sample([A, u], 2)))
        self.use(tag + " in a loop")
        self.emit(inner, f"s += {e} * {self.fexpr(inner, 1)}")
        self.emit(inner, f"{A.expr}[{i}] = {A.expr}[{i}] * {self.const(0.5, 1.1)} + "
                         f"{self.fexpr(inner, 1)}")
        self.pop()

    def s_loop_reduction(self, ctx):
        """A whole-array reduction inside a loop, sometimes followed by a write into one of its
        operands: the reverse of a later iteration must not see the write (a product of an
        array the loop writes was once recomputed from later values, stop 28)."""
        vec = self.vecs(ndim=1)
        if not vec:
            return self.s_accum(ctx)
        v = self.r.choice(vec)
        u = self.r.choice([w for w in vec if w.shape == v.shape])
        tag, e = self.pick(self.reductions(v, u))
        self.use(tag + " in a loop")
        self.emit(ctx, f"s += {e} * {self.fexpr(ctx, 1)}")
        self.write_after_use(ctx, [v, u])

    def write_after_use(self, ctx, operands):
        """Sometimes write into a local array an operation just read: the reverse pass of that
        operation needs the values from before the write (np.dot's adjoint reads both operands;
        its reads were once missed: seed 20261301 #481)."""
        writable = [A for A in operands if A.writable]
        if writable and self.chance(0.35):
            A = self.r.choice(writable)
            self.use("write into an array after an operation read it")
            op = self.pick([(2, "="), (2, "+="), (1, "*=")])
            e = self.fexpr(ctx, 1) if op != "*=" else self.const(0.3, 1.2)
            self.emit(ctx, f"{self.elem(A, ctx)} {op} {e}")

    def s_globals(self, ctx):
        vec = self.vecs(ndim=1, local=None)
        vec = [v for v in vec if not v.expr.startswith("K")]
        n = self.r.choice([v.shape[0] for v in vec]) if vec else self.r.randint(3, 5)
        K = f"K{len(self.globals_arrays)}"
        vals = ", ".join(repr(round(self.r.uniform(-1, 1), 3)) for _ in range(n))
        self.globals_src.append(f"{K} = np.array([{vals}])")
        G = _Vec(K, (n,), contig=True, writable=False, local=False)
        same = [v for v in vec if v.shape[0] == n]
        name = self.fresh("y")
        if same:
            v = self.r.choice(same)
            expr, shape, tag = self.pick([
                (3, (f"np.concatenate(({v.expr}, {K}))", (2 * n,),
                     "np.concatenate with a global array")),
                (1, (f"np.concatenate(({K}, {v.expr}, {K}))", (3 * n,),
                     "np.concatenate with a global array")),
                (2, (f"{v.expr} * {K}", (n,), "global array in arithmetic")),
                (1, (f"np.stack(({K}, {v.expr}))", (2, n), "np.stack with a global array")),
            ])
            self.use(tag)
            self.emit(ctx, f"{name} = {expr}")
            self.declare_array(_Vec(name, shape, contig=True, writable=False, local=True))
            self.emit(ctx, f"s += np.sum({name} * {name}) * {self.fexpr(ctx, 1)}")
        else:
            self.use("global array read")
        self.globals_arrays.append(G)

    def s_viewcall(self, ctx):
        vec = [v for v in self.vecs(ndim=1) if v.shape[0] >= 3]
        mats = self.vecs(ndim=2)
        opts = []
        if vec:
            v = self.r.choice(vec)
            opts.append((3, ("p_mid", v, (2,), v.contig)))
        if mats:
            M = self.r.choice(mats)
            opts.append((2, ("p_row", M, (M.shape[1],), M.contig)))
            opts.append((1, ("p_tr", M, (M.shape[1], M.shape[0]), False)))
        if not opts:
            return self.s_accum(ctx)
        fn, base, shape, contig = self.pick(opts)
        self.pool_names.add(fn)
        self.use("view returned by a helper")
        if base.writable:
            self.may_refuse.add("write through a returned view")
        name = self.fresh("w")
        self.emit(ctx, f"{name} = {fn}({base.expr})")
        W = _Vec(name, shape, contig=contig, writable=False, local=base.local)
        self.declare_array(W)
        form = self.r.randrange(3)
        if form == 0:
            self.emit(ctx, f"s += np.sum({name} * {name}) * {self.fexpr(ctx, 1)}")
        elif form == 1:
            self.emit(ctx, f"s += {self.elem(W, ctx)} * {self.fexpr(ctx, 1)}")

    def s_arg_loop(self, ctx):
        """A loop reading an argument array element by element (any layout)."""
        args = [v for v in self.vecs(local=False) if not v.expr.startswith("K")]
        if not args:
            return self.s_accum(ctx)
        A = self.r.choice(args)
        i = self.fresh("i")
        self.use("loop over an argument array")
        self.emit(ctx, f"for {i} in range({A.shape[0]}):")
        inner = ctx.inner(loops=ctx.loops + ((i, 0, A.shape[0] - 1),), in_loop=True,
                          loop_kind="for")
        self.push()
        self.emit(inner, f"s += {self.elem(A, inner)} * {self.fexpr(inner, 1)}")
        self.pop()
