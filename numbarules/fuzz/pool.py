"""The fuzzer's shared pool: structs, helpers, generic functions and rules that generated programs
call. Defined once per process, so their kernels compile once and are shared by every program.

Generated programs import the names they use from here (``from numbarules.fuzz.pool import
...``). Importing this module registers methods and rules on its own functions only: nothing
outside the fuzzer changes. Every rule here is a correct one (``tests/test_fuzz.py`` checks each
with ``nr.testing.check_rrule``): a wrong gradient through a rule is the engine's fault.

Values are kept moderate for inputs in [-2, 2]: no division by values near 0, no logarithm of
values near 0, exponentials of bounded arguments.
"""

import math

import numba
import numpy as np

import numbarules as nr


# --- structs --------------------------------------------------------------------------------------

@nr.struct
class Params(nr.Any):
    """Float, array and int fields."""
    a: nr.Float64
    w: nr.Vector[nr.Float64]
    k: nr.Int64


@nr.struct
class Pair(nr.Any):
    a: nr.Float64
    b: nr.Float64


@nr.struct
class Nest(nr.Any):
    """A struct with a struct field."""
    p: Params
    c: nr.Float64


@nr.struct
class Nest2(nr.Any):
    """A struct field and an array field."""
    q: Pair
    v: nr.Vector[nr.Float64]


STRUCTS = {"Params": Params, "Pair": Pair, "Nest": Nest, "Nest2": Nest2}


# --- argument layouts -----------------------------------------------------------------------------

LAYOUTS = ("C", "F", "T", "S", "R")


def layout(values, kind):
    """An array equal to ``values`` (a C-contiguous float64 array) in memory layout ``kind``:

    C: C-contiguous; F: Fortran-ordered (``np.asfortranarray``); T: the transpose of a
    C-contiguous array (``M.T``); S: strided, every second element of a larger array
    (``x[::2]``); R: reversed, a negative stride (``x[::-1]``). F and T of a vector are C.
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    if kind == "C":
        return values.copy()
    if kind == "F":
        return np.asfortranarray(values.copy())
    if kind == "T":
        return np.ascontiguousarray(values.T).T
    if kind == "S":
        big = np.full((2 * values.shape[0],) + values.shape[1:], -777.0)
        big[::2] = values
        return big[::2]
    if kind == "R":
        return np.ascontiguousarray(values[::-1])[::-1]
    raise ValueError(f"unknown layout {kind!r}")


# --- plain Python helpers -------------------------------------------------------------------------

def p_mix(x, y):
    return x * y + 0.5 * math.sin(x)


def p_soft(x):
    # softplus, smooth; the branch keeps exp's argument <= 0
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


def p_vdot(v, u):
    s = 0.0
    for i in range(v.shape[0]):
        s += v[i] * u[i]
    return s


def p_rownorm(M, i):
    s = 0.0
    for j in range(M.shape[1]):
        s += M[i, j] * M[i, j]
    return math.sqrt(s + 1.0)


def p_pair(x, y):
    return x * y, x - 0.5 * y


def p_params(p, x):
    s = p.a * x
    for i in range(p.w.shape[0]):
        s += p.w[i] * math.tanh(x + i)
    return s * p.k


def p_nest(q, x):
    return q.c * x + q.p.a * q.p.w[0]


def p_rpow(x, n):
    """Recursion through a plain helper: x ** n."""
    if n <= 0:
        return 1.0
    return x * p_rpow(x, n - 1)


def p_rsum(v, i):
    """Recursion over an array: sum of squares of v[0..i]."""
    if i < 0:
        return 0.0
    return v[i] * v[i] + p_rsum(v, i - 1)


def p_mid(v):
    """A view of its argument."""
    return v[1:3]


def p_row(M):
    """A view of its argument: the first row."""
    return M[0, :]


def p_tr(M):
    """A view of its argument: the transpose."""
    return M.T


# --- @numba.njit helpers --------------------------------------------------------------------------

@numba.njit
def j_fill(a, v):
    """Writes into the array it is given: a call of it is refused (the caller's analysis would
    not see the write)."""
    a[0] = v
    return 0


@numba.njit
def j_poly(x):
    return 1.0 + x * (0.5 - 0.25 * x)


@numba.njit
def j_sumsq(v):
    s = 0.0
    for i in range(v.shape[0]):
        s += v[i] * v[i]
    return s


@numba.njit
def j_clipsoft(x):
    if x > 1.0:
        return 1.0 + math.tanh(x - 1.0)
    elif x < -1.0:
        return -1.0 + math.tanh(x + 1.0)
    return x


@numba.njit
def j_scaled(x):
    return 3.0 * x - x * x * x / 9.0


# --- helpers taking a function (functions as values) ----------------------------------------------

def h_apply(f, x):
    """Calls the function it is given: specialised on that function (njit, plain, generic, a
    rule's, a lambda)."""
    return f(x) + 0.5 * f(0.5 * x)


def h_fold(f, v):
    s = 0.0
    for i in range(v.shape[0]):
        s += f(v[i]) * v[i]
    return s


# --- generic functions ----------------------------------------------------------------------------

@nr.generic
def g_energy(x: nr.Float64):
    return 0.5 * x * x + math.sin(x)


@g_energy.method
def g_energy(x: nr.Vector[nr.Float64]):   # noqa: F811 - a second method
    s = 0.0
    for i in range(x.shape[0]):
        s += 0.5 * x[i] * x[i] + math.sin(x[i])
    return s


@g_energy.method
def g_energy(x: Params):                    # noqa: F811
    s = x.a * x.a
    for i in range(x.w.shape[0]):
        s += math.cos(x.w[i]) * x.k
    return s


@nr.generic
def g_scale(x: nr.Float64, y: nr.Float64):
    return x * math.tanh(y)


@g_scale.method
def g_scale(x: nr.Vector[nr.Float64], y: nr.Float64):  # noqa: F811
    return np.sum(x * x) * math.tanh(y)


@nr.generic
def g_smooth(x: nr.Float64):
    """The Float64 method has a rule; the Vector method is differentiated."""
    return x + 0.5 * math.sin(2.0 * x)


@g_smooth.method
def g_smooth(x: nr.Vector[nr.Float64]):     # noqa: F811
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] + 0.5 * math.sin(2.0 * x[i])
    return s


