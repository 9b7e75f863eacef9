"""Functions as values (API 4b): @njit functions, generic functions, gradient objects, Python
functions, lambdas and closures passed as arguments to differentiated functions, specialised on
the function's identity; gradients against finite differences and hand-written derivatives;
named errors for what compiled code cannot take."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st
from numba import njit

import numbarules as nr
from numbarules import function_values


def euler(f, y0, k, n):
    """Explicit Euler for y' = f(y, k), step 0.1: an ODE solver taking its right-hand side."""
    y = y0
    for i in range(n):
        y = y + 0.1 * f(y, k)
    return y


def rk4(f, y0, p, h, n):
    y = y0.copy()
    for i in range(n):
        k1 = f(y, p)
        k2 = f(y + 0.5 * h * k1, p)
        k3 = f(y + 0.5 * h * k2, p)
        k4 = f(y + h * k3, p)
        y = y + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return y


@njit
def decay(y, k):
    return -k * y


@njit
def lotka(y, p):
    out = np.empty(2)
    out[0] = p[0] * y[0] - p[1] * y[0] * y[1]
    out[1] = p[2] * y[0] * y[1] - p[3] * y[1]
    return out


def fit(p, y0):
    """A loss calling the solver with a global function: the value passed from compiled code."""
    y = rk4(lotka, y0, p, 0.05, 20)
    return np.sum(y * y)


def fit_lambda(p, y0):
    """A lambda reading no local variable, passed on inside a differentiated function."""
    return np.sum(rk4(lambda y, q: q[0] * y - q[1] * y * y, y0, p, 0.05, 20))


def central(f, args, k, h=1e-6):
    x = args[k]
    if isinstance(x, np.ndarray):
        out = np.empty_like(x)
        for i in range(x.size):
            e = np.zeros_like(x)
            e.flat[i] = h
            up, down = list(args), list(args)
            up[k], down[k] = x + e, x - e
            out.flat[i] = (f(*up) - f(*down)) / (2 * h)
        return out
    up, down = list(args), list(args)
    up[k], down[k] = x + h, x - h
    return (f(*up) - f(*down)) / (2 * h)


def euler_exact_grad(k, n, c=1.0):
    # y = (1 - 0.1 c k)^n: dy/dk = -0.1 c n (1 - 0.1 c k)^(n - 1)
    return -0.1 * c * n * (1 - 0.1 * c * k) ** (n - 1)


@given(st.floats(0.1, 2.0), st.integers(1, 12))
def test_an_njit_function_passed_from_python(k, n):
    g = nr.grad(euler, argnums=2)(decay, 1.0, k, n)
    assert g == pytest.approx(euler_exact_grad(k, n), rel=1e-12, abs=1e-14)
    y, dy = nr.jvp(euler, 2)(decay, 1.0, k, n, 1.0)
    assert y == pytest.approx((1 - 0.1 * k) ** n) and dy == pytest.approx(g, rel=1e-12, abs=1e-14)
    h = nr.hessian(euler, 2)(decay, 1.0, k, n)
    exact = 0.01 * n * (n - 1) * (1 - 0.1 * k) ** (n - 2) if n > 1 else 0.0
    assert h == pytest.approx(exact, rel=1e-9, abs=1e-12)


def test_a_function_passed_from_compiled_code():
    p, y0 = np.array([1.5, 1.0, 1.0, 3.0]), np.array([1.0, 1.0])
    g = nr.grad(fit)(p, y0)
    np.testing.assert_allclose(g, central(fit, (p, y0), 0), rtol=1e-6)
    _, dy = nr.jvp(fit)(p, y0, np.ones(4))
    assert dy == pytest.approx(g.sum(), rel=1e-12)
    y, pb = nr.pullback(rk4, lotka, y0, p, 0.05, 20)
    tangents = pb(np.ones(2))
    assert tangents[0] is None          # the function carries no tangent
    np.testing.assert_allclose(tangents[2], central(lambda p: rk4(lotka, y0, p, 0.05, 20).sum(),
                                                    (p,), 0), rtol=1e-6)


