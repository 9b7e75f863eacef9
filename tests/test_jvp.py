"""Forward mode (nr.jvp, nr.frule): directional derivatives against central finite differences
and against grad . v, forward rules under the rule rule, backedges, and the refusals."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import numbarules as nr
from mutual_recursion import SOURCE as CYCLE_SOURCE, loss_derivative
from perf._workloads_ad import WORKLOADS


def central(f, args, argnum, v, h=1e-6):
    up, down = list(args), list(args)
    up[argnum] = args[argnum] + h * v
    down[argnum] = args[argnum] - h * v
    return (np.asarray(f(*up)) - np.asarray(f(*down))) / (2 * h)


def stencil(u0, k):
    """A time loop with a buffer swap: views, stores, rebinding, a while loop with a break."""
    u = u0.copy()
    v = np.empty_like(u)
    v[0] = u[0]
    v[-1] = u[-1]
    for step in range(3):
        for i in range(1, u.shape[0] - 1):
            v[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u, v = v, u
    s = 0.0
    j = 0
    while True:
        if j >= u.shape[0] or u[j] > 10.0:
            break
        s += math.tanh(u[j]) * u[j]
        j += 1
    return s + np.sum(u[1:3] ** 2)


def broadcasting(x, b):
    """Array expressions that broadcast a row, a scalar and a column."""
    y = np.exp(x / 3.0) * b + np.sin(x)
    z = y - np.mean(y, 0)
    w = np.maximum(z, 0.1) + 2.0
    return np.cumsum(w, 1) @ np.ones(x.shape[1]) / (1.0 + np.max(x))


def branches(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > c:
            s += x[i] ** 3 / c
        else:
            s -= math.log(1.0 + x[i] * x[i]) * c
    return s


@given(st.integers(0, 2 ** 32 - 1))
def test_jvp_agrees_with_finite_differences_and_with_grad(seed):
    rng = np.random.default_rng(seed)
    u = rng.uniform(-1.0, 1.0, 7)
    x = rng.uniform(-1.0, 1.0, (4, 5))
    b = rng.uniform(0.5, 1.5, 5)
    cases = [(stencil, (u, 0.2), 0), (stencil, (u, 0.2), 1), (broadcasting, (x, b), 0),
             (broadcasting, (x, b), 1), (branches, (u, 0.3), 0), (branches, (u, 0.3), 1)]
    for f, args, k in cases:
        v = rng.uniform(-1.0, 1.0, np.shape(args[k])) if np.ndim(args[k]) else 0.7
        y, dy = nr.jvp(f, k)(*args, v)
        assert np.allclose(y, f(*args), rtol=1e-12)
        assert np.allclose(dy, central(f, args, k, v), rtol=1e-6, atol=1e-7), f.__name__
        if np.ndim(y) == 0:
            g = nr.grad(f, k)(*args)
            assert dy == pytest.approx(float(np.sum(g * v)), rel=1e-10, abs=1e-12)


def test_jvp_of_the_benchmark_workloads_is_grad_dot_v():
    rng = np.random.default_rng(0)
    for w in WORKLOADS:
        args = w.make_args(w.check_size, rng)
        nums = (w.argnums,) if isinstance(w.argnums, int) else w.argnums
        v = tuple(rng.uniform(-1, 1, np.shape(args[k])) for k in nums)
        y, dy = nr.jvp(w.primal, w.argnums)(*args, v[0] if isinstance(w.argnums, int) else v)
        _, g = w.adjoint(*args)
        g = (g,) if isinstance(w.argnums, int) else g
        want = sum(float(np.sum(gk * vk)) for gk, vk in zip(g, v))
        assert y == pytest.approx(w.primal(*args), rel=1e-12)
        assert dy == pytest.approx(want, rel=1e-9), w.name


def test_jvp_with_several_arguments_and_array_results():
    def f(a, x, n):
        out = np.zeros((n, x.shape[0]))
        for k in range(n):
            out[k] = a ** k * x
        return out
    x = np.array([0.5, -1.0, 2.0])
    y, dy = nr.jvp(f, (0, 1))(1.5, x, 3, (1.0, np.ones(3)))
    assert dy.shape == y.shape == (3, 3)
    want = central(lambda a, x, n: f(a, x + a - 1.5, n), (1.5, x, 3), 0, 1.0)
    assert np.allclose(dy, want, rtol=1e-7)


def test_tangents_are_checked_against_the_arguments():
    def f(x):
        return np.sum(x * x)
    with pytest.raises(ValueError, match=r"jvp\(.*f\).*array of shape \(3,\)"):
        nr.jvp(f)(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="a real number"):
        nr.jvp(lambda a: a * a)(1.0, "x")
    with pytest.raises(ValueError, match="tuple of 2 tangents"):
        nr.jvp(lambda a, b: a * b, (0, 1))(1.0, 2.0, 1.0)


@nr.generic
def total(x: nr.AbstractArray):
    flat = x.ravel()
    s = 0.0
    for i in range(flat.shape[0]):
        s += flat[i]
    return s


@total.method
def total(x: nr.Vector):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def test_a_forward_rule_attaches_to_its_method_not_to_more_specific_ones():
    def loss(x):
        return 3.0 * total(x)
    m, v = np.ones((2, 2)), np.ones(3)
    assert nr.jvp(loss)(m, m)[1] == 12.0           # the body of total(::AbstractArray)
    jvp = nr.jvp(loss)

    @nr.frule(total)
    def _(x: nr.AbstractArray, dx):
        return total(x), 2.0 * np.sum(dx)          # deliberately twice the derivative
    # the matrix call now runs the rule (the kernel compiled before was dropped) ...
    assert jvp(m, m)[1] == 24.0
    # ... and the vector call runs total(::Vector), whose body is differentiated
    assert jvp(v, v)[1] == 9.0

    @nr.frule(total)
    def _(x: nr.AbstractArray, dx):
        return total(x), np.sum(dx)                # replaces the rule at the same signature
    assert jvp(m, m)[1] == 12.0


def straight_through(x):
    return float(math.floor(x))


@nr.rrule(straight_through)
def _(x: float):
    def pullback(dy):
        return (dy,)
    return float(math.floor(x)), pullback


def test_a_reverse_rule_with_a_float_result_serves_forward_mode():
    def f(x):
        return straight_through(x * 2.0) * x
    y, dy = nr.jvp(f)(1.3, 1.0)
    # d/dx [st(2x) x] with st' = 1 (the rule's derivative): 2x + st(2x)
    assert dy == pytest.approx(2 * 1.3 + math.floor(2.6))
    assert dy == pytest.approx(nr.grad(f)(1.3))


def doubled(x):
    return 2.0 * x


@nr.rrule(doubled)
def _(x: nr.Vector):
    def pullback(dy):
        return (2.0 * dy,)
    return 2.0 * x, pullback


def test_a_reverse_rule_with_an_array_result_is_refused_by_name():
    with pytest.raises(nr.DifferentiationError, match=r"(?s)no forward rule for rrule for doubled.*nr\.frule"):
        nr.jvp(lambda x: np.sum(doubled(x)))(np.ones(3), np.ones(3))


@nr.struct
class Inner(nr.Any):
    w: nr.Vector[nr.Float64]
    k: int


@nr.struct
class Outer(nr.Any):
    inner: Inner
    c: float


def structs(o, x):
    h = o.inner.w * x + o.c
    made = Outer(Inner(h * h, o.inner.k), o.c * 2.0)
    return np.sum(made.inner.w) * made.c, made


def test_struct_tangents_in_and_out():
    o = Outer(Inner(np.array([0.5, -1.0, 2.0]), 3), 1.5)
    x = np.array([1.0, 2.0, -0.5])
    do = nr.Tangent[Outer](nr.Tangent[Inner](np.array([0.1, 0.2, 0.3]), None), -0.4)
    (y, made), (dy, dmade) = nr.jvp(structs, (0, 1))(o, x, (do, np.ones(3)))
    assert isinstance(dmade, nr.Tangent[Outer]) and dmade.inner.k is None
    h = 1e-6

    def at(t):
        o2 = Outer(Inner(o.inner.w + t * do.inner.w, 3), o.c + t * do.c)
        return structs(o2, x + t)
    want = (at(h)[0] - at(-h)[0]) / (2 * h)
    assert dy == pytest.approx(want, rel=1e-7)
    assert np.allclose(dmade.inner.w, (at(h)[1].inner.w - at(-h)[1].inner.w) / (2 * h))
    assert dmade.c == pytest.approx(-0.8)
    # (Outer_2 where another test module's struct Outer was defined first)
    with pytest.raises(ValueError, match=r"Tangent\[Outer(_\d+)?\]"):
        nr.jvp(structs)(o, x, (0.1, 0.2))


def power(x, n):
    if n == 0:
        return 1.0
    return x * power(x, n - 1)


def is_even(x, n):
    if n == 0:
        return x
    return is_odd(x * 1.5, n - 1)


def is_odd(x, n):
    if n == 0:
        return -x
    return is_even(x, n - 1)


def test_recursion_in_forward_mode():
    assert nr.jvp(power)(1.5, 4, 1.0) == (1.5 ** 4, 4 * 1.5 ** 3)
    assert nr.grad(nr.grad(power))(1.5, 4) == pytest.approx(12 * 1.5 ** 2)


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_mutual_recursion_in_forward_mode(n, make_module):
    # until 2026-12-07 refused by name ("a mutually recursive call of is_odd")
    m = make_module("cycle_jvp_orders", CYCLE_SOURCE)
    for f in (is_even, m.up):
        y, dy = nr.jvp(f)(0.7, n, 1.0)
        assert y == pytest.approx(f(0.7, n), rel=1e-12)
        assert dy == pytest.approx(nr.grad(f)(0.7, n), rel=1e-10)
        h = 1e-5
        want = (nr.grad(f)(0.7 + h, n) - nr.grad(f)(0.7 - h, n)) / (2 * h)
        assert nr.hvp(f)(0.7, n, 1.0) == pytest.approx(want, rel=1e-6, abs=1e-8)
        assert nr.grad(nr.grad(f))(0.7, n) == pytest.approx(want, rel=1e-6, abs=1e-8)


def test_mutual_recursion_in_forward_mode_follows_a_new_rule(make_module):
    # jvp(up) builds up's tangent kernel, inside it down's, which calls up's back: a forward
    # rule of bend (called in up only; typing does not see rules) must drop down's kernel too,
    # or jvp(loss) runs up's old kernel through down's (TangentSpec.waiters links them)
    m = make_module("cycle_jvp_rule", CYCLE_SOURCE)
    assert nr.jvp(m.up)(0.7, 3, 1.0)[0] == pytest.approx(m.up(0.7, 3))
    jvp = nr.jvp(m.loss)
    y0, dy0 = jvp(0.6, 1.0)
    assert dy0 == pytest.approx(loss_derivative(0.6), rel=1e-12)

    @nr.frule(m.bend)
    def _(x: float, dx):
        return math.sin(x), 2.0 * math.cos(x) * dx      # deliberately twice the derivative
    y, dy = jvp(0.6, 1.0)
    assert y == pytest.approx(y0, rel=1e-12)
    assert dy == pytest.approx(loss_derivative(0.6, scale=2.0), rel=1e-12)



def test_numpy_functions_of_array_results_have_forward_rules():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 3)) + 3.0 * np.eye(3)
    x = rng.standard_normal(4)

    cases = [
        (lambda a: np.linalg.inv(a), a),
        (lambda a: np.linalg.solve(a, np.ones(3)), a),
        (lambda a: np.linalg.det(a), a),
        (lambda a: np.max(a, 0) + np.min(a, 1), a),
        (lambda a: np.tril(a) + np.triu(a, 1) * 2.0 + np.diag(np.diag(a)), a),
        (lambda a: np.fliplr(a) @ np.flipud(a), a),
        (lambda x: np.outer(x, x), x),
        (lambda x: np.concatenate((x, np.cumsum(x))), x),
        (lambda x: np.stack((x, x * x)), x),
        (lambda x: np.sum(np.expand_dims(x, 0) * np.atleast_2d(x), 1), x),
        (lambda x: np.prod(x) + np.std(x) + np.linalg.norm(x), x),
        (lambda a: np.prod(a, 0) + np.mean(a, 1) + np.sum(a, (0, 1)), a),
        (lambda a: np.linalg.slogdet(a)[1], a),
    ]
    for f, arg in cases:
        v = rng.standard_normal(arg.shape)
        y, dy = nr.jvp(f)(arg, v)
        assert np.allclose(dy, central(f, (arg,), 0, v), rtol=1e-6, atol=1e-8)


def test_a_function_writing_into_its_argument_leaves_the_callers_tangent_alone():
    def f(x):
        x[0] = x[0] * 3.0
        return np.sum(x * x)
    x, v = np.array([1.0, 2.0]), np.array([1.0, 1.0])
    y, dy = nr.jvp(f)(x, v)
    assert list(x) == [3.0, 2.0]           # the function's own write, as in Python
    assert list(v) == [1.0, 1.0]
    assert dy == pytest.approx(2 * 3.0 * 3.0 + 2 * 2.0)


def test_code_shows_the_tangent_kernel():
    from perf._workloads_ad import rosenbrock
    src = nr.code(rosenbrock, np.ones(4), kind="jvp")
    import re
    assert re.match(r"def jvp_rosenbrock(_\d+)?\(x, d_x\):", src), src
    assert "_d7 = _d6 * (2.0 * _t6)" in src and "return (s, d_s)" in src


def test_clear_cache_drops_tangent_kernels():
    def f(x):
        return x * x * 3.0
    jvp = nr.jvp(f)
    assert jvp(2.0, 1.0) == (12.0, 12.0)
    nr.clear_cache()
    before = nr.cache_info()["compiles"]
    assert jvp(2.0, 1.0) == (12.0, 12.0)
    assert nr.cache_info()["compiles"] > before        # compiled again, not a dangling kernel


def test_element_wise_tangents_of_fortran_ordered_arrays():
    def f(m):
        return np.sum(np.tanh(m) * m)
    m = np.asfortranarray(np.arange(6.0).reshape(2, 3) / 5.0)
    v = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    # the loop filled ravel() of a Fortran-ordered array: a copy, the tangent lost (fuzz 36037 #188)
    assert nr.jvp(f)(m, v)[1] == pytest.approx(float(np.sum(nr.grad(f)(m) * v)), rel=1e-12)
    x32 = np.linspace(0.1, 0.9, 4).astype(np.float32)
    y, dy = nr.jvp(np.tanh)(x32, np.ones(4, np.float32))
    assert dy.dtype == np.float32 and np.allclose(dy, 1.0 - np.tanh(x32) ** 2, rtol=1e-6)


def floor_then_grow(x, v):
    t = float(math.floor(v))        # no tangent yet: an integer made a float
    k = 0
    while t < 1.95 and k < 1:
        k += 1
        t = t + x * x               # active from here on
    return t


def test_a_float_of_an_integer_that_becomes_active_in_a_loop():
    # its tangent starts as 0.0, not None (fuzz seed 3702 #100: a typing error in nr.jvp)
    assert nr.jvp(floor_then_grow, (0, 1))(1.5, 0.5, (1.0, 1.0)) == pytest.approx((2.25, 3.0))
