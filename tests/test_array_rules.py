"""Slices, views, shape functions, axis reductions, element types and structs built in
differentiated code, checked against central finite differences on hypothesis-drawn shapes.

Each function below compiles once per argument types; hypothesis draws shapes, values and
integer arguments (axes, slice bounds), which reuse those kernels.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import numbarules as nr
from numbarules.testing import check_grad

elements = st.floats(min_value=-2.0, max_value=2.0, allow_nan=False, allow_infinity=False)
dims = st.integers(1, 4)


def arrays(shape, el=elements):
    n = int(np.prod(shape))
    return st.lists(el, min_size=n, max_size=n).map(lambda v: np.array(v).reshape(shape))


def separated(x, gap=1e-2):
    """No two values closer than ``gap``: max/min have kinks at ties."""
    v = np.sort(np.ravel(x))
    return v.size < 2 or np.min(np.diff(v)) > gap


def distinct_away_from_zero(n):
    """``n`` values in [-2, 2], pairwise at least 0.02 apart and at least 0.02 from 0 (the kinks
    of argmax/argmin and of ``x > 0``), drawn directly: filtering drawn arrays with ``assume``
    discarded so many that hypothesis's health check failed now and then."""
    return st.lists(st.integers(1, 100), min_size=n, max_size=n, unique=True).flatmap(
        lambda ks: st.lists(st.sampled_from([-1.0, 1.0]), min_size=n, max_size=n).map(
            lambda signs: np.array([s * k * 0.02 for s, k in zip(signs, ks)])))


# --- slicing reads -------------------------------------------------------------------------

def slice_reads(A, a, b, j):
    rows = A[a:b]
    col = A[:, j]
    row = A[a, :]
    block = A[a:b, 0:j + 1]
    tail = A[a]
    return np.sum(rows * rows) + np.sum(col * row[j]) + np.sum(block ** 3) + tail[0] * 2.0 \
        + np.sum(A[::2] * 0.5)


@st.composite
def matrix_and_bounds(draw):
    m, n = draw(dims), draw(dims)
    a = draw(st.integers(0, m - 1))
    b = draw(st.integers(a, m))
    return draw(arrays((m, n))), a, b, draw(st.integers(0, n - 1))


@settings(max_examples=12, deadline=None)
@given(matrix_and_bounds())
def test_slice_reads(case):
    A, a, b, j = case
    check_grad(slice_reads, A, a, b, j, argnums=0)


# --- slice assignment and aliasing ---------------------------------------------------------

def slice_writes(A, v, c):
    m, n = A.shape
    Y = np.zeros((m + 2, n + 1))
    Y[1:m + 1, 0:n] = A * c
    Y[0, :] = c              # a scalar broadcast into a row
    Y[:, n] = v              # a vector into a column
    Y[1:3, 0] *= 3.0         # overwrites values the product below read
    Z = Y * Y
    Y[m + 1, 0:n] = A[0] * 2.0
    return np.sum(Z * Y) + np.sum(Y[:, 0])


@st.composite
def matrix_and_column(draw):
    m, n = draw(dims), draw(dims)
    return draw(arrays((m, n))), draw(arrays((m + 2,))), draw(elements)


@settings(max_examples=12, deadline=None)
@given(matrix_and_column())
def test_slice_assignment(case):
    check_grad(slice_writes, *case)


def write_through_view(x, s):
    y = x * 1.0
    head = y[0:2]         # a view: writing it writes y
    head[0] = s * s
    return np.sum(y * y) + head[1] * s


def write_base_read_view(x, s):
    y = x * 2.0
    t = y.T
    r = y.reshape((y.size,))
    y[0, 0] = s           # seen through both views
    return np.sum(t * t) + r[0] * s + np.sum(r)


def test_views_see_writes_through_either_array():
    x = np.array([0.5, -1.0, 2.0])
    check_grad(write_through_view, x, 0.7)
    check_grad(write_base_read_view, np.arange(6.0).reshape(2, 3) * 0.3, 0.7)


# --- reshape, ravel, transpose, concatenate, stack -------------------------------------------