def test_a_lambda_inside_a_differentiated_function_is_passed_on():
    p, y0 = np.array([0.8, 0.3]), np.array([0.5, 1.0])
    np.testing.assert_allclose(nr.grad(fit_lambda)(p, y0), central(fit_lambda, (p, y0), 0),
                               rtol=1e-6)


def test_a_lambda_reading_a_local_is_refused_by_name(make_module):
    mod = make_module("fv_local_lambda", (
        "from tests.test_function_values import euler\n"
        "def loss(k):\n"
        "    c = 2.0 * k\n"
        "    return euler(lambda y, q: -c * q * y, 1.0, k, 3)\n"))
    with pytest.raises(nr.UnsupportedSyntaxError, match=r"reads the local variable c(.|\n)*"
                       r"fv_local_lambda.py\", line 4"):
        nr.grad(mod.loss)(0.5)


@nr.generic
def force(y, k: nr.AbstractFloat):
    return -k * y


def test_a_generic_function_passed_follows_its_new_methods():
    @nr.generic
    def pull(y, k: nr.AbstractFloat):
        return -k * y

    g = nr.grad(euler, argnums=2)
    assert g(pull, 1.0, 0.5, 4) == pytest.approx(euler_exact_grad(0.5, 4))

    @pull.method
    def pull(y, k: nr.Float64):          # more specific: the solver must now use it
        return -3.0 * k * y
    assert g(pull, 1.0, 0.5, 4) == pytest.approx(euler_exact_grad(0.5, 4, c=3.0))

    def loss(k):                         # passed from compiled code: the backedge drops it
        return euler(pull, 1.0, k, 4)
    assert nr.grad(loss)(0.5) == pytest.approx(euler_exact_grad(0.5, 4, c=3.0))

    @pull.method
    def pull(y, k: nr.Float64):
        return -5.0 * k * y
    assert nr.grad(loss)(0.5) == pytest.approx(euler_exact_grad(0.5, 4, c=5.0))


def test_a_rule_on_the_passed_function_is_used():
    @nr.generic
    def spring(y, k: nr.AbstractFloat):
        return -k * y

    @nr.rrule(spring, nr.Float64, nr.Float64)
    def spring_rule(y, k):
        def pullback(dy):
            return (-2.0 * k * dy, -2.0 * y * dy)     # deliberately twice the true derivative
        return -k * y, pullback

    # one step from y0 = 1: y1 = 1 - 0.1 k; the rule's partial in k is -2 y, so -0.2
    assert nr.grad(euler, argnums=2)(spring, 1.0, 0.5, 1) == pytest.approx(-0.2)


def quartic(x):
    return x ** 4 - 3.0 * x * x + x


def descend(df, x, n):
    for i in range(n):
        x = x - 0.05 * df(x)
    return x


def test_a_gradient_object_passed_as_a_value():
    dq = nr.grad(quartic)
    got = nr.grad(descend, 1)(dq, 0.7, 3)

    @njit
    def descend_by_hand(x, n):
        for i in range(n):
            x = x - 0.05 * (4 * x ** 3 - 6 * x + 1)
        return x
    assert got == pytest.approx(central(descend_by_hand, (0.7, 3), 0), rel=1e-7)


def test_python_functions_and_lambdas_passed_from_python():
    def rhs(y, k):
        return -k * y * y

    for f in (rhs, lambda y, k: -k * y * y):
        g = nr.grad(euler, argnums=(1, 2))(f, 1.0, 0.5, 5)
        fd = (central(lambda y0: euler(rhs, y0, 0.5, 5), (1.0,), 0),
              central(lambda k: euler(rhs, 1.0, k, 5), (0.5,), 0))
        assert g == pytest.approx(fd, rel=1e-7)
        assert nr.hvp(euler, 2)(f, 1.0, 0.5, 5, 1.0) == pytest.approx(
            central(lambda k: nr.grad(euler, 2)(rhs, 1.0, k, 5), (0.5,), 0), rel=1e-6)


