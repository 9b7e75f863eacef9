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

The generator ``Generator`` is assembled from parts, one module each: its records and small
utilities (base.py), expressions (expressions.py), calls (calls.py), statements and control flow
(statements.py), array statements (arrays.py), arrays rebound in loops (timeloops.py), refused
constructs (refusals.py) and world changes (world.py); defaults of the entry's trailing
parameters come from ``draw_defaults`` here; ``Arg`` and ``Program`` are program.py's.
This module holds the feature groups, the refusal classes, the generator's state and the whole
program: its arguments, a statement for each drawn feature, the header and the final return.
"""

import random
import re

from .arrays import Arrays
from .base import Base, _Ctx, _Vec
from .calls import Calls
from .expressions import Expressions
from .program import Arg, Program
from .refusals import Refusals
from .statements import Statements
from .prange import PrangeLoops
from .stencils import Stencils
from .timeloops import TimeLoops
from .world import World

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
    "stencils": "element loops reading neighbours (x[i - 1], x[i + 1], 1-D and 2-D nests, some "
                "in a time loop with a buffer swap, some wrapping at i = 0): the reverse the "
                "engine writes as a gather",
    "prange": "a numba.prange reduction loop (neighbours, a gather, an inner loop over the "
              "others, accumulators added and subtracted, a start known at run time; or a loop "
              "over a matrix's rows with inner loops along each row; or a loop writing an array "
              "at its own index) as the whole program: the "
              "gradient's parallel schedule (ad/parallel.py)",
    "world": "a generic function of the program's own whose methods or rules change after the "
             "first gradients (a more specific method, a replaced method, an int result that "
             "becomes a float, a rule, a method that starts writing into its argument); the "
             "runner checks again after ``world_change()``, with old and new gradient objects",
}

#: How often a program of the full stream gets the ``world`` group. It is drawn from a random
#: stream of its own and its statement comes last, so every other program of a seed is the same
#: as before the group existed (reproducers keep working).
WORLD_CHANCE = 0.15

#: How often a program gets the ``stencils`` group: from a stream of its own, its statement last
#: but the world group's, like the world group (the rest of each program is unchanged).
STENCILS_CHANCE = 0.3

#: How often a program is a prange program (``fuzz/prange.py``): drawn from a stream of its own,
#: so the other programs of a seed are unchanged.
PRANGE_CHANCE = 0.1

#: How often the entry function's trailing parameters get defaults (``draw_defaults``): from a
#: random stream of their own, like the world group's, so the rest of each program is unchanged.
DEFAULTS_CHANCE = 0.2

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


class Generator(Base, Expressions, Calls, Statements, Arrays, TimeLoops, Stencils, Refusals,
                World, PrangeLoops):
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
        self.defaults_r = random.Random(f"numbarules-fuzz-defaults:{seed}:{index}")
        self.stencils_r = random.Random(f"numbarules-fuzz-stencils:{seed}:{index}")
        self.prange_r = random.Random(f"numbarules-fuzz-prange:{seed}:{index}")
        main = tuple(f for f in enabled if f not in ("world", "stencils", "prange"))
        if len(main) <= 2:
            chosen = list(main)
        else:
            chosen = [f for f in main if self.r.random() < 0.25]
            if not chosen:
                chosen = [self.r.choice(main)]
            if len(chosen) > 6:      # small programs: compiles are the cost
                chosen = [f for f in chosen if f in self.r.sample(chosen, 6)]
        if "stencils" in enabled and (features or self.stencils_r.random() < STENCILS_CHANCE):
            chosen.append("stencils")
        if "world" in enabled and (features or self.world_r.random() < WORLD_CHANCE):
            chosen.append("world")
        if "prange" in enabled and (not main or self.prange_r.random() < PRANGE_CHANCE):
            chosen = ["prange"]          # a program of its own shape (fuzz/prange.py)
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

    def draw_defaults(self):
        """Defaults for up to two trailing parameters of ``f``: an int parameter gets its own
        value and the checked calls leave it out (positionally and by keyword: Numba's C
        dispatcher fills it in, the kernels compile for the default's type); a float parameter
        gets another value and is always passed (the default must not leak into the gradient)."""
        r = self.defaults_r
        if r.random() >= DEFAULTS_CHANCE:
            return
        for a in reversed(self.args[-r.randint(1, 2):]):
            if a.kind == "i":
                a.default, a.omit = repr(a.int_value), True
                self.use("default parameter, omitted")
            elif a.kind == "f":
                a.default = repr(round(r.uniform(-1.0, 1.0), 2))
                self.use("default parameter, passed")
            else:
                break

    def program(self):
        if self.features == ("prange",):
            return self.prange_program()
        self.protected = set()
        self.make_args()
        self.draw_defaults()
        ctx = _Ctx()
        self.emit(ctx, "s = 0.0")
        self.declare("s", "f")
        # each drawn feature gets its own statement(s), in random order with core statements
        # between them; then random statements up to the target size
        seeds = [f for f in self.features if f not in ("world", "stencils")]
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
        if self.has("stencils"):
            main_r, self.r = self.r, self.stencils_r
            self.s_stencil(ctx)
            self.r = main_r
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
        params = ", ".join(a.name + (f"={a.default}" if a.default else "") for a in self.args)
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
