"""Random programs over the differentiable language: ``generate(seed, index, features)``.

A program is Python source for one module holding an entry function ``f`` (and sometimes local
helpers and module-level constant arrays), the kinds of its arguments and how to draw their
values. Generation is deterministic in ``(seed, index, features)``; the values of attempt ``k``
(the runner re-draws a point where finite differences are unreliable) are deterministic too.

Validity, by construction:

- type stability: a float variable only ever receives float expressions, ints are loop
  counters, int arguments and int fields; a variable introduced in a nested block is dropped
  from scope when the block ends (so nothing is read uninitialised), except the values the
  ``loopflow`` templates deliberately carry out of loops of constant, non-zero trip count;
- indices are in bounds: array shapes and int argument values are fixed per program (re-drawn
  points change floats only), and an index is a constant, or a loop variable with an offset
  chosen from the variable's exact range;
- finite, moderate values: divisors are bounded away from 0 (``1.0 + a * a``, ``2.0 + sin a``),
  ``log`` and ``sqrt`` take such positive values, ``exp`` a bounded argument, ``**`` a positive
  base unless the exponent is a small integer;
- the README's refused constructs (views or array temporaries inside loops and branches,
  arrays rebound in loops, writes into argument arrays, structs built in branches) appear only
  under the ``refusals`` and ``swaps`` features, and those programs record which refusal classes
  they may legitimately get (``Program.may_refuse``);
- Numba's own limits: ``reshape`` only of arrays known to be C-contiguous, ``@`` with a vector
  only when the vector is C-contiguous.
"""

import random
import re
from dataclasses import dataclass, field

import numpy as np

#: Feature groups: ``features=`` restricts programs to these (plus the core: float arithmetic
#: with + - *, assignments and accumulation, which every program uses).
FEATURES = {
    "scalar": "/, **, unary minus, math functions, abs/min/max, // and %, conditional "
              "expressions, comparisons with and/or/not",
    "zeros": "0.0 / x and 0.0 ** y (zero numerator, zero base)",
    "branches": "if/elif/else on data, and constant conditions (if 1.0 < 0.5:) around loops",
    "loops": "for over range with start/stop/step (some run zero times), nested loops, while "
             "with counters, break, continue",
    "loopflow": "a value computed inside an (inner) loop read after that loop",
    "return": "early return from branches and loops",
    "arrays": "element reads and writes with 1-2 indices, local arrays (np.zeros, .copy(), "
              "np.zeros_like, ...), a[i] += ...",
    "rows": "row writes h[t] = x[t] into a 2-D local array, rows A[i, :] read and written",
    "views": "x[1:3], x.T, x.reshape(...), x.ravel(), x[:, j] as variables",
    "numpy": "whole-array NumPy: np.sum/mean/max/dot/exp/sin/tanh/maximum/where/clip/cumsum/"
             "outer/concatenate/stack, @, np.sum(x, axis=...), broadcasting",
    "globals": "module-level constant arrays used in array expressions and np.concatenate",
    "calls": "plain Python helpers (pool and local), @numba.njit helpers, generic functions, "
             "functions with rules (nr.rrule)",
    "viewcalls": "a helper that returns a view of its argument",
    "recursion": "recursion through a plain Python helper",
    "structs": "struct arguments (float, int and array fields), structs built in code",
    "nested_structs": "struct arguments with a struct field",
    "tuples": "tuple arguments (of floats, of a float and an int, of arrays) read with "
              "constant indices, tuple unpacking",
    "tuple_loop": "a tuple of floats indexed by a loop variable",
    "swaps": "a, b = b, a of scalars, and of arrays inside a loop",
    "timeloops": "time-stepping loops: arrays rebound in a loop (u, v = v, u; u = u_new; "
                 "w = u.copy(); u = u + c * u * (1.0 - u)), whole-array expressions, stencils "
                 "on slices and views of the rebound array inside the loop, arrays bound in "
                 "branches; some marked nr.checkpointed (0-3 snapshots)",
    "layouts": "array arguments Fortran-ordered, transposed, strided and reversed",
    "refusals": "constructs the README lists as refused (must be refused cleanly or "
                "differentiated right)",
    "world": "a generic function of the program's own whose methods or rules change after the "
             "first gradients (a more specific method, a replaced method, an int result that "
             "becomes a float, a rule, a method that starts writing into its argument); the "
             "runner checks again after ``world_change()``, with old and new gradient objects",
}