@nr.rrule(g_smooth, nr.Float64)
def _g_smooth_rule(x):
    y = x + 0.5 * math.sin(2.0 * x)

    def g_smooth_pullback(dy):
        return (dy * (1.0 + math.cos(2.0 * x)),)
    return y, g_smooth_pullback


# --- functions with rules -------------------------------------------------------------------------

def r_cube(x):
    return x * x * x


@nr.rrule(r_cube, nr.Float64)
def _r_cube_rule(x):
    y = x * x * x

    def r_cube_pullback(dy):
        return (3.0 * x * x * dy,)
    return y, r_cube_pullback


def r_vnorm2(v):
    return np.sum(v * v)


@nr.rrule(r_vnorm2, nr.Vector[nr.Float64])
def _r_vnorm2_rule(v):
    y = np.sum(v * v)

    def r_vnorm2_pullback(dy):
        return (2.0 * dy * v,)
    return y, r_vnorm2_pullback


def r_powi(x, n):
    r = 1.0
    for _ in range(n):
        r *= x
    return r


@nr.rrule(r_powi, nr.Float64, nr.Int64)
def _r_powi_rule(x, n):
    y = x ** n

    def r_powi_pullback(dy):
        return (dy * n * x ** (n - 1), None)
    return y, r_powi_pullback


def r_pairdot(p, x):
    return p.a * x + p.b * p.b


@nr.rrule(r_pairdot, Pair, nr.Float64)
def _r_pairdot_rule(p, x):
    y = p.a * x + p.b * p.b

    def r_pairdot_pullback(dy):
        # nr.Tangent[S](...) as users write it (differentiated again under nr.hvp)
        return (nr.Tangent[Pair](dy * x, 2.0 * dy * p.b), dy * p.a)
    return y, r_pairdot_pullback


@numba.njit
def r_jsq(x):
    return x * x + x


@nr.rrule(r_jsq, nr.Float64)
def _r_jsq_rule(x):
    y = x * x + x

    def r_jsq_pullback(dy):
        return (dy * (2.0 * x + 1.0),)
    return y, r_jsq_pullback


#: Every rule above and an argument tuple to check it at (tests/test_fuzz.py).
RULE_CHECKS = (
    (g_smooth, (0.7,)),
    (r_cube, (-1.3,)),
    (r_vnorm2, (np.array([0.5, -1.0, 2.0]),)),
    (r_powi, (1.3, 3)),
    (r_pairdot, (Pair(0.4, -0.8), 1.1)),
    (r_jsq, (0.6,)),
)
