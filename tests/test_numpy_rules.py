"""The NumPy rule library, checked against finite differences on hypothesis-drawn shapes."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import numbarules as nr
from numbarules.testing import check_grad

elements = st.floats(min_value=-2.0, max_value=2.0, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=0.2, max_value=2.0, allow_nan=False, allow_infinity=False)


def arrays(shape, el=elements):
    n = int(np.prod(shape))
    return st.lists(el, min_size=n, max_size=n).map(lambda v: np.array(v).reshape(shape))


dims = st.integers(1, 4)


@st.composite
def broadcast_pair(draw):
    """(A, B) of broadcastable shapes: scalar, row, column, vector or equal."""
    m, n = draw(dims), draw(dims)
    kind = draw(st.sampled_from(["scalar", "row", "column", "vector", "same"]))
    A = draw(arrays((m, n)))
    if kind == "scalar":
        return A, draw(elements)
    shape = {"row": (1, n), "column": (m, 1), "vector": (n,), "same": (m, n)}[kind]
    return A, draw(arrays(shape))


def bc_add(A, B):
    return np.sum((A + B) * (A - B) * A + B / 3.0)


def bc_mul_div(A, B):
    return np.sum(A * B - A / (B * B + 1.0))


def ufuncs(A):
    return np.sum(np.exp(A) * np.sin(A) + np.tanh(A) * np.cos(A) - np.log1p(A * A)
                  + np.abs(A) * 0.5 + np.expm1(A * 0.1))


def positive_ufuncs(A):
    return np.sum(np.sqrt(A) + np.log(A) * np.power(A, 1.5) + np.tan(A * 0.3))


def reductions(A):
    return np.sum(np.sum(A, axis=0) ** 2) + np.sum(A, 1) @ np.sum(A, 1) + np.mean(A) * A.sum()


def matmuls(A, x):
    y = A @ x
    B = A.T @ A
    return np.sum(y * y) + np.sum(B @ B) * 0.1 + x @ x + np.sum(np.outer(y, x))


def elementwise_choice(A, B):
    return np.sum(np.maximum(A, B) * 2.0 - np.minimum(A, B) + np.where(A > B, A * B, B))


@settings(max_examples=10, deadline=None)
@given(broadcast_pair(), st.sampled_from([bc_add, bc_mul_div]))
def test_broadcasting_arithmetic(pair, f):
    A, B = pair
    check_grad(f, A, B)


@settings(max_examples=8, deadline=None)
@given(dims.flatmap(lambda m: dims.flatmap(lambda n: arrays((m, n)))))
def test_ufuncs_and_reductions(A):
    if np.min(np.abs(A)) > 1e-3:          # abs has a kink at 0
        check_grad(ufuncs, A)
    check_grad(reductions, A)


@settings(max_examples=8, deadline=None)
@given(dims.flatmap(lambda m: dims.flatmap(lambda n: arrays((m, n), positive))))
def test_ufuncs_on_positive_values(A):
    check_grad(positive_ufuncs, A)


@settings(max_examples=8, deadline=None)
@given(dims.flatmap(lambda m: dims.flatmap(lambda n: st.tuples(arrays((m, n)), arrays((n,))))))
def test_matrix_products(pair):
    check_grad(matmuls, *pair)


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(arrays((n,)), arrays((n,)))))
def test_elementwise_choice(pair):
    A, B = pair
    if np.min(np.abs(A - B)) < 1e-3:      # ties are kinks
        return
    check_grad(elementwise_choice, A, B)


def test_numpy_function_without_rule_is_named():
    def f(x):
        return np.sum(np.cumprod(x))
    with pytest.raises(nr.DifferentiationError, match="numpy.cumprod"):
        nr.grad(f)(np.ones(3))


def test_method_spelling_sum_is_the_same_rule():
    def f(A):
        return (A * A).sum() + A.mean()
    check_grad(f, np.arange(6.0).reshape(2, 3))


def test_unbroadcast_helper_python_and_compiled_agree():
    import numba
    from numbarules.ad.runtime import _ub

    @numba.njit
    def compiled(x, like):
        return _ub(x, like)

    g = np.arange(12.0).reshape(3, 4)
    for like in (np.ones((3, 4)), np.ones((1, 4)), np.ones((3, 1)), np.ones(4), 2.0):
        np.testing.assert_allclose(np.asarray(compiled(g, like)), np.asarray(_ub(g, like)))
        assert np.shape(_ub(g, like)) == np.shape(like)


def reductions_more(x):
    return np.max(x) * 2.0 - np.min(x) + np.prod(x) + np.sum(np.cumsum(x) * x) \
        + np.linalg.norm(x) + np.sum(np.clip(x, -0.5, 0.5) * x)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: arrays((n,))))
def test_max_min_prod_cumsum_norm_clip(x):
    spread = np.sort(x)
    if len(x) > 1 and np.min(np.diff(spread)) < 1e-2:      # ties of max/min are kinks
        return
    if np.min(np.abs(np.abs(x) - 0.5)) < 1e-2 or np.linalg.norm(x) < 1e-2:   # clip and norm kinks
        return
    check_grad(reductions_more, x)


def test_prod_with_a_zero_is_exact():
    x = np.array([2.0, 0.0, 3.0])
    np.testing.assert_allclose(nr.grad(lambda v: np.prod(v))(x), [0.0, 6.0, 0.0])


def tanh_exp_layouts(A, s):
    # A.T is F-ordered, A[::-1, ::2] strided: the vectorized array rules take any layout.
    return (np.sum(np.tanh(A.T * s) * np.exp(A.T)) + np.sum(np.tanh(A[::-1, ::2]) ** 2)
            + np.sum(np.exp(A[:, 0]) * s))


def tanh_exp_adjoint(A, s):
    """Hand-written gradient of tanh_exp_layouts."""
    T, E = np.tanh(A * s), np.exp(A)
    dA = (1 - T * T) * s * E + T * E
    dS = np.sum((1 - T * T) * A * E)
    V = np.tanh(A[::-1, ::2])
    dA[::-1, ::2] += 2 * V * (1 - V * V)
    dA[:, 0] += np.exp(A[:, 0]) * s
    return dA, dS + np.sum(np.exp(A[:, 0]))


@settings(max_examples=10, deadline=None)
@given(dims.flatmap(lambda m: dims.flatmap(lambda n: arrays((m, n + 1), elements))), elements)
def test_array_tanh_and_exp_rules_on_any_layout(A, s):
    check_grad(tanh_exp_layouts, A, s)
    dA, dS = nr.grad(tanh_exp_layouts, argnums=(0, 1))(A, s)
    hA, hS = tanh_exp_adjoint(A, s)
    np.testing.assert_allclose(dA, hA, rtol=1e-12, atol=1e-12)
    assert dS == pytest.approx(hS, rel=1e-12, abs=1e-12)


def test_array_tanh_and_exp_use_their_array_rules_and_keep_float32():
    A = np.linspace(-30.0, 30.0, 24).reshape(4, 6)   # both ends saturate tanh
    assert nr.rule_for(np.tanh, A).kind == "rrule"
    assert nr.rule_for(np.tanh, 0.5).kind == "scalar"

    def f(A):
        return np.sum(np.tanh(A) * np.exp(A))
    assert "fwd__tanh_array" in nr.code(f, A) and "fwd__exp_array" in nr.code(f, A)
    A32 = (A * 0.1).astype(np.float32)
    g = nr.grad(f)(A32)
    assert g.dtype == np.float32
    T, E = np.tanh(A * 0.1), np.exp(A * 0.1)
    np.testing.assert_allclose(g, (1 - T * T) * E + T * E, rtol=1e-5)
    check_grad(f, A * 0.1)