def test_a_closure_is_specialised_on_what_it_captures():
    def make(c):
        return lambda y, k: -c * k * y
    g = nr.grad(euler, argnums=2)
    assert g(make(0.5), 1.0, 0.5, 4) == pytest.approx(euler_exact_grad(0.5, 4, c=0.5))
    # the same captured value: the same compiled helper, nothing compiled again
    assert function_values.compiled(make(0.5)) is function_values.compiled(make(0.5))
    # another captured value: compiled for it, never the first one's constant
    assert function_values.compiled(make(0.7)) is not function_values.compiled(make(0.5))
    assert g(make(0.7), 1.0, 0.5, 4) == pytest.approx(euler_exact_grad(0.5, 4, c=0.7))
    assert g(make(1), 1.0, 0.5, 4) == pytest.approx(euler_exact_grad(0.5, 4, c=1.0))


SCALE = 1.0


def test_a_lambda_reads_the_module_number_it_names_as_it_is_now():
    global SCALE
    got = []
    for SCALE in (0.5, 0.7):       # the classic late-binding loop: each call sees SCALE now
        got.append(nr.grad(euler, 2)(lambda y, k: -SCALE * k * y, 1.0, 0.5, 4))
    SCALE = 1.0
    assert got == pytest.approx([euler_exact_grad(0.5, 4, c=0.5),
                                 euler_exact_grad(0.5, 4, c=0.7)])


def test_a_closure_over_an_array_is_refused_by_name():
    weights = np.ones(3)
    with pytest.raises(nr.FunctionValueError, match=r"lambda at .*test_function_values.py:\d+ "
                       r"was passed as an argument, and it captures 'weights', an array of "
                       r"shape \(3,\)(.|\n)*Hint: make it a parameter"):
        nr.grad(euler, 2)(lambda y, k: -k * y * weights[0], 1.0, 0.5, 2)


def test_library_functions_and_function_gradients_are_refused_by_name():
    for f in (np.sin, math.sin):
        with pytest.raises(TypeError, match=r"argument 0 is <.*sin.*>, a function with no Python "
                           r"source(.|\n)*Hint: pass a function of your own"):
            nr.grad(euler, 2)(f, 1.0, 0.5, 2)
    with pytest.raises(nr.DifferentiationError, match=r"argument 0, a function \(passed as a "
                       r"value\): it has no derivative"):
        nr.grad(euler, 0)(decay, 1.0, 0.5, 2)


def test_a_lambda_on_a_line_that_does_not_parse_alone():
    got = None
    for f in (decay, lambda y, k: -k * y * y):     # the lambda is read from the whole file
        got = nr.grad(euler, 2)(f, 1.0, 0.5, 3)
    assert got == pytest.approx(central(lambda k: euler(lambda y, q: -q * y * y, 1.0, k, 3),
                                        (0.5,), 0), rel=1e-7)


def test_a_parameter_rebound_in_the_body_is_not_the_function_passed(make_module):
    mod = make_module("fv_rebound", (
        "def run(f, x):\n"
        "    f = g\n"
        "    return f(x)\n"
        "def g(x):\n"
        "    return x * x\n"))
    with pytest.raises(nr.UnsupportedSyntaxError, match="calling a local variable"):
        nr.grad(mod.run, 1)(decay, 1.0)


def test_hvp_of_a_loss_through_an_ode_solver():
    p, y0, v = np.array([1.5, 1.0, 1.0, 3.0]), np.array([1.0, 1.0]), np.array([1.0, -1.0, 0.5, 2.0])
    h = 1e-5
    fd = (nr.grad(fit)(p + h * v, y0) - nr.grad(fit)(p - h * v, y0)) / (2 * h)
    np.testing.assert_allclose(nr.hvp(fit)(p, y0, v), fd, rtol=1e-6)


def passes_generic(k):
    return 2.0 * euler(force, 1.0, k, 3)


def test_pullback_of_a_function_passing_a_generic_function_on():
    # the function is a constant of the specialization, never a residual handed to Python
    # (boxing a generic function's compiled type crashed the process: fuzz seed 3701 #10)
    y, pb = nr.pullback(passes_generic, 0.5)
    assert y == pytest.approx(2.0 * 0.95 ** 3)
    assert pb(1.0)[0] == pytest.approx(2.0 * euler_exact_grad(0.5, 3))
    y, pb = nr.pullback(euler, force, 1.0, 0.5, 3)
    assert pb(1.0)[2] == pytest.approx(euler_exact_grad(0.5, 3)) and pb(1.0)[0] is None
