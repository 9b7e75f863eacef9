"""``nr.grad(f, fastmath=True)`` (issue 19, items 2 and 3): reassociated sums and vmath's exp and
tanh in the generated kernels, checked against finite differences and against the default
gradient; NaN and inf keep their meaning; the option is part of the gradient's identity (its
own kernels, pickled with it)."""

import math
import pickle
import re

import numpy as np
import pytest

import numbarules as nr
from numbarules import compile_flags
from numbarules.testing import check_grad

from perf.bench_arrays import lse_rows
from test_prange import lse_rows as lse_prange
from test_rebinding import fd


def tanh_sum(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.tanh(w * x[i]) * x[i]
    return s


def sqrt_sum(x):
    # (not imported from test_trust: importing a test module early renames the structs of
    # others, whose names are claimed in import order)
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sqrt(x[i])
    return s


def exp_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += np.exp(x[i])
    return s


X = np.random.default_rng(3).normal(size=(7, 33))


def test_logsumexp_agrees_with_differences_and_with_the_default_gradient():
    v0, g0 = nr.value_and_grad(lse_rows)(X)
    v1, g1 = nr.value_and_grad(lse_rows, fastmath=True)(X)
    np.testing.assert_allclose(g1, fd(lse_rows, (X,), 0), rtol=1e-6, atol=1e-8)
    # the documented bound: a reassociated sum of n terms is within about n ulp of the sum of
    # their magnitudes of the sequential one; vmath's exp within 0.75 ulp of the exact value
    np.testing.assert_allclose(g1, g0, rtol=0, atol=X.shape[1] * 4e-16)
    assert abs(v1 - v0) <= X.size * 4e-16 * np.sum(np.abs(X) + 1.0)
    y, pb = nr.pullback(lse_rows, X, fastmath=True)
    np.testing.assert_allclose(pb(1.0)[0], g1, rtol=1e-12, atol=1e-15)
    assert y == pytest.approx(v1, rel=1e-14)


def test_tanh_and_numpys_exp_of_scalars_too():
    x = np.linspace(-2.0, 2.0, 41)
    g = nr.grad(tanh_sum, argnums=(0, 1), fastmath=True)(x, 0.7)
    np.testing.assert_allclose(g[0], fd(tanh_sum, (x, 0.7), 0), rtol=1e-6, atol=1e-8)
    assert g[1] == pytest.approx(fd(tanh_sum, (x, 0.7), 1), rel=1e-6)
    g = nr.grad(exp_sum, fastmath=True)(x)
    np.testing.assert_allclose(g, np.exp(x), rtol=2e-16 * 4)


def calls(name, src):
    """Whether a statement of the kernel ``src`` (not a comment) calls ``name``."""
    return re.search(rf"^ +\w+ = {re.escape(name)}\(", src, re.M) is not None


def test_the_kernels_call_vmath_only_for_float64_under_fastmath():
    fast = nr.code(nr.grad(lse_rows, fastmath=True), X, kind="vjp")
    plain = nr.code(nr.grad(lse_rows), X, kind="vjp")
    assert calls("_vexp", fast) and not calls("math.exp", fast)
    assert calls("math.exp", plain) and "_vexp(" not in plain
    assert "_vtanh(" in nr.code(nr.grad(tanh_sum, fastmath=True), np.ones(3), 0.5, kind="vjp")
    # float32 keeps Numba's exp, whose float32 result the primal's types were inferred from
    x32 = np.linspace(-1.0, 1.0, 9).astype(np.float32)
    src = nr.code(nr.grad(exp_sum, fastmath=True), x32, kind="vjp")
    assert "_vexp(" not in src and calls("np.exp", src)
    g = nr.grad(exp_sum, fastmath=True)(x32)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.exp(x32), rtol=1e-6)


def test_nan_and_inf_keep_their_meaning():
    # 'reassoc' alone: LLVM may not assume finite values, so a NaN gradient stays NaN
    x = np.array([4.0, -1.0, 9.0])
    v, g = nr.value_and_grad(sqrt_sum, fastmath=True)(x)
    assert math.isnan(v) and math.isnan(g[1])
    np.testing.assert_allclose(g[[0, 2]], [0.25, 1.0 / 6.0])
    v, g = nr.value_and_grad(exp_sum, fastmath=True)(np.array([1000.0, 0.0, -1000.0]))
    assert v == math.inf
    assert g[0] == math.inf and g[1] == 1.0 and g[2] == 0.0


def test_the_option_is_part_of_the_gradients_identity():
    fast, plain = nr.grad(lse_rows, fastmath=True), nr.grad(lse_rows)
    assert fast is nr.grad(lse_rows, fastmath=True) and fast is not plain
    assert fast.fastmath and not plain.fastmath
    assert fast.flags == compile_flags.Flags(fastmath=True)
    back = pickle.loads(pickle.dumps(fast))
    assert back.fastmath and not back.boundscheck
    np.testing.assert_allclose(back(X), fast(X), rtol=0, atol=0)
    both = nr.grad(lse_rows, fastmath=True, boundscheck=True)
    assert both.flags.options() == {"boundscheck": True, "fastmath": {"reassoc"}}
    # its own kernels: bounds checks may change how LLVM splits the sums, so the last bits
    np.testing.assert_allclose(both(X), fast(X), rtol=1e-13, atol=1e-16)


def test_check_grad_takes_a_fastmath_gradient():
    check_grad(lse_rows, X[:3, :5],
                  grad=lambda f, argnums: nr.grad(f, argnums=argnums, fastmath=True))


def checkpointed_sim(u0, k, steps):
    u = u0.copy()
    for t in nr.checkpointed(range(steps), snapshots=3):
        for i in range(u.shape[0]):
            u[i] = u[i] + k * math.tanh(u[i])
    s = 0.0
    for i in range(u.shape[0]):
        s += math.exp(u[i])
    return s


def test_parallel_and_checkpointed_loops_under_fastmath():
    # a prange loop's chunks (parallel=True beside fastmath's flags) and a checkpointed loop's
    # recomputed segments, against the default gradient and the finite differences
    g0 = nr.grad(lse_prange)(X, 0.8)
    g1 = nr.grad(lse_prange, fastmath=True)(X, 0.8)
    np.testing.assert_allclose(g1, g0, rtol=0, atol=X.shape[1] * 4e-16)
    u0 = np.linspace(-1.0, 1.0, 9)
    a = nr.grad(checkpointed_sim, argnums=(0, 1), fastmath=True)(u0, 0.1, 7)
    b = nr.grad(checkpointed_sim, argnums=(0, 1))(u0, 0.1, 7)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-13)
    assert a[1] == pytest.approx(b[1], rel=1e-13)
    np.testing.assert_allclose(a[0], fd(checkpointed_sim, (u0, 0.1, 7), 0), rtol=1e-6)
