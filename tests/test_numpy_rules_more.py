"""More NumPy rules (element-wise, shape, reductions, linear algebra) against central finite
differences on hypothesis-drawn shapes and values, and JAX's conventions at kinks and ties.

Compiling the kernels dominates the cost here (linking a gradient re-optimises every rule it
calls), so each differentiated function groups many rules and is compiled for one set of
argument types; the terms are ``np.sum(rule(...) ** p)`` with distinct powers and factors (no
array-by-array products, whose broadcasting adjoints are the most expensive code to compile).
Every rule's pullback thus receives a non-constant cotangent, and a misplaced or mis-scaled
tangent shows up against the finite differences.
"""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import numbarules as nr
from numbarules.testing import check_grad

dims = st.integers(1, 4)


def grad(f, argnums=0):
    """``nr.grad`` with bounds-checked kernels, as check_grad compiles them: the kernels are
    shared (compiling dominates this file's time), and every index in the rules is checked."""
    return nr.grad(f, argnums, boundscheck=True)


def pullback(f, *args):
    return nr.pullback(f, *args, boundscheck=True)


def arrays(shape, el):
    n = int(np.prod(shape))
    return st.lists(el, min_size=n, max_size=n).map(lambda v: np.array(v).reshape(shape))


def signed(lo, hi):
    """Floats with lo <= |v| <= hi, either sign: away from the kinks at 0."""
    mag = st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False)
    return st.tuples(st.sampled_from([-1.0, 1.0]), mag).map(lambda t: t[0] * t[1])


def distinct(n, step=0.02):
    """``n`` values of |v| in [step, 100 step], pairwise distinct magnitudes, random signs."""
    return st.lists(st.integers(1, 100), min_size=n, max_size=n, unique=True).flatmap(
        lambda ks: st.lists(st.sampled_from([-1.0, 1.0]), min_size=n, max_size=n).map(
            lambda signs: np.array([s * k * step for s, k in zip(signs, ks)])))


def apart(values, gap=1e-3):
    v = np.sort(np.ravel(values))
    return v.size < 2 or np.min(np.diff(v)) > gap


# --- element-wise ----------------------------------------------------------------------------

def unary(x):
    # |x| in [0.05, 0.65]: inside every domain, away from kinks and from the jumps of
    # remainder; chains hand each inner rule the outer one's derivative as its cotangent
    return (np.sum(np.arctanh(np.sinh(np.arcsin(x))) ** 3)
            + np.sum(np.tan(np.log10(np.arccosh(np.abs(np.reciprocal(x))))) ** 2)
            + np.sum(np.cbrt(np.exp2(np.arctan(np.arcsinh(np.log2(np.arccos(x)))))) ** 3)
            + np.sum(np.cosh(np.negative(np.radians(np.degrees(np.log1p(x) ** 3)))) * 2.0)
            + np.sum(np.square(np.remainder(x, 0.7)) ** 2) + np.sum(np.mod(x, 0.8) ** 3)
            + np.sum(np.sign(x) * 2.0))


@settings(max_examples=10, deadline=None)
@given(dims.flatmap(lambda m: dims.flatmap(lambda n: arrays((m, n), signed(0.05, 0.65)))))
def test_unary_functions_on_arrays_and_scalars(x):
    check_grad(unary, x)                  # arrays: one-loop array rules where there are some
    check_grad(unary, float(x[0, 0]))     # scalars: the scalar rules


def binary(A, B, s):
    # every function with two arrays, and a float with an array both ways (rules of their own);
    # an integer with an array goes through the scalar rule and the engine's broadcasting
    return (np.sum(np.multiply(A, B) ** 2) + np.sum(np.divide(A, B) ** 3)
            + np.sum(np.arctan2(A, B) ** 3) + np.sum(np.hypot(A, B) ** 3)
            + np.sum(np.power(B, A) ** 2) + np.sum(np.maximum(A, B) ** 2)
            + np.sum(np.minimum(A, B) ** 3) + np.sum(np.remainder(A, B) ** 2)
            + np.sum(np.multiply(s, A) ** 3) + np.sum(np.true_divide(s, A) * 0.5)
            + np.sum(np.arctan2(A, s) ** 2) + np.sum(np.hypot(s, B) ** 2)
            + np.sum(np.power(B, s) ** 2) + np.sum(np.maximum(s, A) ** 3)
            + np.sum(np.minimum(A, s) ** 2) + np.sum(np.mod(s, B) ** 2)
            + np.sum(np.maximum(A, 1) ** 2))


