"""Regressions of the trust issue: each of these gave a silently wrong answer, hung or crashed at
07f11c8. Gradients are checked against central finite differences and hand-worked values."""
import math

import numpy as np
import pytest

import numbarules as nr
from numbarules.testing import check_grad


def fd(f, args, i, h=1e-6):
    """Central differences of f along every element of argument i (float or float array)."""
    x = args[i]
    if not isinstance(x, np.ndarray):
        a, b = list(args), list(args)
        a[i], b[i] = x + h, x - h
        return (f(*a) - f(*b)) / (2 * h)
    g = np.zeros(x.shape)
    for k in range(x.size):
        a, b = list(args), list(args)
        a[i], b[i] = x.copy(), x.copy()
        a[i].flat[k] += h
        b[i].flat[k] -= h
        g.flat[k] = (f(*a) - f(*b)) / (2 * h)
    return g


# --- 1. the fused vjp and values leaving a nested loop -----------------------------------------

def inner_value_leaves(x, n, m):
    s = 0.0
    t = 0.0
    for i in range(n):
        for j in range(m):
            t = x[j] * 2.0
        s += t
    return s


def inner_value_maybe_unset(x, n, m):
    s = 0.0
    t = 1.0
    for i in range(n):
        s += t * x[i]
        for j in range(m):
            t = x[j] * x[i]
    return s


def inner_loop_var_leaves(x, n):
    s = 0.0
    for i in range(n):
        for j in range(i):
            pass
        s += x[i] * i
    return s


@pytest.mark.parametrize("f, args", [
    (inner_value_leaves, (np.array([1.0, 2.0, 3.0]), 3, 3)),
    (inner_value_leaves, (np.array([1.0, 2.0, 3.0]), 3, 0)),
    (inner_value_maybe_unset, (np.array([0.5, 2.0, 3.0]), 3, 2)),
    (inner_loop_var_leaves, (np.array([0.5, 2.0, 3.0]), 3)),
])
def test_fused_vjp_values_leaving_nested_loops(f, args):
    expected = fd(f, args, 0)
    np.testing.assert_allclose(nr.grad(f)(*args), expected, atol=1e-8)
    _, pb = nr.pullback(f, *args)
    np.testing.assert_allclose(pb(1.0)[0], expected, atol=1e-8)


def test_fusion_rule_on_its_own():
    from numbarules.ad import fusion, ir
    a = ir.Assign("t", ir.Atom(ir.Const(1.0)))
    read = ir.Assign("u", ir.Atom(ir.Name("t")))
    loop = ir.For("j", ir.Const(0), ir.Name("m"), ir.Const(1), (a,))
    # assigned only inside a loop that may run zero times: the read after it is exposed
    assert fusion.exposed((loop, read), "t") == (True, False)
    # assigned before: not exposed
    assert fusion.exposed((a, loop, read), "t") == (False, True)
    # a branch assigns only if both sides do
    branch = ir.If(ir.Name("c"), (a,), ())
    assert fusion.exposed((branch, read), "t") == (True, False)
    both = ir.If(ir.Name("c"), (a,), (a,))
    assert fusion.exposed((both, read), "t") == (False, True)


# --- 5. special values: JAX's conventions --------------------------------------------------------

def test_constant_numerator_quotient_is_not_nan():
    assert nr.grad(lambda x: 0.0 / x + x)(2.0) == 1.0


def zero_pow(y):
    return 0.0 ** y + math.pow(0.0, y) + pow(0.0, y)


def pow_both(x, y):
    return x ** y + math.pow(x, y) + pow(x, y)


def pow_arrays(x, y):
    return np.sum(x ** y)


def min_max(x, y):
    return max(x, y) + 3.0 * min(x, y)


def kinks(x):
    return abs(x) + math.fabs(x)


def test_special_points_follow_jax():
    assert nr.grad(zero_pow)(2.0) == 0.0
    assert nr.grad(pow_both, (0, 1))(0.0, 2.0) == (0.0, 0.0)
    dx, dy = nr.grad(pow_both, (0, 1))(3.0, 0.0)
    assert dx == 0.0 and dy == pytest.approx(3 * math.log(3.0))
    dx, dy = nr.grad(pow_arrays, (0, 1))(np.array([0.0, 2.0]), np.array([2.0, 0.0]))
    np.testing.assert_array_equal(dx, [0.0, 0.0])
    np.testing.assert_allclose(dy, [0.0, math.log(2.0)])
    assert nr.grad(min_max, (0, 1))(1.0, 1.0) == (2.0, 2.0)     # ties split in halves
    assert nr.grad(min_max, (0, 1))(1.0, 2.0) == (3.0, 1.0)
    assert nr.grad(kinks)(0.0) == 2.0                            # abs'(0) = 1
    assert nr.grad(kinks)(-1.0) == -2.0


# --- 10. swapping arrays inside a loop never hangs ------------------------------------------------

def swap_in_loop(x, n):
    a = x.copy()
    b = np.zeros_like(x)
    for t in range(n):
        for i in range(a.shape[0]):
            b[i] = a[i] * 0.5 + 1.0
        a, b = b, a
    return np.sum(a)


def swap_writes_argument(x, y):
    a = x
    b = y
    a, b = b, a
    a[0] = 1.0
    return np.sum(a) + np.sum(b)


def test_array_swaps_are_answered_not_hung():
    # the engine answers at once; a correct gradient or a named refusal, never a hang
    try:
        g = nr.grad(swap_in_loop)(np.ones(3), 2)
    except nr.UnsupportedSyntaxError as exc:
        assert "line" in str(exc)
    else:
        np.testing.assert_allclose(g, fd(swap_in_loop, (np.ones(3), 2), 0), atol=1e-8)
    with pytest.raises(nr.UnsupportedSyntaxError, match="argument array 'y'"):
        nr.grad(swap_writes_argument)(np.ones(2), np.ones(2))
