"""Stencil loops: element loops whose iteration ``i`` reads its neighbours ``x[i - 1]``,
``x[i + 1]`` (1-D and 2-D nests, some inside a time loop with a buffer swap). Their reverse is
where the engine writes a gather instead of a scatter (ad/gather.py). ``Stencils`` is that part of
the generator (a mixin of ``generator.Generator``); its statement comes last and draws from a
random stream of its own (``generator.STENCILS_CHANCE``), so the rest of each program of a seed
is what it was before the group existed.
"""

from .base import _Vec


class Stencils:
    def s_stencil(self, ctx):
        vec = [v for v in self.vecs(ndim=1) if v.shape[0] >= 3]
        mats = [m for m in self.vecs(ndim=2) if min(m.shape) >= 2]
        if mats and (not vec or self.chance(0.45)):
            return self._stencil_2d(ctx, self.r.choice(mats))
        if self.chance(0.4):
            # a local 2-D array built from the floats in scope
            rows, cols = self.r.randint(2, 5), self.r.randint(2, 5)
            a, i, j = self.fresh("a"), self.fresh("i"), self.fresh("j")
            self.emit(ctx, f"{a} = np.zeros(({rows}, {cols}))")
            self.emit(ctx, f"for {i} in range({rows}):")
            c1 = ctx.inner(loops=ctx.loops + ((i, 0, rows - 1),), in_loop=True, loop_kind="for")
            self.emit(c1, f"for {j} in range({cols}):")
            c2 = c1.inner(loops=c1.loops + ((j, 0, cols - 1),))
            self.emit(c2, f"{a}[{i}, {j}] = {self.fexpr(c2, 1)} * ({i} + 1.0) - 0.5 * {j}")
            m = _Vec(a, (rows, cols), writable=True, local=True)
            self.declare_array(m)
            return self._stencil_2d(ctx, m)
        if vec:
            return self._stencil_1d(ctx, self.r.choice(vec))
        # no array to read: a local one built from the float arguments
        n = self.r.randint(3, 6)
        a, i = self.fresh("a"), self.fresh("i")
        self.emit(ctx, f"{a} = np.zeros({n})")
        self.emit(ctx, f"for {i} in range({n}):")
        c1 = ctx.inner(loops=ctx.loops + ((i, 0, n - 1),), in_loop=True, loop_kind="for")
        self.emit(c1, f"{a}[{i}] = {self.fexpr(c1, 1)} * ({i} + 1.0)")
        v = _Vec(a, (n,), writable=True, local=True)
        self.declare_array(v)
        return self._stencil_1d(ctx, v)

    def _term(self, reads, scalars):
        """One term of a stencil body: a weighted neighbour, a product of two, or a function."""
        r = self.r
        a = r.choice(reads)
        form = self.pick([(3, "lin"), (2, "prod"), (1, "sin"), (1, "param")])
        if form == "prod":
            return f"{self.const(0.2, 1.0)} * {a} * {r.choice(reads)}"
        if form == "sin":
            return f"math.sin({a})"
        if form == "param" and scalars:
            return f"{r.choice(scalars)} * {a}"
        return f"{self.const(-1.5, 1.5)} * {a}"

    def _body(self, reads, scalars):
        return " + ".join(self._term(reads, scalars) for _ in range(self.r.randint(2, 4)))

    def _scalars(self):
        # a differentiated float in the body makes the reverse sum its adjoint in the nest
        floats = [a.name for a in self.args if a.kind == "f" and a.diff]
        return floats if floats and self.chance(0.5) else []

    def _stencil_1d(self, ctx, v):
        r = self.r
        n = v.shape[0]
        lo, hi = r.randint(0, 2), r.randint(0, 2)     # lo = 0: x[i - 1] wraps at i = 0
        span = range(-lo if lo else -1, hi + 1)
        offsets = sorted(r.sample(span, min(len(span), r.randint(2, 3))))
        y, i = self.fresh("y"), self.fresh("i")
        scalars = self._scalars()
        timed = self.chance(0.35)
        self.use("stencil loop, 1-D" + (" in a time loop with a swap" if timed else ""))
        if lo == 0 and offsets[0] < 0:
            self.use("stencil loop reading x[i - 1] at i = 0 (wraps)")
        src = v.expr
        body_ctx = ctx.inner(loops=ctx.loops + ((i, lo, n - 1 - hi),), in_loop=True,
                             loop_kind="for")
        if timed:
            u, t = self.fresh("u"), self.fresh("t")
            self.may_refuse.update({"array rebound"})
            self.emit(ctx, f"{u} = {src}.copy()")
            self.emit(ctx, f"{y} = np.zeros({n})")
            self.emit(ctx, f"for {t} in range({r.randint(1, 3)}):")
            c1 = ctx.inner(in_loop=True, loop_kind="for")
            body_ctx = c1.inner(loops=ctx.loops + ((i, lo, n - 1 - hi),))
            reads = [f"{u}[{i}{o:+d}]" if o else f"{u}[{i}]" for o in offsets]
            self.emit(c1, f"for {i} in range({lo}, {n - hi}):")
            self.emit(body_ctx, f"{y}[{i}] = {u}[{i}] + 0.1 * ({self._body(reads, scalars)})")
            self.emit(c1, f"{u}, {y} = {y}, {u}")
            self.emit(ctx, f"s += np.sum({u} * {u}) + {y}[0]")
            return
        self.emit(ctx, f"{y} = np.zeros({n})")
        reads = [f"{src}[{i}{o:+d}]" if o else f"{src}[{i}]" for o in offsets]
        self.emit(ctx, f"for {i} in range({lo}, {n - hi}):")
        self.emit(body_ctx, f"{y}[{i}] = {self._body(reads, scalars)}")
        self.emit(ctx, f"s += np.sum({y} * {y})")

    def _stencil_2d(self, ctx, m):
        r = self.r
        rows, cols = m.shape
        y, i, j = self.fresh("y"), self.fresh("i"), self.fresh("j")
        lo = (r.randint(0, 1), r.randint(0, 1))
        hi = (r.randint(0, 1), r.randint(0, 1))
        cands = [(a, b) for a in range(-lo[0] if lo[0] else -1, hi[0] + 1)
                 for b in range(-lo[1] if lo[1] else -1, hi[1] + 1)]
        offsets = sorted(r.sample(cands, min(len(cands), r.randint(2, 5))))
        scalars = self._scalars()
        self.use("stencil loop nest, 2-D")
        reads = [f"{m.expr}[{i}{a:+d}, {j}{b:+d}]".replace("+0", "") for a, b in offsets]
        self.emit(ctx, f"{y} = np.zeros(({rows}, {cols}))")
        self.emit(ctx, f"for {i} in range({lo[0]}, {rows - hi[0]}):")
        c1 = ctx.inner(loops=ctx.loops + ((i, lo[0], rows - 1 - hi[0]),), in_loop=True,
                       loop_kind="for")
        self.emit(c1, f"for {j} in range({lo[1]}, {cols - hi[1]}):")
        c2 = c1.inner(loops=c1.loops + ((j, lo[1], cols - 1 - hi[1]),))
        self.emit(c2, f"{y}[{i}, {j}] = {self._body(reads, scalars)}")
        self.emit(ctx, f"s += np.sum({y} * {y})")