@st.composite
def broadcast_pair(draw):
    """(A, B, s): B a row, a column or of A's shape (one set of kernels: both are matrices);
    |A| in [0.2, 2]; B and s in [0.5, 2] (positive bases for power)."""
    m, n = draw(dims), draw(dims)
    A = draw(arrays((m, n), signed(0.2, 2.0)))
    shape = draw(st.sampled_from([(1, n), (m, 1), (m, n)]))
    positive = st.floats(min_value=0.5, max_value=2.0)
    return A, draw(arrays(shape, positive)), draw(positive)


def off_jumps(q, gap=0.02):
    """No quotient within ``gap`` of an integer: remainder jumps there."""
    return np.min(np.abs(q - np.round(q))) > gap


@settings(max_examples=12, deadline=None)
@given(broadcast_pair())
def test_binary_functions_with_broadcasting(case):
    A, B, s = case
    assume(min(np.min(np.abs(A - B)), np.min(np.abs(A - s)), np.min(np.abs(A - 1))) > 1e-3)
    assume(off_jumps(A / B) and off_jumps(s / B))       # remainder's jumps
    check_grad(binary, A, B, s)
    check_grad(binary, float(A[0, 0]), float(B[0, 0]), s)     # the scalar rules


# --- shape functions -------------------------------------------------------------------------

def shapes(A, v, k):
    axis = k // 2                # -2 .. 1: valid for expand_dims of a matrix
    return (np.sum(np.atleast_1d(v) ** 3) + np.sum(np.atleast_2d(v) ** 2 * 0.5)
            + np.sum(np.atleast_3d(A) ** 3) + np.sum(np.atleast_1d(A) * 0.25)
            + np.sum(np.expand_dims(A, axis) ** 2 * 1.5) + np.sum(np.flipud(A) ** 3)
            + np.sum(np.fliplr(A) ** 3 * 0.5) + np.sum(np.flipud(v) ** 3)
            + np.sum(np.diag(A) ** 3) + np.sum(np.diag(A, k) ** 2) + np.sum(np.diag(v) ** 3)
            + np.sum(np.diag(v, k) ** 2 * 0.5) + np.trace(A) ** 2 + np.trace(A, k) * 3.0
            + np.sum(np.triu(A) ** 3) + np.sum(np.triu(A, k) ** 2)
            + np.sum(np.tril(A) ** 3 * 0.5) + np.sum(np.tril(A, k=k) ** 2 * 1.5)
            + np.sum(np.triu(v) ** 3) + np.sum(np.triu(v, k) ** 2) + np.sum(np.tril(v) * 2.0)
            + np.sum(np.tril(v, k) ** 3))


@st.composite
def matrix_vector_int(draw):
    el = st.floats(min_value=-2.0, max_value=2.0)
    return (draw(arrays((draw(dims), draw(dims)), el)), draw(arrays((draw(dims),), el)),
            draw(st.integers(-3, 3)))


@settings(max_examples=15, deadline=None)
@given(matrix_vector_int())
def test_atleast_expand_dims_flips_diag_trace_triu_tril(case):
    check_grad(shapes, *case, argnums=(0, 1))


def shapes_gradient(A, v, k):
    """The gradient of ``shapes`` written out with NumPy."""
    def on_diagonal(X, k):
        return np.where(np.eye(*A.shape, k=k) == 1.0, X, 0.0)
    n = v.size
    V, ones = np.tile(v, (n, 1)), np.ones((n, n))
    gA = (3.0 * A ** 2 + 0.25 + 3.0 * A + 3.0 * A ** 2 + 1.5 * A ** 2 + on_diagonal(3.0 * A ** 2, 0)
          + on_diagonal(2.0 * A, k) + on_diagonal(2.0 * np.trace(A) + 0.0 * A, 0)
          + on_diagonal(3.0 + 0.0 * A, k) + 3.0 * np.triu(A) ** 2 + 2.0 * np.triu(A, k)
          + 1.5 * np.tril(A) ** 2 + 3.0 * np.tril(A, k))
    gv = (3.0 * v ** 2 + v + 3.0 * v ** 2 + 3.0 * v ** 2 + v + np.sum(3.0 * np.triu(V) ** 2, 0)
          + np.sum(2.0 * np.triu(V, k), 0) + np.sum(2.0 * np.tril(ones), 0)
          + np.sum(3.0 * np.tril(V, k) ** 2, 0))
    return gA, gv