def shapes(A, B):
    flat = A.reshape((A.size,))
    back = flat.reshape(A.shape)
    T = np.transpose(A)
    r = np.ravel(A.T)          # ravel of a non-contiguous view: a copy
    return np.sum(np.sin(flat)) + np.sum(back * A) + np.sum(T @ B) + np.sum(r * r * r) \
        + np.sum(np.reshape(B, (B.size,)) ** 2)


@settings(max_examples=10, deadline=None)
@given(dims.flatmap(lambda m: dims.flatmap(
    lambda n: st.tuples(arrays((m, n)), arrays((m, 2))))))
def test_reshape_ravel_transpose(pair):
    check_grad(shapes, *pair)


def joins(A, B, axis):
    C = np.concatenate((A, B, A), axis=axis)
    S = np.stack((A, A * B), axis)
    return np.sum(C * C * C) + np.sum(np.sin(S)) + np.sum(np.concatenate((A, B), axis) * 2.0)


@st.composite
def same_shape_pair(draw):
    m, n = draw(dims), draw(dims)
    axis = draw(st.sampled_from([0, 1, -1]))
    return draw(arrays((m, n))), draw(arrays((m, n))), axis


@settings(max_examples=10, deadline=None)
@given(same_shape_pair())
def test_concatenate_and_stack(case):
    check_grad(joins, *case, argnums=(0, 1))


def concat_vectors(a, b):
    return np.sum(np.concatenate((a, b)) ** 3) + np.sum(np.stack((a, a), axis=1) * 2.0)


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(arrays((n,)), arrays((n + 1,)))))
def test_concatenate_vectors(pair):
    check_grad(concat_vectors, *pair)


# --- axis reductions ------------------------------------------------------------------------

def axis_sums(A, axis):
    return np.sum(np.sum(A, axis) ** 2) + np.sum(np.mean(A, axis=axis) ** 3) \
        + np.sum(np.prod(A, axis) * 0.5) + np.sum(A.sum(axis=axis) * A.mean(axis=axis))


def axis_extremes(A, axis):
    return np.sum(np.max(A, axis) ** 2) - np.sum(np.min(A, axis=axis) * 3.0) \
        + np.sum(A.max(axis=axis)) + np.sum(A.min(axis))


@st.composite
def array_and_axis(draw, distinct=False):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(dims) for _ in range(ndim))
    if distinct:      # no ties: max/min have kinks there
        A = draw(distinct_away_from_zero(int(np.prod(shape)))).reshape(shape)
    else:
        A = draw(arrays(shape))
    return A, draw(st.integers(-ndim, ndim - 1))


@settings(max_examples=20, deadline=None)
@given(array_and_axis())
def test_axis_reductions(case):
    check_grad(axis_sums, *case, argnums=0)


@settings(max_examples=20, deadline=None)
@given(array_and_axis(distinct=True))
def test_axis_max_min(case):
    A, axis = case
    assert separated(A)
    check_grad(axis_extremes, A, axis, argnums=0)


def test_axis_reductions_run_in_compiled_primal_code():
    # Numba 0.68 lacks np.max/min/mean/prod with an axis: the library supplies them.
    @nr.jit
    def reduce_all(A, k):
        return np.max(A, k), np.min(A, axis=k), np.mean(A, k), np.prod(A, k)

    A = np.random.default_rng(3).normal(size=(3, 4, 2))
    for k in (0, 1, 2, -1):
        for got, want in zip(reduce_all(A, k), (A.max(k), A.min(k), A.mean(k), A.prod(k))):
            np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(ValueError, match="axis"):
        reduce_all(A, 3)


# --- integer-valued results are non-differentiable -------------------------------------------

def integer_results(x, n):
    k = np.argmax(x)
    j = np.argmin(x)
    m = x.shape[0] // 2 + n
    big = x > 0.0
    count = np.sum(big)
    return x[k] * 2.0 + x[j] * m + count * np.sum(x) + np.sum(np.where(big, x, 0.0))


@settings(max_examples=10, deadline=None)
@given(st.integers(2, 6).flatmap(distinct_away_from_zero), st.integers(0, 3))
def test_integer_valued_results_carry_no_tangent(x, n):
    assert separated(x) and np.min(np.abs(x)) > 1e-2
    gx, gn = nr.grad(integer_results, argnums=(0, 1))(x, n)
    assert gn is None
    check_grad(integer_results, x, n, argnums=0)