#: How often a program of the full stream gets the ``world`` group. It is drawn from a random
#: stream of its own and its statement comes last, so every other program of a seed is the same
#: as before the group existed (reproducers keep working).
WORLD_CHANCE = 0.15

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

#: README classes of refusal (regular expression on the message -> class). A refusal counts as
#: expected only when the program contains a construct of that class (``Program.may_refuse``).
REFUSAL_CLASSES = {
    "view in loop or branch": r"a view \([^)]*\) of a differentiated array taken inside a "
                              r"(branch|loop)",
    "array rebound": r"the array variable '[^']*' bound more than once or inside a loop"
                     r"|a whole-array expression \(an array temporary\) evaluated inside a loop"
                     r"|of the array( '[^']*'| an expression makes), which is rebound"
                     r"|first bound inside a loop or a branch and rebound",
    "argument write": r"writing into the argument array",
    "write through a returned view": r"which shares memory with the array .* returned",
    "write into a part": r"writing into an array taken out of the tuple or struct",
    "hidden write": r"writes into its array argument|writing through '[^']*\.(flat|real|imag)'",
    "fancy index": r"with an array of indices or a mask",
    "struct built in loop or branch": r"building the struct .* inside a branch or loop"
                                      r"|\(holding differentiated arrays\) is bound more than once"
                                      r"|a struct or tuple holding the array",
    "struct rebound": r"rebinding the struct",
    "no tangent type": r"a value of type .* that depends on a differentiated input",
    "tape cannot hold": r"which the reverse pass needs \(a tape saves numbers",
    "outside the language": r"is not supported by numbarules AD",
    "no rule": r"cannot differentiate a call of|has no rule|DifferentiationError",
}

_HEADER = """\
import math
import numba
import numpy as np
import numbarules as nr
"""

_POOL_SCALAR_1 = ["p_soft", "j_poly", "j_clipsoft", "j_scaled", "g_energy", "g_smooth",
                  "r_jsq"]


@dataclass
class Arg:
    name: str
    kind: str                 # f, i, v, m, struct, tf (floats), th (float, int), ta (arrays)
    shape: tuple = ()
    layout: str = "C"
    cls: str = ""             # struct class
    int_value: int = 0        # i; th's int; Params.k
    sizes: dict = field(default_factory=dict)   # struct array field lengths
    diff: bool = False


@dataclass
class Program:
    seed: int
    index: int
    features: tuple           # the groups this program drew from
    used: tuple               # the constructs it contains (tags)
    source: str
    args_spec: tuple
    argnums: tuple            # differentiated arguments (nr.grad's argnums)
    may_refuse: frozenset     # README refusal classes this program may legitimately get
    entry: str = "f"
    stream: tuple = None      # the ``features`` argument of generate (None: all)
    variant: int = 0          # reductions of the program (numbarules.fuzz.reduce) count up

    @property
    def module_name(self):
        return f"nrfuzz_{self.seed}_{self.index}" + (f"_{self.variant}" if self.variant else "")

    def to_dict(self):
        d = dict(self.__dict__)
        d["args_spec"] = [dict(a.__dict__) for a in self.args_spec]
        d["may_refuse"] = sorted(self.may_refuse)
        return d

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        d["args_spec"] = tuple(Arg(**a) for a in d["args_spec"])
        for k in ("features", "used", "argnums"):
            d[k] = tuple(d[k])
        d["may_refuse"] = frozenset(d["may_refuse"])
        if d.get("stream") is not None:
            d["stream"] = tuple(d["stream"])
        return cls(**d)

    def with_source(self, source, variant):
        """The same program (arguments, points) with another source: a reduction step."""
        d = self.to_dict()
        d["source"], d["variant"] = source, variant
        return Program.from_dict(d)

    def args(self, attempt=0):
        """The argument values of point ``attempt`` (fresh objects on every call)."""
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, self.index, attempt])
        return tuple(_value(a, rng) for a in self.args_spec)

    def args_source(self, attempt=0):
        """Python source building ``args(attempt)`` (with ``layout`` and the struct classes from
        numbarules.fuzz.pool)."""
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, self.index, attempt])
        return "(" + "".join(_value_source(a, rng) + ", " for a in self.args_spec) + ")"

    def repro(self, attempt=0):
        """A standalone script: the module source plus the calls the fuzzer checks."""
        nums = self.argnums
        return (f"{self.source}\n\nif __name__ == '__main__':\n"
                f"    # numbarules fuzz: generate({self.seed}, {self.index}"
                f"{', ' + repr(list(self.stream)) if self.stream else ''}), point {attempt}\n"
                f"    from numbarules.fuzz.pool import layout, Params, Pair, Nest, Nest2\n"
                f"    args = {self.args_source(attempt)}\n"
                f"    print('python:', f(*args))\n"
                f"    print('grad:', nr.grad(f, argnums={nums!r})(*args))\n"
                f"    y, pb = nr.pullback(f, *args)\n"
                f"    print('pullback:', y, pb(1.0))\n"
                + ("" if "def world_change" not in self.source else
                   f"    world_change()\n"
                   f"    print('after world_change: python:', f(*args))\n"
                   f"    print('grad:', nr.grad(f, argnums={nums!r})(*args))\n"
                   f"    print('old pullback (its own world):', pb(1.0))\n"))