@pytest.mark.parametrize("k", [-1, 2, 5])
def test_diag_trace_and_triangle_tangents_sit_where_they_belong(k):
    A = np.arange(12.0).reshape(3, 4) * 0.1 - 0.5
    v = np.array([1.0, -2.0, 0.5])
    for got, want in zip(grad(shapes, argnums=(0, 1))(A, v, k), shapes_gradient(A, v, k)):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


# --- reductions ------------------------------------------------------------------------------

def reductions(A, T, axis):
    return (np.sum(np.cumsum(A, axis) ** 2) + np.sum(np.cumsum(A) ** 3 * 0.1)
            + np.sum(A, axis=(0, 1)) ** 2 + np.sum(np.sum(T, axis=(0, 2)) ** 2)
            + np.sum(np.sum(T, (-1,)) ** 3) + T.sum(axis=(2, 0, 1)) * 0.5
            + np.prod(A) + np.var(A) * 2.0 + np.std(T))


@st.composite
def matrix_stack_axis(draw):
    el = st.floats(min_value=-2.0, max_value=2.0)
    A = draw(arrays((draw(dims), draw(dims)), el))
    T = draw(arrays((draw(dims), draw(dims), draw(st.integers(2, 3))), el))
    return A, T, draw(st.integers(-2, 1))


@settings(max_examples=12, deadline=None)
@given(matrix_stack_axis())
def test_cumsum_axis_tuple_sums_prod_var_std(case):
    A, T, axis = case
    assume(np.std(T) > 1e-3)              # std has a kink where every value is the same
    check_grad(reductions, A, T, axis, argnums=(0, 1))


# --- linear algebra ----------------------------------------------------------------------------

def linear_algebra(S, b, Bm, R):
    sign, logdet = np.linalg.slogdet(S)
    return (np.linalg.det(S) + logdet * 2.0 + sign + np.sum(np.linalg.inv(S) ** 2)
            + np.sum(np.linalg.solve(S, b) ** 2) + np.sum(np.linalg.solve(S, Bm) ** 3)
            + np.sum(np.linalg.pinv(R) ** 2) + np.linalg.norm(R) ** 2 + np.linalg.norm(S, 2)
            + np.linalg.norm(S, -2) * 2.0)


@st.composite
def linear_systems(draw):
    n, k = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    el = st.floats(min_value=-1.0, max_value=1.0)
    # S = M + d I with |d| = n + 1 > any row sum of |M|: far from singular, either det sign
    d = draw(st.sampled_from([-1.0, 1.0])) * (n + 1.0)
    S = draw(arrays((n, n), el)) + d * np.eye(n)
    # R (n + k, n): a scaled identity on top keeps its singular values >= 2
    R = np.vstack([2.0 * np.eye(n), draw(arrays((k, n), el))])
    if draw(st.booleans()):
        R = np.ascontiguousarray(R.T)      # wide as well as tall
    return S, draw(arrays((n,), el)), draw(arrays((n, k), el)), R


@settings(max_examples=12, deadline=None)
@given(linear_systems())
def test_det_slogdet_inv_solve_pinv_norms(case):
    sv = np.linalg.svd(case[0], compute_uv=False)
    assume(apart(sv, 1e-2))               # the 2-norms: distinct extreme singular values
    check_grad(linear_algebra, *case)


def line_norms(A, x, inf):
    # np.inf is an argument: a literal np.inf in differentiated code does not compile yet
    # (the frontend prints the constant as `inf`, an undefined name)
    return (np.linalg.norm(A, 1) + np.linalg.norm(A, -1) * 2.0 + np.linalg.norm(A, inf) * 3.0
            + np.linalg.norm(A, -inf) * 4.0 + np.linalg.norm(x, 1) + np.linalg.norm(x, ord=3)
            + np.linalg.norm(x, inf) * 2.0 + np.linalg.norm(x, -inf) * 3.0
            + np.linalg.norm(x, 2.5) + np.linalg.norm(x, 2))


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 4).flatmap(lambda m: st.integers(1, 4).flatmap(
    lambda n: distinct(m * n + n).map(lambda v: (v[:m * n].reshape(m, n), v[m * n:])))))
