"""A corpus of small differentiable programs, each checked against finite differences.

Every program is a plain Python function that Numba can compile; ``nr.grad`` differentiates it
from its source and ``check_grad`` compares every float argument's tangent with central finite
differences on inputs drawn by hypothesis. Input ranges keep each function smooth where it is
evaluated: logs and square roots see positive values, comparisons, ``min``/``max``, ``abs`` and
branch conditions never see ties (values are drawn apart from each other and from the
constants they are compared with), ``floor``/``ceil``/``//`` stay away from their jumps, and
loop trip counts depend only on integers and lengths.

Programs and the constructs they cover:

straight-line arithmetic
    arith_basic                   + - * / on scalars, float constants
    arith_powers                  ** with int, float and variable exponents
    arith_unary_minus             unary minus, nested and on powers
    arith_floordiv                // on floats (zero gradient through the quotient)
    arith_division_chain          chained division, division by an expression
comparisons and boolean operators
    cmp_and_or_not                < > <= >= != with and / or / not in conditions
    cmp_chained                   chained comparisons a < b < c, if/elif/else
    cmp_as_value                  booleans used as numbers, ``and`` / ``or`` on booleans
conditional expressions
    ternary                       x if c else y, nested in arithmetic
tuples
    tuple_swap                    tuple packing, swapping, nested unpacking
    tuple_from_helper             unpacking a tuple returned by a plain helper
    tuple_shape_unpack            m, n = A.shape; 2-index reads
augmented assignment
    augassign_scalar              += -= *= /= **= on a scalar
    augassign_array               += -= *= /= on array elements (overwrites a value still needed)
branches
    if_elif_else                  if / elif / elif / else chain
    nested_if                     if inside if, branches assigning different variables
for loops over range
    range_one_arg                 range(n) with an int argument, x ** i
    range_two_args                range(start, stop), Horner recurrence
    range_three_args              range(start, stop, step) with positive steps
    range_negative_step           range(n - 1, -1, -1)
    range_negative_stride         range(n - 1, 0, -2) and negative indices a[-1], a[-4], ...
nested loops
    nested_triangular             inner bounds depending on the outer index
    nested_matrix_product         three nested loops, local accumulator, 2-D arrays
    nested_three_level            triple nest on scalars
while loops
    while_newton_sqrt             while with a counter, Newton iteration
    while_collatz                 while driven by an int argument, branches inside
    while_countdown               while over an index walking an array backwards
break / continue
    break_at_index                break at an int argument's position
    break_on_value                break when an element passes a threshold
    break_in_while_true           while True ... break
    continue_on_sign              continue on negative elements
    continue_on_index             continue in a nested loop, on the index
early return
    early_return                  return from two branches and the end
    early_return_in_loop          return from inside a for loop
    early_return_in_nested_loop   return from inside two nested loops
array reads and writes
    array_write_1d                writes and reads with one index, computed indices (i + 1) % n
    array_write_2d                writes and reads with two indices, bool times float
    matrix_vector                 y = A x into a local array, A.shape[0], A.shape[1]
in-place updates overwriting values the reverse pass needs
    inplace_cumprod               x = x.copy(); x[i] = x[i] * x[i - 1]
    inplace_recurrence            y[i] = c * y[i - 1] + sin(y[i]), recurrence stored in place
    inplace_smoothing_sweeps      repeated in-place sweeps (Gauss-Seidel)
    inplace_2d_recurrence         row recurrence in place on a 2-D copy
    inplace_scalar_overwrite      reassigning a scalar and a parameter
    inplace_swap_elements         swapping and overwriting through a temporary
local arrays
    local_zeros_ones              np.zeros(n), np.ones(n)
    local_empty_full              np.empty(n), np.full(n, c)
    local_like                    np.zeros_like, np.empty_like
    local_2d                      np.zeros((n, n)), np.full((2, n), c), np.ones((n, 2))
    local_copy_of_local           .copy() of a local array and of an argument
math functions
    math_trig                     sin cos tan
    math_exp_log                  exp log log1p expm1
    math_sqrt_hyperbolic          sqrt tanh sinh cosh
    math_atan_atan2               atan atan2
    math_pow_fabs_hypot           math.pow fabs hypot
    math_floor_ceil               floor ceil (zero gradient through them)
    math_elementwise              math functions on array elements in a loop
abs / min / max
    builtin_abs                   abs on scalars
    builtin_min_max               min and max with two and three arguments
    running_min_max               min / max carried through a loop
helper calls
    helper_plain                  a plain Python helper
    helper_njit                   @numba.njit helpers on scalars and arrays
    helper_chain                  a plain helper calling an njit helper and another plain helper
    helper_array_builder          a helper that allocates and returns an array
generic functions
    generic_recursion             recursion through a generic function (power)
    generic_mutual_recursion      mutual recursion through two generic functions
    generic_two_methods           a generic function with Float64 and Vector methods
integer and boolean arguments (they get no gradient)
    mixed_int_args                int arguments in ranges and index arithmetic (% of negatives)
    mixed_bool_flag               a bool argument choosing a branch
    int_array_gather              an int array of (repeated) indices
    int_to_float                  float(n), n / 2, x ** n
float32
    float32_array                 a float32 array argument and a float32 local
saving only what the reverse pass reads; one iteration's tape
    rows_logsumexp                running max and sum per row (fused rows, a tape per row),
                                  rows of one column (the max loop runs zero times)
    running_sum_read              a running sum whose every value the reverse pass reads
    param_reassigned              a parameter read, then reassigned, in straight-line code
    loop_var_after_loop           a loop variable read after its loop, then reused by another
    zero_trip_accumulator         per-row accumulators whose inner loop may run zero times
    fused_rows_with_branch        a loop inside a branch inside fused rows, values saved in it
    top_level_helper_kept         a top-level helper call whose residuals the forward keeps
    quotients_overwritten         divisions whose adjoints read the quotient, which the loop
                                  then overwrites (constant 1.0 and 2.0 numerators, a / b)
"""
import math

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import numbarules as nr
from numbarules.testing import check_grad