# --- argument values ------------------------------------------------------------------------------

def _floats(rng, shape):
    return rng.uniform(-1.5, 1.5, size=shape)


def _struct_value(cls, sizes, k, rng, pool):
    C = pool.STRUCTS[cls]
    if cls == "Params":
        return C(float(_floats(rng, ())), pool.layout(_floats(rng, (sizes["w"],)), "C"), k)
    if cls == "Pair":
        return C(float(_floats(rng, ())), float(_floats(rng, ())))
    if cls == "Nest":
        return C(_struct_value("Params", sizes, k, rng, pool), float(_floats(rng, ())))
    if cls == "Nest2":
        q = _struct_value("Pair", sizes, k, rng, pool)
        return C(q, pool.layout(_floats(rng, (sizes["v"],)), "C"))
    raise ValueError(cls)


def _value(a, rng):
    from . import pool
    if a.kind == "f":
        return float(_floats(rng, ()))
    if a.kind == "i":
        return a.int_value
    if a.kind in ("v", "m"):
        return pool.layout(_floats(rng, a.shape), a.layout)
    if a.kind == "struct":
        return _struct_value(a.cls, a.sizes, a.int_value, rng, pool)
    if a.kind == "tf":
        return tuple(float(v) for v in _floats(rng, (a.shape[0],)))
    if a.kind == "th":
        return (float(_floats(rng, ())), a.int_value)
    if a.kind == "ta":
        return tuple(pool.layout(_floats(rng, (a.shape[1],)), "C") for _ in range(a.shape[0]))
    raise ValueError(a.kind)


def _arr_src(values, kind):
    flat = ", ".join(repr(float(v)) for v in np.ravel(values))
    shape = tuple(np.shape(values))
    return f"layout(np.array([{flat}]).reshape({shape!r}), {kind!r})"


def _value_source(a, rng):
    # Mirrors _value draw for draw, so the two stay in step.
    def struct_src(cls):
        if cls == "Params":
            x = float(_floats(rng, ()))
            w = _floats(rng, (a.sizes["w"],))
            return f"Params({x!r}, {_arr_src(w, 'C')}, {a.int_value})"
        if cls == "Pair":
            x, y = float(_floats(rng, ())), float(_floats(rng, ()))
            return f"Pair({x!r}, {y!r})"
        if cls == "Nest":
            p = struct_src("Params")
            return f"Nest({p}, {float(_floats(rng, ()))!r})"
        q = struct_src("Pair")
        return f"Nest2({q}, {_arr_src(_floats(rng, (a.sizes['v'],)), 'C')})"
    if a.kind == "f":
        return repr(float(_floats(rng, ())))
    if a.kind == "i":
        return repr(a.int_value)
    if a.kind in ("v", "m"):
        return _arr_src(_floats(rng, a.shape), a.layout)
    if a.kind == "struct":
        return struct_src(a.cls)
    if a.kind == "tf":
        return "(" + "".join(f"{float(v)!r}, " for v in _floats(rng, (a.shape[0],))) + ")"
    if a.kind == "th":
        return f"({float(_floats(rng, ()))!r}, {a.int_value})"
    if a.kind == "ta":
        return "(" + "".join(_arr_src(_floats(rng, (a.shape[1],)), "C") + ", "
                             for _ in range(a.shape[0])) + ")"
    raise ValueError(a.kind)