# --- element types --------------------------------------------------------------------------

def mixed(A, x, c):
    y = np.tanh(A @ x) * c
    B = A[:, 0:2]
    return np.sum(y * y) + np.mean(np.exp(B)) + np.sum(np.max(A, 0)) + np.sum(A, 1)[0] * 2.0


def test_float32_inputs_get_float32_tangents():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(3, 4)).astype(np.float32)
    x = rng.normal(size=4).astype(np.float32)
    gA, gx, gc = nr.grad(mixed, argnums=(0, 1, 2))(A, x, np.float32(0.5))
    assert gA.dtype == np.float32 and gx.dtype == np.float32
    assert np.float32(gc) == gc          # a float32 value (Numba boxes float32 scalars as float)
    check_grad(mixed, A, x, np.float32(0.5))      # float32 tolerances (see nr.testing)
    # float32 arrays with a float64 scalar: NumPy keeps the arrays float32
    gA, gx, gc = nr.grad(mixed, argnums=(0, 1, 2))(A, x, 0.5)
    assert gA.dtype == np.float32 and gx.dtype == np.float32 and isinstance(gc, float)
    # float64 and float32 arrays mixed (Numba's @ refuses mixed dtypes, broadcasting promotes):
    # each tangent has its argument's dtype
    A64 = A.astype(np.float64)
    gA, gx = nr.grad(mixed_broadcast, argnums=(0, 1))(A64, x)
    assert gA.dtype == np.float64 and gx.dtype == np.float32
    check_grad(mixed_broadcast, A64, x, rtol=1e-3, atol=1e-5)


def mixed_broadcast(A, x):
    return np.sum(np.exp(A * x) * x) + np.sum(x[1:3] * 2.0)


def test_integer_arguments_get_none():
    def f(x, n):
        return np.sum(x[0:n] ** 2) * n
    gx, gn = nr.grad(f, argnums=(0, 1))(np.array([1.0, 2.0, 3.0]), 2)
    assert gn is None
    np.testing.assert_allclose(gx, [4.0, 8.0, 0.0])


# --- structs built inside differentiated code ---------------------------------------------------

@nr.struct
class Layer(nr.Any):
    w: nr.Matrix[nr.Float64]
    b: nr.Vector[nr.Float64]
    scale: float
    width: int


@nr.generic
def layer_energy(L: Layer):
    t = 0.0
    for i in range(L.w.shape[0]):
        for j in range(L.w.shape[1]):
            t += L.w[i, j] * L.b[j] * L.scale
    return t * L.width


def builds_a_layer(w, b, s):
    L = Layer(w * 2.0, b, s * s, 3)
    h = L.w @ b + L.b
    return np.sum(h * h) * L.scale + L.width * L.b[0] + layer_energy(L)


@settings(max_examples=8, deadline=None)
@given(dims.flatmap(lambda n: st.tuples(arrays((n, n)), arrays((n,)), elements)))
def test_struct_built_inside_differentiated_code(case):
    check_grad(builds_a_layer, *case)


def layer_loss(L, x):
    M = Layer(L.w * L.scale, L.b, L.scale, L.width + 1)
    return layer_energy(M) + np.sum((L.w @ x) ** 2) * L.width


def test_gradient_for_a_struct_mixing_arrays_floats_and_ints():
    rng = np.random.default_rng(2)
    L = Layer(rng.normal(size=(3, 3)), rng.normal(size=3), 0.7, 2)
    x = rng.normal(size=3)
    t = nr.grad(layer_loss)(L, x)
    assert type(t) is nr.Tangent[Layer] and t.width is None
    h = 1e-6
    for field in ("w", "b"):
        fd = np.zeros_like(getattr(L, field))
        for k in np.ndindex(fd.shape):
            up, dn = getattr(L, field).copy(), getattr(L, field).copy()
            up[k] += h
            dn[k] -= h
            fd[k] = (layer_loss(L._replace(**{field: up}), x)
                     - layer_loss(L._replace(**{field: dn}), x)) / (2 * h)
        np.testing.assert_allclose(getattr(t, field), fd, rtol=1e-6, atol=1e-8)
    fd = (layer_loss(L._replace(scale=0.7 + h), x) - layer_loss(L._replace(scale=0.7 - h), x)) / (2 * h)
    assert t.scale == pytest.approx(fd, rel=1e-6)


