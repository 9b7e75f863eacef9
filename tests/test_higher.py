"""Second derivatives (nr.hvp, nr.hessian, nr.grad(nr.grad(f))) against finite differences of the
gradient and against hand-written Hessians; the Hessian-vector product follows a new method."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import numbarules as nr
from perf._workloads_ad import rosenbrock


def rosenbrock_hessian(x):
    n = x.shape[0]
    H = np.zeros((n, n))
    for i in range(n - 1):
        H[i, i] += 1200.0 * x[i] ** 2 - 400.0 * x[i + 1] + 2.0
        H[i + 1, i + 1] += 200.0
        H[i, i + 1] -= 400.0 * x[i]
        H[i + 1, i] -= 400.0 * x[i]
    return H


def energy(x, k):
    """Arrays, a scalar rule inside a loop, a reduction and a parameter."""
    s = 0.0
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i]
        s += k * math.cos(d) + d * d * d / 6.0
    return s + np.sum(np.tanh(x) ** 2) * k


def grad_differences(f, args, k, v, h=1e-5):
    up, down = list(args), list(args)
    up[k] = args[k] + h * v
    down[k] = args[k] - h * v
    g = nr.grad(f, k)
    return (g(*up) - g(*down)) / (2 * h)


@given(st.integers(0, 2 ** 32 - 1))
def test_hvp_against_finite_differences_of_the_gradient(seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, 6)
    v = rng.uniform(-1.0, 1.0, 6)
    w = rng.uniform(-1.0, 1.0, 6)
    for f, args in ((rosenbrock, (x,)), (energy, (x, 0.7))):
        hv = nr.hvp(f)(*args, v)
        assert np.allclose(hv, grad_differences(f, args, 0, v), rtol=1e-6, atol=1e-6)
        # the Hessian is symmetric: w . H v = v . H w, to rounding
        assert w @ hv == pytest.approx(v @ nr.hvp(f)(*args, w), rel=1e-10, abs=1e-10)
    assert np.allclose(nr.hessian(rosenbrock)(x), rosenbrock_hessian(x), rtol=1e-12, atol=1e-9)


def test_hvp_with_respect_to_several_arguments():
    x = np.array([0.3, -0.2, 0.9])
    hx, hk = nr.hvp(energy, (0, 1))(x, 0.7, (np.ones(3), 0.5))
    # the product's blocks: (H_xx 1 + H_xk 0.5, H_kx . 1 + H_kk 0.5), H_kk = 0 (linear in k)
    want_x = grad_differences(energy, (x, 0.7), 0, np.ones(3)) + 0.5 * (
        nr.grad(energy, 0)(x, 0.7 + 1e-6) - nr.grad(energy, 0)(x, 0.7 - 1e-6)) / 2e-6
    assert np.allclose(hx, want_x, rtol=1e-6)
    want_k = (nr.grad(energy, 1)(x + 1e-6, 0.7) - nr.grad(energy, 1)(x - 1e-6, 0.7)) / 2e-6
    assert hk == pytest.approx(want_k, rel=1e-6)


def wave(t):
    return math.sin(t) * t ** 3


dwave = nr.grad(wave)


def uses_a_gradient(t):
    return dwave(t) * 2.0 + t


def test_grad_of_grad_and_gradients_inside_differentiated_code():
    t = 0.7
    second = -math.sin(t) * t ** 3 + 6 * math.cos(t) * t ** 2 + 6 * math.sin(t) * t
    assert nr.grad(nr.grad(wave))(t) == pytest.approx(second, rel=1e-12)
    assert nr.hessian(wave)(t) == pytest.approx(second, rel=1e-12)
    assert nr.grad(uses_a_gradient)(t) == pytest.approx(2 * second + 1.0, rel=1e-12)


def test_a_gradient_of_an_array_inside_differentiated_code_is_refused_by_name():
    g = nr.grad(rosenbrock)

    def f(x):
        return np.sum(g(x))
    del f
    with pytest.raises(nr.DifferentiationError, match="nr.hvp"):
        nr.grad(nr.grad(rosenbrock))(np.ones(3))


@nr.generic
def potential(r: nr.Real):
    return r * r


def total_potential(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += potential(x[i])
    return s


def test_hvp_follows_a_new_method():
    x, v = np.array([0.5, 1.0]), np.array([1.0, -1.0])
    hvp = nr.hvp(total_potential)
    assert list(hvp(x, v)) == [2.0, -2.0]

    def cubic(r: nr.Float64):
        return r * r * r
    potential.method(cubic)
    assert np.allclose(hvp(x, v), 6.0 * x * v)


def squash(x, a):
    """m outputs from n inputs: an array result of its own shape."""
    y = np.tanh(x * a)
    return y[: y.shape[0] // 2 + 1] * np.sum(x)


@given(st.integers(1, 7), st.integers(0, 2 ** 32 - 1))
def test_jacobian_forward_and_reverse_against_finite_differences(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, n)
    for f, args in ((squash, (x, 0.8)), (energy, (x, 0.3))):
        J = nr.jacobian(f)(*args)
        y = f(*args)
        assert np.shape(J) == np.shape(y) + x.shape
        h = 1e-6
        cols = [(np.asarray(f(x + h * e, args[1])) - np.asarray(f(x - h * e, args[1]))) / (2 * h)
                for e in np.eye(n)]
        assert np.allclose(J, np.stack(cols, axis=-1), rtol=1e-6, atol=1e-8)
    assert nr.jacobian(squash, 1)(x, 0.8).shape == squash(x, 0.8).shape


def statistics(x):
    return np.linalg.norm(x) * np.std(x) + np.prod(x) + np.var(x)


def test_hvp_through_numpy_reductions_with_forward_rules():
    x, v = np.array([0.5, -1.2, 2.0, 0.7]), np.array([0.3, 0.1, -0.4, 1.0])
    assert np.allclose(nr.hvp(statistics)(x, v), grad_differences(statistics, (x,), 0, v),
                       rtol=1e-6, atol=1e-7)


def step(y, k):
    return y * (1.0 - 0.1 * k * y)


def trajectory(y0, k):
    y = y0
    for i in range(5):
        y = step(y, k)            # a callee's array result bound in a loop
    return np.sum(y * y)


def test_hvp_through_a_callee_returning_an_array_in_a_loop():
    # the tangent kernel nr.hvp differentiates calls the callee's primal and its tangent-only
    # kernel (no pair holding arrays bound in the loop, which the reverse mode refuses)
    y0, k, v = np.array([0.3, -0.7, 1.1]), 0.8, np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(nr.hvp(trajectory, 0)(y0, k, v),
                               grad_differences(trajectory, (y0, k), 0, v), rtol=1e-6)
    assert nr.hvp(trajectory, 1)(y0, k, 1.0) == pytest.approx(
        grad_differences(trajectory, (y0, k), 1, 1.0), rel=1e-6)


def sumsq(v):
    s = 0.0
    for i in range(v.shape[0]):
        s += v[i] * v[i]
    return s


@nr.rrule(sumsq)
def _sumsq_rule(v):
    y = sumsq(v)

    def pullback(dy):
        return (2.0 * dy * v,)
    return y, pullback


def through_a_rule(x):
    return math.sin(sumsq(x * x)) + sumsq(x) * x[0]


@nr.generic
def cubed(x: nr.Float64):
    return x * x * x


@nr.rrule(cubed, nr.Float64)
def _cubed_rule(x):
    def pullback(dy):
        return (3.0 * x * x * dy,)
    return x * x * x, pullback


def test_second_derivatives_differentiate_a_reverse_rules_pullback():
    # forward mode runs the rule's vjp at 1.0; the reverse mode differentiates that vjp: the
    # rule's forward and its pullback's body (no frule needed)
    x, v = np.array([0.3, -0.5, 0.8]), np.array([1.0, 0.5, -1.0])
    np.testing.assert_allclose(nr.hvp(through_a_rule)(x, v),
                               grad_differences(through_a_rule, (x,), 0, v), rtol=1e-6)
    H = nr.hessian(through_a_rule)(x)
    np.testing.assert_allclose(H, H.T, rtol=1e-12, atol=1e-12)

    def f(t):
        return math.sin(cubed(t)) + cubed(0.5 * t)
    assert nr.grad(nr.grad(f))(0.7) == pytest.approx(
        grad_differences(f, (0.7,), 0, 1.0), rel=1e-6)


def bad_sumsq(v):
    return np.sum(v * v)


@nr.rrule(bad_sumsq)
def _bad_sumsq_rule(v):
    def pullback(dy):
        return (2.0 * dy * v[:2],)          # the wrong shape
    return np.sum(v * v), pullback


def test_a_rules_wrong_tangent_shape_is_caught_under_second_derivatives_too():
    x = np.array([0.3, -0.5, 0.8])
    with pytest.raises(nr.TangentShapeError, match="tangent 0 has another shape"):
        nr.hvp(lambda y: bad_sumsq(y) * 2.0)(x, x)


@nr.struct
class Knob(nr.Any):
    a: float
    b: float


def knob_energy(q, x):
    return q.a * x + q.b * q.b


@nr.rrule(knob_energy, Knob, nr.Float64)
def _knob_energy_rule(q, x):
    def pullback(dy):
        return (nr.Tangent[Knob](dy * x, 2.0 * dy * q.b), dy * q.a)
    return q.a * x + q.b * q.b, pullback


def test_hvp_through_a_rule_of_a_struct_argument():
    # the rule's struct tangent is dotted with the argument's field by field (fuzz seed 3703 #21)
    T = nr.Tangent[Knob]

    def f(q, x):
        return knob_energy(q, x) * x
    hv = nr.hvp(f, (0, 1))(Knob(0.5, 0.3), 0.7, (T(1.0, 0.5), 1.0))
    assert (hv[0].a, hv[0].b, hv[1]) == pytest.approx((1.4, 1.3, 2.7), rel=1e-12)


def sums_in_a_loop(v, x):
    s = 0.0
    for i in range(3):
        s += np.sum(v * v) * x + math.sin(x * i)     # np.sum's forward rule on a loop temporary
    return s


def test_hvp_through_a_forward_rule_of_a_loop_temporary():
    # the frule's (value, tangent) pair holds no array: nothing shares the temporary (fuzz seed
    # 3703 #0 was refused as "a tuple holding the array, rebound")
    v, x, dv = np.array([0.3, -0.5, 0.7]), 0.4, np.array([1.0, 0.5, -1.0])
    np.testing.assert_allclose(nr.hvp(sums_in_a_loop, 0)(v, x, dv),
                               grad_differences(sums_in_a_loop, (v, x), 0, dv), rtol=1e-6)


def elementwise_pairs(x, y):
    z = np.maximum(x, y * 0.5) + np.power(np.abs(x) + 1.0, y) + np.arctan2(x, y)
    return np.sum(z * z) + np.sum(np.hypot(x, 2.0))


def broadcast_pairs(M, r):
    return np.sum(np.maximum(M, r) ** 2) + np.sum(np.arctan2(M, 2.0))


def test_hvp_through_element_wise_functions_of_several_arrays():
    # their tangent loop is written into the kernel (was a helper taking the partials as a
    # function value, refused by the reverse mode)
    x, y = np.array([0.3, -0.5, 0.7]), np.array([0.4, 0.9, -0.2])
    v, u = np.array([1.0, 0.5, -1.0]), np.array([0.2, -0.3, 0.6])
    hv = nr.hvp(elementwise_pairs, (0, 1))(x, y, (v, u))
    h = 1e-6
    g = nr.grad(elementwise_pairs, (0, 1))
    up, down = g(x + h * v, y + h * u), g(x - h * v, y - h * u)
    for got, a, b in zip(hv, up, down):
        np.testing.assert_allclose(got, (a - b) / (2 * h), rtol=1e-6)
    M, r = np.array([[0.3, -0.2], [0.5, 0.1]]), np.array([0.7, -0.4])
    np.testing.assert_allclose(nr.hvp(broadcast_pairs, 0)(M, r, np.ones((2, 2))),
                               grad_differences(broadcast_pairs, (M, r), 0, np.ones((2, 2))),
                               rtol=1e-6)


def clipped(v):
    return np.sum(np.clip(v, -0.7, 0.8)) * v[0]


def test_hvp_through_np_clip():
    # clip's partials (compiled only) are piecewise constant: their derivative is 0 (fuzz seed
    # 3704 #36 was refused as "a function that returns no value")
    v = np.array([0.3, 0.9, -1.0])
    np.testing.assert_allclose(nr.hvp(clipped)(v, np.ones(3)), [2.0, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(nr.hvp(clipped)(v, np.ones(3)),
                               grad_differences(clipped, (v,), 0, np.ones(3)), atol=1e-6)



def _stencil_after_scalars(x0, v0, x1=-0.07):
    # fuzz seed 56000 #3 (stencils): the gathered reverse of the tangent kernel's loop summed
    # into `_g1`, a name the body's own statements used (`_g1 = _d41_`): H v wrong, H not
    # symmetric. The gather's names are its own since (gather_read._own).
    s = 0.0
    t1 = (v0[0] - v0[2]) * v0[0] + s + s + x0 * x0
    t2 = s - t1 + v0[1] - s
    s += 0.94 * t2
    t3 = 0.7 + x0 * t1
    s += (s - 1.22 * x0)
    s = s * 0.54 - math.tanh(x1 * v0[0])
    s += 1.29 * x1 + 0.41 * s
    y4 = np.zeros(3)
    for i5 in range(2, 3):
        y4[i5] = 0.24 * v0[i5] * v0[i5 - 2] + 0.86 * v0[i5 - 2] + 0.02 * v0[i5 - 1]
    s += np.sum(y4 * y4)
    return s + 0.44 * t2 + 0.17 * t1 + 0.34 * t3


def test_a_gathered_reverse_keeps_the_names_of_the_body():
    x0, x1 = 0.24362290309811652, -0.12450540378276487
    v0 = np.array([1.490580255085558, -1.3476249409520142, 0.27739066721725614])
    hvp, g = nr.hvp(_stencil_after_scalars, 1), nr.grad(_stencil_after_scalars, 1)
    h = 1e-6
    for d in (np.array([0.3, -0.2, 0.5]), np.array([-0.1, 0.4, 0.2])):
        want = (g(x0, v0 + h * d, x1) - g(x0, v0 - h * d, x1)) / (2 * h)
        np.testing.assert_allclose(hvp(x0, v0, x1, d), want, rtol=1e-6, atol=1e-6)
    assert "as a gather" in nr.code(hvp, x0, v0, x1, d, kind="driver")