# --- the generator --------------------------------------------------------------------------------

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


class Generator:
    MAX_STATEMENTS = 25

    def __init__(self, seed, index, features=None):
        self.stream = tuple(features) if features else None
        enabled = tuple(FEATURES) if not features else tuple(features)
        unknown = [f for f in enabled if f not in FEATURES]
        if unknown:
            raise ValueError(f"unknown fuzz features {unknown}; known: {sorted(FEATURES)}")
        self.seed, self.index = seed, index
        self.r = random.Random(f"numbarules-fuzz:{seed}:{index}")
        # the world group draws from a stream of its own (see WORLD_CHANCE)
        self.world_r = random.Random(f"numbarules-fuzz-world:{seed}:{index}")
        main = tuple(f for f in enabled if f != "world")
        if len(main) <= 2:
            chosen = list(main)
        else:
            chosen = [f for f in main if self.r.random() < 0.25]
            if not chosen:
                chosen = [self.r.choice(main)]
            if len(chosen) > 6:      # small programs: compiles are the cost
                chosen = [f for f in chosen if f in self.r.sample(chosen, 6)]
        if "world" in enabled and (features or self.world_r.random() < WORLD_CHANCE):
            chosen.append("world")
        self.features = tuple(chosen)
        self.used = set()
        self.may_refuse = set()
        self.returned_early = False
        self.lines = []
        self.helpers = []           # source blocks of local helpers
        self.globals_src = []       # module-level constants
        self.pool_names = set()
        self.scopes = [{}]          # name -> kind ("f", "i") for scalars
        self.arrays = [[]]          # scopes of _Vec (parallel to self.scopes)
        self.counter = 0
        self.nstmts = 0
        self.args = []
        self.local_helpers = {}     # name -> (params kinds)
        self.structs_local = []     # (name, cls) structs built in f
        self.globals_arrays = []    # _Vec of module constants

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

    # --- expressions ---------------------------------------------------------------------------

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
            ]
        if mats:
            M = self.r.choice(mats)
            row = lambda: self.r.randrange(M.shape[0])  # noqa: E731
            opts.append((1, lambda: pool("p_rownorm", f"p_rownorm({M.expr}, {row()})",
                                         "plain helper, arrays")))
        return self.pick(opts)()

    def pool(self, name, expr, tag):
        self.pool_names.add(name)
        self.use(tag)
        return expr

    def recursion_expr(self, ctx, d):
        F = lambda: self.fexpr(ctx, d)  # noqa: E731
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
        return self.pick(opts)()

    def struct_call(self, ctx, d):
        F = lambda: self.fexpr(ctx, d)  # noqa: E731
        B = lambda: self.bounded(ctx, d)  # noqa: E731
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
        sub = Generator.__new__(Generator)
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

    # --- statements ----------------------------------------------------------------------------

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

    # --- arrays --------------------------------------------------------------------------------

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
                          (1, "window"), (1, "target"), (1, "scratch"), (1, "settle")])
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
        else:                          # an array temporary in an inner loop
            self.emit(c1, f"for {i} in range({n}):")
            c3 = c1.inner(loops=ctx.loops + ((i, 0, n - 1),))
            self.emit(c3, f"{w} = {u} * {u}[{i}]")
            self.emit(c3, f"s += np.sum({w}) * {c}")
            self.emit(c1, f"{u} = {u} * {e}")
        self.emit(ctx, f"s += np.sum({u} * {u}) * {self.const(0.1, 0.5)} + {u}[0]")

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

    # --- arguments and the whole program ---------------------------------------------------

    def make_args(self):
        h = self.has
        r = self.r
        layouts = h("layouts")
        array_feats = ("arrays", "rows", "views", "numpy", "globals", "viewcalls", "loopflow",
                       "swaps", "layouts", "refusals", "timeloops")
        args = [Arg("x0", "f", diff=True)]
        if self.chance(0.5):
            args.append(Arg("x1", "f", diff=True))
        n = r.randint(3, 6)
        want_vec = any(h(f) for f in array_feats) or self.chance(0.4)
        if want_vec:
            lay = r.choice(["S", "R"]) if layouts and self.chance(0.7) else "C"
            args.append(Arg("v0", "v", (n,), lay, diff=True))
            if self.chance(0.5) or h("numpy"):
                lay = r.choice(["S", "R"]) if layouts and self.chance(0.4) else "C"
                args.append(Arg("v1", "v", (n,), lay, diff=True))
        if h("rows") or layouts or (h("views") and self.chance(0.6)) \
                or (h("numpy") and self.chance(0.8)) or (h("arrays") and self.chance(0.3)):
            rr, cc = r.randint(2, 4), r.randint(2, 4)
            if want_vec and self.chance(0.7):
                cc = n
            lay = r.choice(["F", "T", "S"]) if layouts and self.chance(0.8) else "C"
            args.append(Arg("M0", "m", (rr, cc), lay, diff=True))
        if h("loops") or h("recursion") or self.chance(0.2):
            args.append(Arg("n0", "i", int_value=r.choice([0, 1, 2, 3, 3, 4])))
        if h("structs"):
            which = r.choice(["Params", "Pair", "both"])
            if which in ("Params", "both"):
                args.append(Arg("p0", "struct", cls="Params", sizes={"w": r.randint(2, 4)},
                                int_value=r.randint(1, 3), diff=True))
            if which in ("Pair", "both"):
                args.append(Arg("q0", "struct", cls="Pair", diff=True))
        if h("nested_structs"):
            if self.chance(0.6):
                args.append(Arg("N0", "struct", cls="Nest", sizes={"w": r.randint(2, 4)},
                                int_value=r.randint(1, 3), diff=True))
            else:
                args.append(Arg("N1", "struct", cls="Nest2", sizes={"v": r.randint(2, 4)},
                                diff=True))
        if h("tuples") or h("tuple_loop"):
            args.append(Arg("t0", "tf", (r.randint(2, 4),), diff=True))
            if h("tuples") and self.chance(0.5):
                args.append(Arg("th0", "th", int_value=r.randint(1, 3), diff=True))
            if h("tuples") and self.chance(0.5):
                args.append(Arg("ta0", "ta", (2, n)))
        r.shuffle(args)
        self.args = args
        for a in args:
            if a.kind == "f":
                self.declare(a.name, "f")
            elif a.kind == "i":
                self.declare(a.name, "i")
            elif a.kind in ("v", "m"):
                self.declare_array(_Vec(a.name, a.shape, contig=(a.layout == "C"), writable=False))
            elif a.kind == "struct":
                self.pool_names.add(a.cls)

    def program(self):
        self.protected = set()
        self.make_args()
        ctx = _Ctx()
        self.emit(ctx, "s = 0.0")
        self.declare("s", "f")
        # each drawn feature gets its own statement(s), in random order with core statements
        # between them; then random statements up to the target size
        seeds = [f for f in self.features if f != "world"]
        self.r.shuffle(seeds)
        for f in seeds:
            if self.nstmts >= self.MAX_STATEMENTS:
                break
            if self.chance(0.3):
                self.statement(ctx)
            self.seed_statement(f, ctx)
        target = self.r.randint(5, 12)
        while self.nstmts < target:
            self.statement(ctx)
        if self.has("world"):
            main_r, self.r = self.r, self.world_r
            self.s_world(ctx)
            self.r = main_r
        # every argument read at least once, so it matters to the result
        body = "\n".join(self.lines)
        for a in self.args:
            if a.diff and not _mentions(body, a.name):
                self.emit(ctx, f"s += 0.25 * {self.read_of(a, ctx)}")
        floats = [n for n in self.scopes[0] if self.scopes[0][n] == "f" and n != "s"
                  and not any(a.name == n for a in self.args)]
        extra = "".join(f" + {self.const(0.1, 0.5)} * {n}"
                        for n in self.r.sample(floats, min(3, len(floats))))
        locals_ = [v for v in self.vecs(local=True) if v.ndim >= 1]
        for v in self.r.sample(locals_, min(2, len(locals_))):
            extra += f" + {self.const(0.1, 0.5)} * {self.elem(v, ctx)}"
        self.emit(ctx, f"return s{extra}")
        argnums = tuple(k for k, a in enumerate(self.args) if a.diff)
        if len(argnums) > 1 and self.chance(0.2):
            argnums = tuple(sorted(self.r.sample(argnums, self.r.randint(1, len(argnums) - 1))))
        imports = sorted(self.pool_names)
        head = _HEADER
        if imports:
            head += f"from numbarules.fuzz.pool import {', '.join(imports)}\n"
        parts = [f"# numbarules fuzz program: seed {self.seed}, index {self.index}\n"
                 f"# features: {', '.join(self.features)}\n" + head]
        if self.globals_src:
            parts.append("\n".join(self.globals_src) + "\n")
        parts += self.helpers
        params = ", ".join(a.name for a in self.args)
        parts.append(f"def f({params}):\n" + "\n".join(self.lines) + "\n")
        source = "\n\n".join(parts)
        return Program(self.seed, self.index, self.features, tuple(sorted(self.used)), source,
                       tuple(self.args), argnums, frozenset(self.may_refuse), stream=self.stream)

    def seed_statement(self, feature, ctx):
        """A statement that surely exercises ``feature``."""
        r = self.r
        if feature == "scalar":
            self.s_assign(ctx)
            self.s_accum(ctx)
        elif feature == "zeros":
            self.emit(ctx, f"s += {self.pick([(1, '0.0 / '), (1, '0.0 ** ')])}"
                           f"{self.pos(ctx, 1)} * {self.fexpr(ctx, 1)}")
            self.use("0.0 / x or 0.0 ** y")
        elif feature == "branches":
            (self.s_if if self.chance(0.65) else self.s_if_const)(ctx)
        elif feature == "loops":
            self.pick([(3, self.s_for), (1, self.s_while), (1, self.s_while_data)])(ctx)
        elif feature == "loopflow":
            self.s_loopflow(ctx)
        elif feature == "return":
            if self.chance(0.5):
                self.s_return(ctx)
            else:
                i = self.fresh("i")
                n = r.randint(1, 4)
                self.emit(ctx, f"for {i} in range({n}):")
                inner = ctx.inner(loops=ctx.loops + ((i, 0, n - 1),), in_loop=True,
                                  loop_kind="for")
                self.push()
                self.s_accum(inner)
                self.s_return(inner)
                self.pop()
        elif feature == "arrays":
            self.s_alloc(ctx)
            if self.vecs(writable=True):
                self.s_elem_write(ctx)
        elif feature == "rows":
            self.s_rows(ctx)
        elif feature == "views":
            self.s_view(ctx)
            self.s_accum(ctx)
        elif feature == "numpy":
            for _ in range(self.r.randint(2, 3)):
                self.s_numpy(ctx)
            if self.chance(0.4):
                self.s_reduction_sweep(ctx)
        elif feature == "globals":
            self.s_globals(ctx)
        elif feature == "calls":
            self.emit(ctx, f"s += {self.call_expr(ctx, 1)}")
        elif feature == "viewcalls":
            self.s_viewcall(ctx)
        elif feature == "recursion":
            self.emit(ctx, f"s += {self.recursion_expr(ctx, 1)}")
        elif feature in ("structs", "nested_structs"):
            if feature == "structs" and self.chance(0.4):
                self.s_struct_build(ctx)
            self.emit(ctx, f"s += {self.struct_call(ctx, 1)}")
        elif feature == "tuples":
            self.s_tuple(ctx)
        elif feature == "tuple_loop":
            self.s_tuple_loop(ctx)
        elif feature == "swaps":
            (self.s_swap_arrays if self.chance(0.4) else self.s_swap)(ctx)
        elif feature == "timeloops":
            self.s_timeloop(ctx)
        elif feature == "layouts":
            self.pick([(1, self.s_numpy), (1, self.s_view), (1, self.s_arg_loop)])(ctx)
        elif feature == "refusals":
            self.s_refusal(ctx)

    # --- world changes ------------------------------------------------------------------------

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

    def read_of(self, a, ctx):
        if a.kind == "f":
            return a.name
        if a.kind in ("v", "m"):
            return self.elem(_Vec(a.name, a.shape), ctx)
        if a.kind == "struct":
            paths = [p for p, k in self._struct_paths(a.name, a.cls, a.sizes) if k == "f"]
            return " + ".join(paths)
        if a.kind == "tf":
            return f"{a.name}[0]"
        if a.kind == "th":
            return f"{a.name}[0]"
        return "0.0"


def _mentions(body, name):
    return re.search(rf"\b{re.escape(name)}\b", body) is not None


def generate(seed, index, features=None):
    """Program ``index`` of the stream ``seed`` (deterministic), drawn from ``features`` (names
    of ``FEATURES``; None: all)."""
    return Generator(seed, index, features).program()