# --- bad input ---------------------------------------------------------------------------------

def no_rule(x):
    return np.sum(np.sort(x) * x)


def test_numpy_function_without_rule_is_named():
    with pytest.raises(nr.DifferentiationError, match=r"(?s)numpy\.sort.*nr\.rrule"):
        nr.grad(no_rule)(np.ones(3))


def shape_mismatch(A, B):
    C = A * 2.0
    return np.sum(C + B)


def test_shape_mismatch_is_numpys_error_at_the_users_line():
    with pytest.raises(ValueError, match="broadcast") as info:
        nr.grad(shape_mismatch)(np.ones((2, 3)), np.ones((4, 3)))
    frames = [(tb.tb_frame.f_code.co_name, tb.tb_lineno) for tb in _frames(info.value.__traceback__)]
    line = shape_mismatch.__code__.co_firstlineno + 2
    assert ("shape_mismatch", line) in frames
    # named from the kernels' own line table, not by running shape_mismatch again in Python
    assert f'File "{__file__}", line {line}' in str(info.value)


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


# --- array literals: np.array([...]) of scalars ------------------------------------------------

def predator_prey(y, p):
    return np.array([p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3] * y[1]])


def euler_fit(p, y0):
    y = y0
    for i in range(10):
        y = y + 0.05 * predator_prey(y, p)     # an array literal inside a callee in a loop
    return np.sum(y * y)


def matrix_literal(x, k):
    M = np.array([[x, 2.0 * k], (np.sin(x), 1.0)])      # rows: lists or tuples
    return np.sum(M @ M) + np.array((k, 1))[1] * x       # ints and floats: float64


def integer_literal(x):
    idx = np.array([0, 2])                  # int64, as in NumPy: usable as indices
    return x[idx[0]] * x[idx[1]]


@given(st.floats(0.5, 2.0), st.floats(-1.0, 1.0))
def test_array_literals_are_differentiated(a, b):
    p, y0 = np.array([1.5, a, 1.0, 3.0]), np.array([1.0, 0.5 + b * 0.25])
    check_grad(euler_fit, p, y0)
    check_grad(matrix_literal, a, b)
    _, dy = nr.jvp(euler_fit, 0)(p, y0, np.ones(4))
    assert dy == pytest.approx(float(np.sum(nr.grad(euler_fit)(p, y0))), rel=1e-12)


def test_an_integer_array_literal_keeps_its_type():
    assert nr.grad(integer_literal)(np.array([1.0, 2.0, 3.0])).tolist() == [3.0, 0.0, 1.0]


def test_ragged_and_empty_array_literals_are_refused_by_name():
    def ragged(x):
        return np.sum(np.array([[x, x], [x]]))

    def empty(x):
        return np.sum(np.array([])) + x
    with pytest.raises(nr.UnsupportedSyntaxError, match="rows of different lengths"):
        nr.grad(ragged)(1.0)
    with pytest.raises(nr.UnsupportedSyntaxError, match="np.array of an empty list"):
        nr.grad(empty)(1.0)


def products(A, B, v):
    return np.sum((A @ B) ** 2) + np.sum(np.sin(A @ v)) + np.sum(np.cos(v @ B))


@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_matrix_products_with_transposed_operands(layout):
    # the adjoints A^T @ dC and dC @ B^T run through runtime._matmul_tn / _matmul_nt, which
    # hand BLAS the transpose where it lies: every layout of the operands, matrix and vector
    rng = np.random.default_rng(21)
    A, B, v = rng.standard_normal((5, 4)), rng.standard_normal((4, 3)), rng.standard_normal(4)
    if layout == "F":
        A, B = np.asfortranarray(A), np.asfortranarray(B)
    elif layout == "strided":
        A = rng.standard_normal((10, 4))[::2]
        B = rng.standard_normal((4, 6))[:, ::2]
    check_grad(products, A, B, v)
    g = nr.grad(products, argnums=(0, 1, 2))(A, B, v)
    assert all(x.flags.c_contiguous or x.flags.f_contiguous for x in g)