def test_matrix_and_vector_norms_of_other_orders(case):
    A, x = case
    assume(apart(np.sum(np.abs(A), 0)) and apart(np.sum(np.abs(A), 1)))    # no tied lines
    check_grad(line_norms, A, x, np.inf, argnums=(0, 1))


def test_vector_inf_norm_splits_ties_and_one_norm_takes_abs_prime_at_zero():
    x = np.array([1.0, -2.0, 2.0, 0.0])
    gx = grad(line_norms, argnums=(0, 1))(np.ones((1, 1)), x, np.inf)[1]
    p_norms = sum(np.sign(x) * np.abs(x) ** (p - 1) / np.linalg.norm(x, p) ** (p - 1)
                  for p in (3.0, 2.5, 2.0))
    np.testing.assert_allclose(gx, np.array([1.0, -1.0, 1.0, 1.0])          # norm 1
                               + 2.0 * np.array([0.0, -0.5, 0.5, 0.0])      # inf: a tie
                               + 3.0 * np.array([0.0, 0.0, 0.0, 1.0])       # -inf: the zero
                               + p_norms, rtol=1e-14, atol=1e-15)


def test_pullbacks_called_by_hand_agree_with_grad_and_the_formulas():
    rng = np.random.default_rng(7)
    A = rng.normal(size=(4, 4)) + 5.0 * np.eye(4)
    b, B, G = rng.normal(size=4), rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    X, pb = pullback(np.linalg.solve, A, B)
    np.testing.assert_allclose(X, np.linalg.solve(A, B), rtol=1e-12)
    dA, dB = pb(G)
    np.testing.assert_allclose(dB, np.linalg.solve(A.T, G), rtol=1e-10)
    np.testing.assert_allclose(dA, -np.linalg.solve(A.T, G) @ X.T, rtol=1e-10)
    Y, pb = pullback(np.linalg.inv, A)
    np.testing.assert_allclose(pb(G @ G.T)[0], -Y.T @ (G @ G.T) @ Y.T, rtol=1e-10)
    # a function's pullback at dy = 1 is its gradient
    R = np.vstack([A, B.T])
    y, pb = pullback(linear_algebra, A, b, B, R)
    assert y == pytest.approx(linear_algebra(A, b, B, R), rel=1e-12)
    for g, w in zip(pb(1.0), grad(linear_algebra, argnums=(0, 1, 2, 3))(A, b, B, R)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_det_of_singular_matrices_is_the_cofactor_matrix():
    det_grad = grad(np.linalg.det)
    np.testing.assert_allclose(det_grad(np.array([[1.0, 2.0], [2.0, 4.0]])),
                               [[4.0, -2.0], [-2.0, 1.0]], atol=1e-12)
    S = np.arange(1.0, 10.0).reshape(3, 3)       # rank 2
    cof = np.array([[np.linalg.det(np.delete(np.delete(S, i, 0), j, 1)) * (-1) ** (i + j)
                     for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(det_grad(S), cof, atol=1e-9)
    np.testing.assert_array_equal(det_grad(np.zeros((3, 3))), np.zeros((3, 3)))


# --- JAX's conventions at kinks and ties, exactly ----------------------------------------------

def kinks(x, y):
    return (np.sum(np.abs(x)) + 10.0 * np.sum(np.maximum(x, y)) + 100.0 * np.sum(np.minimum(x, y))
            + 1000.0 * np.sum(np.clip(x, -1.0, 1.0)) + 1e4 * np.sum(np.clip(y, x, 1.0))
            + 1e5 * (np.sum(np.sign(x)) + np.sum(np.sign(y)))
            + 1e6 * np.sum(np.clip(x, None, 1.0)) + 1e7 * np.sum(np.clip(y, 0.0, None)))


def test_abs_maximum_minimum_clip_sign_at_kinks():
    x = np.array([0.0, 1.0, -1.0, 2.0, 0.5])
    y = np.array([0.0, 1.0, 3.0, -2.0, 0.5])
    gx, gy = grad(kinks, argnums=(0, 1))(x, y)
    # abs'(0) = 1; max / min ties 0.5 each; clip: 0.5 at a bound, 1 inside, 0 outside;
    # clip(y, x, 1) = min(max(y, x), 1): y == x splits 0.5 / 0.5, and at x = y = 1 the upper
    # bound halves that again (0.25 each); at x = 2 > 1 the upper bound takes everything
    # a missing bound (None) is no bound: np.clip(y, 0.0, None) is relu with relu'(0) = 0.5
    np.testing.assert_array_equal(gx, np.array([1 + 5 + 50 + 1000 + 5000, 1 + 5 + 50 + 500 + 2500,
                                                -1 + 0 + 100 + 500 + 0, 1 + 10 + 0 + 0 + 0,
                                                1 + 5 + 50 + 1000 + 5000])
                                  + 1e6 * np.array([1.0, 0.5, 1.0, 0.0, 1.0]))
    np.testing.assert_array_equal(gy, np.array([5 + 50 + 5000, 5 + 50 + 2500, 10 + 0 + 0,
                                                0 + 100 + 0, 5 + 50 + 5000])
                                  + 1e7 * np.array([0.5, 1.0, 1.0, 0.0, 1.0]))


def scalar_kinks(a, b):
    return np.abs(a) + np.maximum(a, b) * 10.0 + np.minimum(a, b) * 100.0


def test_scalar_abs_maximum_minimum_at_kinks():
    assert grad(scalar_kinks, argnums=(0, 1))(0.0, 0.0) == (56.0, 55.0)
    assert grad(scalar_kinks, argnums=(0, 1))(-1.0, 2.0) == (99.0, 10.0)


def scalar_bounds(x, lo, hi):
    return np.sum(np.clip(x, lo, hi) ** 2)


def test_clip_with_scalar_bounds_is_one_pass_and_splits_at_the_bounds():
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0, 0.25])
    assert nr.rule_for(np.clip, x, -0.5, 0.5).kind == "rrule"
    gx, glo, ghi = grad(scalar_bounds, argnums=(0, 1, 2))(x, -0.5, 0.5)
    np.testing.assert_array_equal(gx, [0.0, -0.5, 0.0, 0.5, 0.0, 0.5])
    assert (glo, ghi) == (-2.0 * 0.5 - 0.5, 2.0 * 0.5 + 0.5)
    check_grad(scalar_bounds, np.array([-0.9, -0.3, 0.2, 0.7, 1.4]), -0.5, 0.5)


def powers(x, p):
    return np.sum(np.power(x, p))


def test_power_at_zero_base_and_zero_exponent():
    x = np.array([0.0, 0.0, 2.0, 0.0, 3.0])
    p = np.array([0.0, 2.0, 0.0, 1.5, 2.0])
    gx, gp = grad(powers, argnums=(0, 1))(x, p)
    np.testing.assert_array_equal(gx, [0.0, 0.0, 0.0, 0.0, 6.0])
    np.testing.assert_allclose(gp, [0.0, 0.0, np.log(2.0), 0.0, 9.0 * np.log(3.0)], rtol=1e-15)
    assert grad(powers, argnums=(0, 1))(0.0, 0.0) == (0.0, 0.0)
    assert grad(powers, argnums=(0, 1))(0.0, 3.0) == (0.0, 0.0)


def extremes(A):
    return (np.max(A) + 10.0 * np.min(A) + 100.0 * np.sum(np.max(A, 0))
            + 1000.0 * np.sum(np.min(A, axis=1)))


def test_max_and_min_split_ties_equally():
    A = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(grad(extremes)(A), [
        [1 / 3 + 50, 1 / 3 + 100, 10 / 3 + 50 + 1000],
        [1 / 3 + 50, 10 / 3 + 500, 10 / 3 + 50 + 500]], rtol=1e-15)
    # a NaN result (NumPy's max and min propagate NaN): the slice's NaNs share the cotangent
    B = np.array([[np.nan, 1.0, 2.0], [0.5, 1.0, 2.0]])
    np.testing.assert_array_equal(grad(extremes)(B), [[1111.0, 50.0, 50.0],
                                                         [1000.0, 50.0, 50.0]])