CORPUS = []


def program(args):
    """Register the decorated function in CORPUS; ``args`` is a strategy for its argument tuple."""
    def register(fn):
        CORPUS.append((fn.__name__, fn, args))
        return fn
    return register


# --- input strategies ---------------------------------------------------------------------------

def floats(lo, hi):
    return st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False)


def away(lo, hi, *points, gap=0.1):
    """Floats in [lo, hi] at least ``gap`` from each of ``points`` (kinks, jumps, thresholds)."""
    bands, start = [], lo
    for p in sorted(points):
        if p - gap > start:
            bands.append(floats(start, p - gap))
        start = max(start, p + gap)
    if start < hi:
        bands.append(floats(start, hi))
    return st.one_of(*bands)


@st.composite
def apart(draw, n, lo, hi, gap=0.2):
    """``n`` floats in [lo, hi], pairwise at least ``gap`` apart (no ties), in random order."""
    offsets = sorted(draw(st.lists(floats(0.0, hi - lo - (n - 1) * gap), min_size=n, max_size=n)))
    return tuple(draw(st.permutations([lo + u + k * gap for k, u in enumerate(offsets)])))


def vectors(elements, min_size=1, max_size=12):
    return st.lists(elements, min_size=min_size, max_size=max_size).map(np.array)


def matrices(elements, max_rows=3, max_cols=4):
    def of_shape(shape):
        m, n = shape
        return st.lists(elements, min_size=m * n, max_size=m * n).map(
            lambda v: np.array(v, dtype=np.float64).reshape(m, n))
    return st.tuples(st.integers(1, max_rows), st.integers(1, max_cols)).flatmap(of_shape)


def distinct_vectors(lo, hi, max_size=12):
    return st.integers(1, max_size).flatmap(lambda n: apart(n, lo, hi)).map(np.array)


def args(*strategies):
    """An argument tuple: one value per strategy, tuple-valued draws (``apart``) spliced in."""
    def splice(parts):
        return tuple(v for part in parts for v in (part if isinstance(part, tuple) else (part,)))
    return st.tuples(*strategies).map(splice)


# --- helpers, generic functions -----------------------------------------------------------------

def _polar(x, y):
    return math.hypot(x, y), math.atan2(y, x)


def _sq_plus(a, b):
    return a * a + 3.0 * b


@numba.njit
def _softplus(x):
    return math.log1p(math.exp(x))


