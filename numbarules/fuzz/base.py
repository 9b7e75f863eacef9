"""The generator's records and small utilities.

``_Vec`` is an array the program can read, ``_Ctx`` the place a statement goes (its depth, the
loop counters in scope, whether it is in a loop or a branch). ``Base`` is the part of the
generator (a mixin of ``generator.Generator``) every other part uses: random draws, fresh names
and the scopes of scalars and arrays, over the state ``Generator.__init__`` sets up.
"""


class _Vec:
    """An array the program can read: a variable or an expression (p0.w, ta0[1])."""

    def __init__(self, expr, shape, contig=True, writable=False, local=False):
        self.expr, self.shape, self.contig, self.writable = expr, tuple(shape), contig, writable
        self.local = local    # bound in this function (a local array, or a view of one)

    @property
    def ndim(self):
        return len(self.shape)


class _Ctx:
    def __init__(self, depth=0, loops=(), in_loop=False, loop_kind=None, top=True,
                 branch=False):
        self.depth = depth
        self.loops = loops          # ((name, lo, hi), ...) loop counters in scope
        self.in_loop = in_loop
        self.loop_kind = loop_kind  # innermost loop: "for" / "while" (break/continue target)
        self.top = top              # straight-line top level of f
        self.branch = branch

    def inner(self, **kw):
        d = dict(depth=self.depth + 1, loops=self.loops, in_loop=self.in_loop,
                 loop_kind=self.loop_kind, top=False, branch=self.branch)
        d.update(kw)
        return _Ctx(**d)


class Base:
    # --- small utilities ---------------------------------------------------------------------

    def has(self, feature):
        return feature in self.features

    def use(self, tag):
        self.used.add(tag)

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def chance(self, p):
        return self.r.random() < p

    def pick(self, weighted):
        """``weighted``: list of (weight, value); zero weights never chosen."""
        items = [(w, v) for w, v in weighted if w > 0]
        total = sum(w for w, _ in items)
        x = self.r.random() * total
        for w, v in items:
            x -= w
            if x <= 0:
                return v
        return items[-1][1]

    def const(self, lo=0.1, hi=1.5):
        return f"{round(self.r.uniform(lo, hi), 2)!r}"

    # --- scopes --------------------------------------------------------------------------------

    def push(self):
        self.scopes.append({})
        self.arrays.append([])

    def pop(self):
        self.scopes.pop()
        self.arrays.pop()

    def declare(self, name, kind):
        self.scopes[-1][name] = kind

    def declare_array(self, vec):
        self.arrays[-1].append(vec)

    def floats(self):
        return [n for sc in self.scopes for n, k in sc.items() if k == "f"]

    def ints(self):
        return [n for sc in self.scopes for n, k in sc.items() if k == "i"]

    def vecs(self, ndim=None, writable=None, contig=None, local=None):
        out = [v for sc in self.arrays for v in sc] + self.globals_arrays
        return [v for v in out if (ndim is None or v.ndim == ndim)
                and (writable is None or v.writable == writable)
                and (contig is None or v.contig == contig)
                and (local is None or v.local == local)]