@numba.njit
def _njit_dot(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


def _inner_plain(x):
    return x * math.cos(x)


def _outer_plain(x):
    return _softplus(_inner_plain(x)) * x


def _squares(a):
    out = np.empty_like(a)
    for i in range(len(a)):
        out[i] = a[i] * a[i] + a[i]
    return out


@nr.generic
def power(x: nr.Float64, n: nr.Int64):
    if n == 0:
        return 1.0
    return x * power(x, n - 1)


@nr.generic
def even_part(x: nr.Float64, n: nr.Int64):
    if n == 0:
        return x
    return odd_part(x * 0.9 + 0.1, n - 1)


@nr.generic
def odd_part(x: nr.Float64, n: nr.Int64):
    if n == 0:
        return -x
    return even_part(math.sin(x), n - 1)


@nr.generic
def norm2(x: nr.Float64):
    return x * x


@norm2.method
def norm2(x: nr.Vector[nr.Float64]):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


# --- straight-line arithmetic -------------------------------------------------------------------

@program(args(floats(-2, 2), floats(0.5, 2)))
def arith_basic(x, y):
    return x * y + x / y - y - 3.0 * x + 0.5


@program(args(floats(0.5, 2), floats(0.5, 2)))
def arith_powers(x, y):
    return x ** 2 + y ** 3 - x ** 0.5 * y + y ** x - x ** -1.5


@program(args(floats(-2, 2), floats(-2, 2)))
def arith_unary_minus(x, y):
    z = -x
    w = -(x * y) + -z * -y
    return -w + -(-z) ** 2 - -(-x) ** 3


@st.composite
def _floordiv_args(draw):
    # x / y = k + u with u in [0.1, 0.9]: the quotient is far from its jumps.
    y = draw(floats(0.5, 2))
    return ((draw(st.integers(-3, 3)) + draw(floats(0.1, 0.9))) * y, y)


@program(_floordiv_args())
def arith_floordiv(x, y):
    q = x // y
    r = x - q * y
    return r * r + q * x + y


@program(args(floats(-2, 2), floats(0.5, 2), floats(-2, -0.5)))
def arith_division_chain(x, y, z):
    return x / y / z + (x + y) / (z * z + 1.0) - 1.0 / (y * z)


# --- comparisons and boolean operators ----------------------------------------------------------

@program(apart(2, -2, 2))
def cmp_and_or_not(x, y):
    s = 0.0
    if x < y and not x >= y:
        s += x * y
    if x > y or y <= -5.0:
        s += x - y * y
    if not (x == y) and x != y:
        s += x * x
    return s


@program(apart(3, -2, 2))
def cmp_chained(x, y, z):
    if x < y < z:
        return x * y * z
    elif z < y < x:
        return x + y * z
    elif y < x < z or z < x < y:
        return x * x - y
    return y * z - x


@st.composite
def _cmp_value_args(draw):
    # y off the threshold 1.5, x off y.
    y = draw(away(-2, 3, 1.5))
    return (y + draw(st.sampled_from([-1.0, 1.0])) * draw(floats(0.1, 1.5)), y)


@program(_cmp_value_args())
def cmp_as_value(x, y):
    b = x > y
    c = (x < y) or (y > 1.5)
    return x * b + y * c + 2.0 * x * (b and c) - y * (not c)


# --- conditional expressions --------------------------------------------------------------------

@program(args(apart(2, -2, 2), away(-2, 2, 0.0), away(0.2, 3, 1.0)))
def ternary(x, y, s, t):
    a = x * x if x > y else y * x
    b = math.sin(s) if s > 0.0 else math.cos(s) * s
    return a + b * (t if t < 1.0 else 1.0 / t) - (x if s > 0.0 else y)


# --- tuples -------------------------------------------------------------------------------------

@program(args(floats(-2, 2), floats(-2, 2)))
def tuple_swap(x, y):
    a, b = x * y, x + y
    a, b = b, a * 0.5
    (c, d), e = (a, b), a - b
    return c * d + e * e


@program(args(floats(0.2, 2), floats(-2, 2)))
def tuple_from_helper(x, y):
    r, t = _polar(x, y)
    return r * math.cos(t) + r * r * t


@program(args(matrices(floats(-2, 2))))
def tuple_shape_unpack(A):
    m, n = A.shape
    s = 0.0
    for i in range(m):
        for j in range(n):
            s += A[i, j] * (i + 1) * (j + 2) + A[i, j] * A[i, j]
    return s


# --- augmented assignment -----------------------------------------------------------------------

@program(args(floats(-2, 2), floats(-2, 2)))
def augassign_scalar(x, y):
    s = x
    s += y * y
    s *= x
    s -= 0.5 * y
    s /= 1.0 + y * y
    s **= 2
    return s


@program(args(vectors(floats(-1.5, 1.5))))
def augassign_array(a):
    n = len(a)
    b = np.ones(n)
    for i in range(n):
        b[i] += a[i]
        b[(i + 1) % n] *= a[i]
        b[i] -= 0.5 * a[i] * a[i]
    for i in range(n):
        b[i] /= 2.0 + a[i] * a[i]
    s = 0.0
    for i in range(n):
        s += b[i] * b[i]
    return s


# --- branches -----------------------------------------------------------------------------------

@program(args(away(-3, 3, -1.0, 0.5, 2.0)))
def if_elif_else(x):
    if x < -1.0:
        y = -x * x
    elif x < 0.5:
        y = math.sin(x)
    elif x < 2.0:
        y = x ** 3
    else:
        y = math.exp(-x)
    return y * x


@program(args(away(-2, 2, 0.0), away(-2, 2, 0.0, 1.0)))
def nested_if(x, y):
    a = 0.0
    b = 1.0
    if x > 0.0:
        if y > 1.0:
            a = x * y
        else:
            b = x + y
            a = b * b
    else:
        if y < 0.0:
            b = x * x * y
        a = b - x
    return a * b


# --- for loops over range -----------------------------------------------------------------------

@program(args(floats(-1.5, 1.5), st.integers(0, 8)))
def range_one_arg(x, n):
    s = 0.0
    for i in range(n):
        s += x ** i / (i + 1)
    return s


@program(args(floats(-1.2, 1.2), vectors(floats(-2, 2))))
def range_two_args(x, a):
    s = 0.0
    for i in range(2, len(a)):
        s = s * x + a[i] * a[i - 2]
    return s + x


@program(args(vectors(floats(-2, 2))))
def range_three_args(a):
    n = len(a)
    s = 0.0
    for i in range(1, n, 3):
        s += a[i] * a[i - 1]
    for i in range(0, n, 2):
        s += math.sin(a[i]) * (i + 1)
    return s


@program(args(vectors(floats(-2, 2))))
def range_negative_step(a):
    s = 0.0
    for i in range(len(a) - 1, -1, -1):
        s = s * 0.5 + a[i] * (i + 1)
    return s * s


@program(args(vectors(floats(-2, 2)), floats(-1, 1)))
def range_negative_stride(a, x):
    n = len(a)
    s = 0.0
    for i in range(n - 1, 0, -2):
        s += a[i] * a[i - 1] * x
        s *= 0.9
    for j in range(-1, -n - 1, -3):
        s += a[j] * a[j] * x
    return s


# --- nested loops -------------------------------------------------------------------------------

@program(args(vectors(floats(-2, 2))))
def nested_triangular(a):
    n = len(a)
    s = 0.0
    for i in range(n):
        for j in range(i):
            s += a[i] * a[j] * (i - j)
        for j in range(i, n):
            s += 0.1 * a[j] * a[i] * a[i]
    return s


@st.composite
def _product_args(draw):
    m, k, n = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    entries = floats(-2, 2)
    A = np.array(draw(st.lists(entries, min_size=m * k, max_size=m * k))).reshape(m, k)
    B = np.array(draw(st.lists(entries, min_size=k * n, max_size=k * n))).reshape(k, n)
    return A, B


@program(_product_args())
def nested_matrix_product(A, B):
    s = 0.0
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            c = 0.0
            for k in range(A.shape[1]):
                c += A[i, k] * B[k, j]
            s += c * c
    return s


@program(args(floats(-1, 1), st.integers(0, 4)))
def nested_three_level(x, n):
    s = 0.0
    for i in range(n):
        for j in range(i + 1):
            for k in range(j + 1):
                s += math.sin(x * (i + 1)) * (j - k + 1) + s * x * 0.1
    return s


# --- while loops --------------------------------------------------------------------------------

@program(args(floats(0.5, 4)))
def while_newton_sqrt(a):
    y = a
    k = 0
    while k < 6:
        y = 0.5 * (y + a / y)
        k += 1
    return y


@program(args(floats(-0.9, 0.9), st.integers(1, 30)))
def while_collatz(x, n):
    s = 0.0
    while n != 1:
        if n % 2 == 0:
            n //= 2
            s = s * x + 1.0
        else:
            n = 3 * n + 1
            s = math.sin(s) + x
    return s


@program(args(vectors(floats(-1, 1))))
def while_countdown(a):
    i = len(a) - 1
    s = 1.0
    while i >= 0:
        s = 0.5 * s * a[i] + a[i]
        i -= 1
    return s


# --- break / continue ---------------------------------------------------------------------------

@program(args(vectors(floats(-2, 2)), st.integers(0, 12)))
def break_at_index(a, k):
    s = 0.0
    for i in range(len(a)):
        if i == k:
            break
        s += a[i] * a[i] * (i + 1)
    return s


@program(args(vectors(away(-2, 2, 1.0))))
def break_on_value(a):
    s = 0.0
    for i in range(len(a)):
        if a[i] > 1.0:
            break
        s = s * a[i] + 1.0
    return s


@program(args(floats(-1, 1)))
def break_in_while_true(x):
    i = 0
    s = 0.0
    while True:
        i += 1
        s = s * x + i
        if i >= 5:
            break
    return s


@program(args(vectors(away(-2, 2, 0.0))))
def continue_on_sign(a):
    s = 0.0
    for i in range(len(a)):
        if a[i] < 0.0:
            continue
        s += math.sqrt(a[i] + 0.5) * a[i]
    return s


@program(args(vectors(floats(-2, 2)), floats(-2, 2)))
def continue_on_index(a, x):
    n = len(a)
    s = 0.0
    for i in range(n):
        if i % 3 == 1:
            continue
        for j in range(n):
            if j == i:
                continue
            s += a[i] * a[j] * x
        s += a[i] * x * x
    return s


# --- early return -------------------------------------------------------------------------------

@program(args(apart(2, -2, 2), away(-2, 2, 1.0)))
def early_return(x, y, z):
    if x > y:
        return x * x - y * z
    w = x * y
    if z > 1.0:
        return w * w + z
    return math.exp(w) * z


@program(args(vectors(away(-2, 2, 1.0))))
def early_return_in_loop(a):
    s = 0.0
    for i in range(len(a)):
        s += a[i] * a[i]
        if a[i] > 1.0:
            return s * a[i]
    return -s


@program(args(matrices(away(-2, 2, 1.0))))
def early_return_in_nested_loop(A):
    s = 0.0
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            if A[i, j] > 1.0:
                return s + A[i, j] * (i + 1)
            s += A[i, j] * A[i, j]
    return s


# --- array reads and writes ---------------------------------------------------------------------

@program(args(vectors(floats(-2, 2))))
def array_write_1d(a):
    n = len(a)
    b = np.empty(n)
    for i in range(n):
        b[i] = a[i] * a[(i + 1) % n] + 1.0
    s = 0.0
    for i in range(n):
        s += b[i] * a[i]
    return s


@program(args(vectors(floats(-2, 2))))
def array_write_2d(a):
    n = len(a)
    M = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            M[i, j] = a[i] * a[j] - (i == j) * a[i]
    s = 0.0
    for i in range(n):
        for j in range(n):
            s += M[i, j] * M[j, (i + 1) % n]
    return s


@st.composite
def _matvec_args(draw):
    A = draw(matrices(floats(-2, 2)))
    x = np.array(draw(st.lists(floats(-2, 2), min_size=A.shape[1], max_size=A.shape[1])))
    return A, x


@program(_matvec_args())
def matrix_vector(A, x):
    y = np.zeros(A.shape[0])
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            y[i] += A[i, j] * x[j]
    s = 0.0
    for i in range(A.shape[0]):
        s += y[i] * y[i]
    return s


# --- in-place updates that overwrite values the reverse pass needs ------------------------------

@program(args(vectors(floats(-1.5, 1.5))))
def inplace_cumprod(x):
    x = x.copy()
    for i in range(1, len(x)):
        x[i] = x[i] * x[i - 1]
    s = 0.0
    for i in range(len(x)):
        s += x[i]
    return s


@program(args(vectors(floats(-2, 2)), floats(-0.9, 0.9)))
def inplace_recurrence(a, c):
    y = a.copy()
    for i in range(1, len(y)):
        y[i] = c * y[i - 1] + math.sin(y[i])
    s = 0.0
    for i in range(len(y)):
        s += y[i] * (i + 1)
    return s + y[len(y) - 1] ** 2


@program(args(vectors(floats(-2, 2))))
def inplace_smoothing_sweeps(a):
    y = a.copy()
    n = len(y)
    for sweep in range(3):
        for i in range(1, n - 1):
            y[i] = 0.5 * (y[i - 1] + y[i + 1]) + 0.3 * math.sin(y[i])
    s = 0.0
    for i in range(n):
        s += y[i] * y[i]
    return s


@program(args(matrices(floats(-1.2, 1.2))))
def inplace_2d_recurrence(A):
    B = A.copy()
    m, n = B.shape
    for i in range(1, m):
        for j in range(n):
            B[i, j] = B[i, j] * B[i - 1, j] + 0.5 * B[i, j]
    s = 0.0
    for j in range(n):
        s += B[m - 1, j] + B[0, j] * B[m - 1, j]
    return s


@program(args(floats(-2, 2)))
def inplace_scalar_overwrite(x):
    s = x
    s = s * s
    s = math.sin(s) + x
    s = s * s * x
    x = x * x + 1.0
    x = math.log(x)
    return s + x * x


@program(args(vectors(floats(-2, 2))))
def inplace_swap_elements(a):
    b = a.copy()
    n = len(b)
    for i in range(n // 2):
        t = b[i]
        b[i] = b[n - 1 - i] * t
        b[n - 1 - i] = t * t
    s = 0.0
    for i in range(n):
        s += b[i] * (i + 1)
    return s


# --- local arrays -------------------------------------------------------------------------------

@program(args(vectors(floats(-2, 2))))
def local_zeros_ones(a):
    n = len(a)
    z = np.zeros(n)
    o = np.ones(n)
    for i in range(n):
        z[i] = a[i] * o[i] + o[i]
        o[i] = z[i] * a[i]
    s = 0.0
    for i in range(n):
        s += z[i] * o[i]
    return s


@program(args(vectors(floats(-2, 2))))
def local_empty_full(a):
    n = a.shape[0]
    e = np.empty(n)
    f = np.full(n, 2.0)
    for i in range(n):
        e[i] = f[i] * a[i]
        f[i] += e[i] * e[i]
    s = 0.0
    for i in range(n):
        s += e[i] + f[i] * a[i]
    return s


@program(args(vectors(floats(-2, 2))))
def local_like(a):
    z = np.zeros_like(a)
    e = np.empty_like(a)
    for i in range(len(a)):
        z[i] += a[i] * a[i]
        e[i] = z[i] - a[i]
    s = 0.0
    for i in range(len(a)):
        s += z[i] * e[i]
    return s


@program(args(vectors(floats(-2, 2))))
def local_2d(a):
    n = len(a)
    M = np.zeros((n, n))
    F = np.full((2, n), 0.5)
    O = np.ones((n, 2))
    for i in range(n):
        for j in range(n):
            M[i, j] = a[i] * a[j]
        F[0, i] = F[1, i] * a[i]
        O[i, 1] = O[i, 0] + a[i]
    s = 0.0
    for i in range(n):
        s += M[i, n - 1 - i] + F[0, i] * O[i, 1]
    return s


@program(args(vectors(floats(-2, 2))))
def local_copy_of_local(a):
    n = len(a)
    b = np.ones(n)
    for i in range(n):
        b[i] = math.cos(a[i])
    c = b.copy()
    d = a.copy()
    for i in range(n):
        b[i] = 0.0
        c[i] *= d[i]
        d[i] = 1.0
    s = 0.0
    for i in range(n):
        s += c[i] + b[i] + d[i]
    return s


# --- math functions -----------------------------------------------------------------------------

@program(args(floats(-1.2, 1.2)))
def math_trig(x):
    return math.sin(x) * math.cos(2.0 * x) + math.tan(x)


@program(args(floats(0.1, 3)))
def math_exp_log(x):
    return math.exp(-x) * math.log(x) + math.log1p(x) - math.expm1(0.5 * x)


@program(args(floats(0.1, 3)))
def math_sqrt_hyperbolic(x):
    return math.sqrt(x) * math.tanh(x) + math.sinh(0.5 * x) - math.cosh(x) / (1.0 + x)


@program(args(floats(0.1, 3), floats(-3, 3)))
def math_atan_atan2(x, y):
    return math.atan(x * y) + math.atan2(y, x) * x + math.atan2(x, y)


@program(args(floats(0.2, 3), away(-2, 2, 0.0)))
def math_pow_fabs_hypot(x, y):
    return math.pow(x, y) + math.fabs(y) * x + math.hypot(x, y) + math.pow(y, 2.0)


@st.composite
def _floor_ceil_args(draw):
    # floor(x) jumps at integers, ceil(2 x) at half-integers: keep the fraction of x off both.
    return (draw(st.integers(-3, 2)) + draw(st.one_of(floats(0.1, 0.4), floats(0.6, 0.9))),)


@program(_floor_ceil_args())
def math_floor_ceil(x):
    return math.floor(x) * x + math.ceil(2.0 * x) * x * x + x


@program(args(vectors(floats(-2, 2))))
def math_elementwise(a):
    s = 0.0
    for i in range(len(a)):
        s += math.sin(a[i]) * math.exp(-a[i] * a[i]) + math.cos(a[i] * i)
    return s


# --- abs / min / max ----------------------------------------------------------------------------

@program(args(away(-2, 2, 0.0), away(-2, 2, 0.0)))
def builtin_abs(x, y):
    return abs(y) ** 1.5 + abs(x) * y + abs(-x * y)


@program(apart(3, -2, 2))
def builtin_min_max(x, y, z):
    return min(x, y) * max(y, z) + max(x, y, z) - min(x, z, y) * x


@program(args(distinct_vectors(-3, 3)))
def running_min_max(a):
    hi = a[0]
    lo = a[0]
    for i in range(1, len(a)):
        hi = max(hi, a[i])
        lo = min(a[i], lo)
    return hi * lo + hi


# --- helper calls -------------------------------------------------------------------------------

@program(args(floats(-2, 2), floats(-2, 2)))
def helper_plain(x, y):
    return _sq_plus(x, y) * _sq_plus(y, x)


@program(args(floats(-2, 2), vectors(floats(-2, 2))))
def helper_njit(x, a):
    return _softplus(x) * _njit_dot(a, a) + _softplus(-x)


@program(args(floats(-2, 2)))
def helper_chain(x):
    return _outer_plain(x) + _inner_plain(x * x)


@program(args(vectors(floats(-2, 2))))
def helper_array_builder(a):
    b = _squares(a)
    s = 0.0
    for i in range(len(b)):
        s += b[i] * a[i]
    return s


# --- generic functions --------------------------------------------------------------------------

@program(args(floats(-2, 2), st.integers(0, 6)))
def generic_recursion(x, n):
    return power(x, n) + power(x * 0.5, 3)


@program(args(floats(-2, 2), st.integers(0, 6)))
def generic_mutual_recursion(x, n):
    return even_part(x, n) * x


@program(args(floats(-2, 2), vectors(floats(-2, 2))))
def generic_two_methods(x, a):
    s = norm2(x) * norm2(a)
    for i in range(len(a)):
        s += norm2(a[i] * x)
    return s


# --- integer and boolean arguments --------------------------------------------------------------

@program(args(floats(-2, 2), st.integers(0, 5), vectors(floats(-2, 2)), st.integers(-3, 3)))
def mixed_int_args(x, n, a, k):
    s = 0.0
    for i in range(n):
        s += x * a[(i * k) % len(a)]
    return s + k * x * x + n


@program(args(floats(-2, 2), st.booleans()))
def mixed_bool_flag(x, flag):
    if flag:
        return x * x * x
    return -x + int(flag) * x


@st.composite
def _gather_args(draw):
    a = draw(vectors(floats(-2, 2)))
    idx = draw(st.lists(st.integers(0, len(a) - 1), min_size=1, max_size=12))
    return a, np.array(idx, dtype=np.int64)


@program(_gather_args())
def int_array_gather(a, idx):
    s = 0.0
    for i in range(len(idx)):
        s += a[idx[i]] * a[idx[i]] * (i + 1)
    return s


@program(args(floats(-2, 2), st.integers(0, 5)))
def int_to_float(x, n):
    return float(n) * x + x ** n + (n / 2) * x * x


# --- saving only what the reverse pass reads; one iteration's tape ------------------------------

@st.composite
def _rows(draw, lo=-2.0, hi=2.0):
    """A flat vector of distinct values (no ties for max) and a column count dividing it."""
    cols = draw(st.integers(1, 4))
    rows = draw(st.integers(1, 3))
    v = draw(apart(rows * cols, lo, hi))
    return np.array(v), cols


@program(_rows())
def rows_logsumexp(v, cols):
    s = 0.0
    for i in range(len(v) // cols):
        m = v[i * cols]
        for j in range(1, cols):
            m = max(m, v[i * cols + j])
        t = 0.0
        for j in range(cols):
            t += math.exp(v[i * cols + j] - m)
        s += m + math.log(t)
    return s


@program(args(vectors(floats(-1.5, 1.5))))
def running_sum_read(x):
    t = 0.0
    s = 0.0
    for j in range(len(x)):
        t = t + x[j]
        s += t * x[j]
    return s + t * t


@program(args(floats(-2, 2), floats(-2, 2)))
def param_reassigned(x, y):
    a = x * y
    x = x * x + 1.0
    y = math.sin(x) * a
    return a * x + y


@program(args(vectors(floats(-2, 2), min_size=2)))
def loop_var_after_loop(v):
    s = 0.0
    for j in range(len(v)):
        s += v[j] * v[j]
    w = v[j] * s
    s2 = 0.0
    for j in range(1, len(v)):
        s2 += v[j - 1] * v[j]
    return w + s2 * v[j]


@program(args(vectors(floats(-2, 2)), st.integers(1, 4)))
def zero_trip_accumulator(v, c):
    s = 0.0
    for i in range(len(v)):
        t = 0.5
        for j in range(i % c):
            t += v[j] * v[j]
        s += math.log(t) * v[i]
    return s


@program(args(vectors(away(-2, 2, 0.0))))
def fused_rows_with_branch(v):
    s = 0.0
    for i in range(len(v)):
        m = v[i]
        if v[i] > 0.0:
            for j in range(len(v)):
                m = m * math.cos(v[j]) + v[i]
        s += m * v[i]
    return s


@program(args(vectors(floats(-2, 2)), floats(0.5, 2)))
def top_level_helper_kept(v, a):
    t = _rows_energy(v, a)
    u = _softplus(a)
    return t * u + t


def _rows_energy(v, a):
    e = 0.0
    for i in range(len(v)):
        e += math.exp(-a * v[i] * v[i])
    return e



@program(args(vectors(away(-2.0, 2.0, 0.0, gap=0.3)), floats(0.5, 2.0)))
def quotients_overwritten(x, a):
    s = 0.0
    q = 0.0
    for i in range(len(x)):
        q = 1.0 / x[i]            # d_x = -g q q: reads q, overwritten next iteration
        r = 2.0 / (q * q + a)
        s += q * r
        q = (s + a) / (x[i] * x[i] + a)   # both active: one division for both adjoints
        s += q
        a = a / (q * q + 1.0) + 0.5
    return s + q * a


# --- float32 ------------------------------------------------------------------------------------

@program(args(vectors(st.floats(-2, 2, width=32)).map(lambda v: v.astype(np.float32))))
def float32_array(a):
    b = np.zeros_like(a)
    s = 0.0
    for i in range(len(a)):
        b[i] = a[i] * a[i]
        s += b[i] * a[i] + math.sin(a[i])
    return s


NAMES = [name for name, _, _ in CORPUS]
PROGRAMS = {name: (fn, strategy) for name, fn, strategy in CORPUS}
assert len(PROGRAMS) == len(CORPUS), "program names must be distinct"


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 45


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_gradient_matches_finite_differences(name, data):
    fn, strategy = PROGRAMS[name]
    inputs = data.draw(strategy, label="args")
    report = check_grad(fn, *inputs)
    assert report, f"{name}: nothing was checked"


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_pullback_agrees_with_grad(name, data):
    """The separate forward/pullback kernels and the gradient driver (fused or not) agree."""
    fn, strategy = PROGRAMS[name]
    inputs = data.draw(strategy, label="args")
    floats_at = [i for i, a in enumerate(inputs)
                 if isinstance(a, float) or (isinstance(a, np.ndarray) and a.dtype.kind == "f")]
    _, pb = nr.pullback(fn, *inputs)
    tangents = pb(1.0)
    grads = nr.grad(fn, argnums=tuple(floats_at))(*inputs)
    for k, i in enumerate(floats_at):
        np.testing.assert_allclose(tangents[i], grads[k], rtol=1e-10, atol=1e-12)
