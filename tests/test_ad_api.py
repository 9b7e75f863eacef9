"""grad / value_and_grad / pullback / code: the API, its errors, and its backedges."""
import math
import os
import re
import subprocess
import sys

import numba
import numpy as np
import pytest

import numbarules as nr
from numbarules.testing import check_grad


def f_xy(x, y):
    return x * y + math.sin(x) * y ** 2


def df_xy(x, y):                   # hand-written adjoint
    return y + math.cos(x) * y ** 2, x + 2.0 * math.sin(x) * y


def with_int(x, n, a):
    s = 0.0
    for i in range(n):
        s += x * a[i % a.shape[0]] ** 2
    return s


def test_grad_argnums_int_and_tuple_against_hand_written_adjoint():
    x, y = 0.7, -1.3
    dx, dy = df_xy(x, y)
    assert nr.grad(f_xy)(x, y) == pytest.approx(dx, rel=1e-12)
    assert nr.grad(f_xy, argnums=1)(x, y) == pytest.approx(dy, rel=1e-12)
    assert nr.grad(f_xy, argnums=-1)(x, y) == pytest.approx(dy, rel=1e-12)
    gx, gy = nr.grad(f_xy, argnums=(0, 1))(x, y)
    assert (gx, gy) == (pytest.approx(dx, rel=1e-12), pytest.approx(dy, rel=1e-12))
    value, (gx2,) = nr.value_and_grad(f_xy, argnums=(0,))(x, y)
    assert value == pytest.approx(f_xy(x, y)) and gx2 == pytest.approx(dx)
    value, g = nr.value_and_grad(f_xy)(x, y)
    assert value == pytest.approx(f_xy(x, y)) and g == pytest.approx(dx)


def test_integer_arguments_get_none_and_arrays_get_arrays():
    a = np.array([1.0, -2.0, 0.5])
    gx, gn, ga = nr.grad(with_int, argnums=(0, 1, 2))(0.5, 5, a)
    assert gn is None
    assert isinstance(ga, np.ndarray) and ga.shape == a.shape and ga.dtype == a.dtype
    # hand-written: d/dx = sum a[i%3]^2; d/da[k] = 2 x a[k] * count(k)
    counts = np.bincount(np.arange(5) % 3, minlength=3)
    assert gx == pytest.approx(sum(a[i % 3] ** 2 for i in range(5)))
    np.testing.assert_allclose(ga, 2 * 0.5 * a * counts)


def test_pullback_returns_one_tangent_per_argument():
    a = np.array([1.0, 2.0])
    y, pb = nr.pullback(with_int, 0.5, 3, a)
    assert y == pytest.approx(with_int(0.5, 3, a))
    t1 = pb(1.0)
    t2 = pb(2.0)
    assert len(t1) == 3 and t1[1] is None
    assert t2[0] == pytest.approx(2 * t1[0])
    np.testing.assert_allclose(t2[2], 2 * t1[2])


def test_argnums_errors():
    with pytest.raises(TypeError, match="argnums"):
        nr.grad(f_xy, argnums="x")
    with pytest.raises(TypeError, match="out of range"):
        nr.grad(f_xy, argnums=2)(1.0, 2.0)


def test_generic_functions_are_differentiated_per_method():
    @nr.generic
    def energy(x: nr.Vector[nr.Float64]):
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] ** 2
        return s

    @energy.method
    def energy(x: nr.Float64):
        return 3.0 * x ** 3

    np.testing.assert_allclose(nr.grad(energy)(np.array([1.0, 2.0])), [2.0, 4.0])
    assert nr.grad(energy)(2.0) == pytest.approx(36.0)


def test_grad_objects_inside_compiled_code():
    def loss(w, x):
        s = 0.0
        for i in range(x.shape[0]):
            r = w * x[i] - 1.0
            s += r * r
        return s

    g = nr.grad(loss)

    @nr.jit
    def descend(w, x, steps):
        for _ in range(steps):
            w = w - 0.05 * g(w, x)
        return w

    @numba.njit
    def plain(w, x):
        return g(w, x)

    x = np.array([1.0, 2.0, 0.5])
    w = descend(0.0, x, 200)
    assert w == pytest.approx(np.sum(x) / np.sum(x * x), rel=1e-6)
    assert plain(0.3, x) == pytest.approx(g(0.3, x))


def test_grad_follows_a_new_method_of_a_callee():
    @nr.generic
    def act(x: nr.Real):
        return x * x

    def model(x):
        return act(x) + 1.0

    g = nr.grad(model)
    other = nr.grad(lambda x: x * 3.0)
    assert g(3.0) == pytest.approx(6.0)
    assert other(1.0) == pytest.approx(3.0)
    before = nr.cache_info(other)["compiles"]

    @act.method
    def act(x: nr.Float64):
        return x * x * x

    assert g(3.0) == pytest.approx(27.0)          # the same gradient object, the new method
    assert other(1.0) == pytest.approx(3.0)
    assert nr.cache_info(other)["compiles"] == before


def test_code_is_readable():
    src = nr.code(f_xy, 0.5, 1.5, kind="pullback")
    assert re.match(r"def bwd_f_xy(_\d+)?\(", src), src[:40]
    assert "d_x" in src and "d_y" in src
    assert "# line" in src and "math.sin(x) * y ** 2" in src
    fwd = nr.code(f_xy, 0.5, 1.5, kind="forward")
    assert "return" in fwd and re.search(r"def fwd_f_xy(_\d+)?\(", fwd)
    primal = nr.code(f_xy, 0.5, 1.5, kind="primal")
    assert "_t1 = x * y" in primal
    with pytest.raises(ValueError, match="kind must be one of"):
        nr.code(f_xy, 0.5, 1.5, kind="adjoint")


def test_code_is_the_same_in_every_process(tmp_path):
    """Kernel names come from the function's name, not from a process-wide counter: the first
    specialization of ``f`` is ``fwd_f``, in every fresh process (rule kernels and partials too)."""
    child = ("import numpy as np, numbarules as nr\n"
             "def f(x):\n"
             "    return np.sum(np.tanh(x)) + np.sin(x[0])\n"
             "x = np.linspace(0.1, 1.0, 4)\n"
             "print(nr.code(f, x, kind='forward'))\n"
             "print(nr.code(f, x, kind='pullback'))\n")
    script = tmp_path / "code_child.py"       # numbarules reads functions' source from files
    script.write_text(child)
    env = dict(os.environ, NUMBARULES_CACHE="0")
    out = [subprocess.run([sys.executable, str(script)], env=env, check=True, capture_output=True,
                          text=True).stdout for _ in range(2)]
    assert out[0] == out[1]
    assert "def fwd_f(x):" in out[0] and "def bwd_f(" in out[0]
    assert not re.search(r"_\d{3,}", out[0]), out[0]      # no ids or addresses in names


def test_ad_stats_reports_the_tape():
    def cumprod_last(x):
        p = 1.0
        for i in range(x.shape[0]):
            p = p * math.sin(x[i] + p)
        return p

    x = np.linspace(0.1, 1.0, 50)
    stats = nr.ad_stats(cumprod_last, x)
    # The carried product and what the reverse pass reads of each iteration, per iteration.
    assert 50 * 8 <= stats["tape_bytes"] <= 50 * 3 * 8 + 64
    check_grad(cumprod_last, x)


# --- errors ------------------------------------------------------------------------------------

def iterate_array(x):
    s = 0.0
    for v in x:
        s += v
    return s


def slices_in_a_loop(x):
    s = 0.0
    for i in range(2):
        s += x[i:].sum()
    return s


def temporaries_in_a_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        y = x[i:] * 2.0
        s += y.sum()
    return s


def writes_through_a_view(x):
    y = x[1:]
    y[0] = 2.0
    return y.sum()


def calls_untreated_library(x):
    return np.sum(np.linalg.eigvalsh(x))


def calls_builtin_without_rule(x):
    return math.gamma(x)


def writes_its_argument(x):
    x[0] = x[0] * 2.0
    return x[0]


def returns_nothing(x):
    y = x * 2.0


def test_unsupported_syntax_names_file_line_and_construct():
    with pytest.raises(nr.UnsupportedSyntaxError) as info:
        nr.grad(iterate_array)(np.ones(3))
    msg = str(info.value)
    assert "a for loop over something other than range(...)" in msg
    assert "test_ad_api.py" in msg and "for v in x:" in msg and "Hint:" in msg
    # Views taken in a loop and whole-array temporaries made in a loop are differentiated.
    np.testing.assert_allclose(nr.grad(slices_in_a_loop)(np.ones(3)), [1.0, 2.0, 2.0])
    np.testing.assert_allclose(nr.grad(temporaries_in_a_loop)(np.ones(3)), [2.0, 4.0, 6.0])
    with pytest.raises(nr.UnsupportedSyntaxError, match=r"writing into the argument array 'x'"):
        nr.grad(writes_through_a_view)(np.ones(3))
    with pytest.raises(nr.UnsupportedSyntaxError, match=r"(?s)writing into the argument array 'x'.*copy"):
        nr.grad(writes_its_argument)(np.ones(3))
    with pytest.raises(nr.UnsupportedSyntaxError, match="returns no value"):
        nr.grad(returns_nothing)(1.0)


def test_calls_without_source_or_rule():
    with pytest.raises(nr.DifferentiationError) as info:
        nr.grad(calls_builtin_without_rule)(1.5)
    msg = str(info.value)
    assert "math.gamma" in msg and "nr.scalar_rule" in msg and "non_differentiable" in msg
    assert "test_ad_api.py" in msg
    with pytest.raises(nr.DifferentiationError, match="numpy.linalg.eigvalsh"):
        nr.grad(calls_untreated_library)(np.eye(2))


def test_non_scalar_output_is_refused():
    def vec(x):
        y = np.empty(2)
        y[0] = x
        y[1] = x
        return y
    with pytest.raises(nr.UnsupportedSyntaxError, match="scalar float result"):
        nr.grad(vec)(1.0)


def test_values_of_floats_in_structs_and_tuples_built_anywhere():
    @nr.struct
    class Box:
        v: float

    @nr.struct
    class Holder:
        a: nr.Vector[nr.Float64]

    def boxed_in_a_loop(x):
        s = 0.0
        for i in range(2):
            b = Box(x * i)
            s += b.v
        return s
    assert nr.grad(boxed_in_a_loop)(1.0) == 1.0

    def tupled(x):
        t = (x, np.ones(2))
        return t[0] * t[1][0]
    assert nr.grad(tupled)(1.0) == 1.0

    def arrays_boxed_in_a_loop(x):
        s = 0.0
        for i in range(2):
            h = Holder(x * 2.0)
            s += h.a[i]
        return s
    with pytest.raises(nr.UnsupportedSyntaxError, match="struct 'h' .* built inside a loop"):
        nr.grad(arrays_boxed_in_a_loop)(np.ones(2))


def sum_tanh(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.tanh(x[i])
    return s


def test_partials_that_use_the_result_see_each_iterations_result():
    # Regression: the separate pullback used the last iteration's tanh for every iteration.
    x = np.array([0.3, -0.8, 1.1, 0.05])
    expected = 1.0 - np.tanh(x) ** 2
    np.testing.assert_allclose(nr.pullback(sum_tanh, x)[1](1.0)[0], expected, rtol=1e-12)
    np.testing.assert_allclose(nr.grad(sum_tanh)(x), expected, rtol=1e-12)


def test_a_renamed_function_is_found_by_its_line_never_guessed():
    def g(x):
        return x * x
    g.__name__ = "renamed"
    assert nr.grad(g)(1.5) == pytest.approx(3.0)
    h = lambda x: x * 3.0      # noqa: E731
    assert nr.grad(h)(1.0) == pytest.approx(3.0)
    # two lambdas on one line: told apart by what they compile to (their constants)
    pair = [lambda x: x * 2.0, lambda x: x * 5.0]
    assert nr.grad(pair[1])(1.0) == pytest.approx(5.0)
    assert nr.grad(pair[0])(1.0) == pytest.approx(2.0)


def overwritten_argument(x, y, n):
    x = y * 2.0          # x's own value never reaches the result
    s = 0.0
    for i in range(n):
        s += x * y       # s's adjoint restarts at -0.0 each iteration (reset_zero)
        y = y * 0.5
    return s


def test_overwritten_arguments_get_a_plus_zero_tangent():
    gx, gy, gn = nr.grad(overwritten_argument, argnums=(0, 1, 2))(1.5, 0.7, 3)
    assert gx == 0.0 and math.copysign(1.0, gx) == 1.0       # +0.0, not the reset's -0.0
    assert gn is None
    # s = sum_i 2 y (y / 2^i) = 2 y^2 (1 + 1/2 + 1/4) for n = 3
    assert gy == pytest.approx(4.0 * 0.7 * (1 + 0.5 + 0.25), rel=1e-14)
    check_grad(overwritten_argument, 1.5, 0.7, 3)


def _scaled(x, k=2.0):
    return x * k


def test_wrong_argument_counts_name_the_function():
    # Numba's "Mismatch number of argument types" came through before; now the API names f.
    A = np.ones((2, 2))

    def two(a, b):
        return np.sum(a) * b
    for call, name in ((lambda: nr.pullback(two, A), "pullback(test_wrong_argument_counts"),
                       (lambda: nr.explain(two, A), "explain(test_wrong_argument_counts"),
                       (lambda: nr.code(two, A), "code(test_wrong_argument_counts"),
                       (lambda: nr.grad(two)(A), "grad(test_wrong_argument_counts")):
        with pytest.raises(TypeError, match="missing a required argument: 'b'") as info:
            call()
        assert str(info.value).startswith(name)


def test_pullback_fills_defaults_and_returns_a_tangent_per_argument_passed():
    y, pb = nr.pullback(_scaled, 3.0)
    assert y == 6.0 and pb(1.0) == (2.0,)
    y, pb = nr.pullback(_scaled, 3.0, 5.0)
    assert y == 15.0 and pb(1.0) == (5.0, 3.0)


def _down(a, n):
    if n == 0:
        return a
    return _up(a * 1.1, n - 1) + math.sin(a)


def _up(a, n):
    if n == 0:
        return a * a
    return _down(a - 0.2, n - 1) * 0.9


def _calls_recursion(x, n):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s + _down(x[0], n)


def test_a_caller_of_a_recursive_function_gets_the_one_kernel_gradient():
    # Only the functions on a recursion cycle keep the forward/pullback pair (Numba types the
    # recursion through them); their callers compile the gradient as one kernel.
    x = np.array([0.3, -0.7, 1.1])
    nr.compile_stats(reset=True)
    g = nr.grad(_calls_recursion)(x, 5)
    labels = [k.label for k in nr.compile_stats().kernels]
    assert not any(label.startswith("_calls_recursion (") for label in labels), labels
    assert any(label.startswith("_down (") for label in labels), labels    # on the cycle
    check_grad(_calls_recursion, x, 5)
    fd = (_calls_recursion(x + [1e-6, 0, 0], 5) - _calls_recursion(x - [1e-6, 0, 0], 5)) / 2e-6
    assert abs(g[0] - fd) < 1e-6 * max(1.0, abs(fd))


def cubes(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 3
    return s


def test_the_python_entry_compiles_nothing_of_its_own():
    # A first gradient compiles one driver, value_and_grad's (the forward and reverse in one
    # kernel returning the value and the gradient): grad's entry runs its machine code through
    # a wrapper of its own that returns the gradient alone (numba_glue.picked_result), and
    # value_and_grad's entry runs it as it is; neither compiles anything else.
    g, vg = nr.grad(cubes), nr.value_and_grad(cubes)
    x = np.array([1.0, 2.0, 3.0])
    before = nr.cache_info()["compiles"]
    np.testing.assert_allclose(g(x), 3 * x ** 2)
    assert nr.cache_info()["compiles"] == before + 1
    assert nr.cache_info()["by_function"].get("grad(cubes) (entry)") is None
    value, grad = vg(x)
    assert value == pytest.approx(36.0)
    np.testing.assert_allclose(grad, 3 * x ** 2)
    assert nr.cache_info()["compiles"] == before + 1
    assert g(x) is not g(x) and nr.grad(cubes) is g      # one object per (f, argnums, kind)
    assert nr.cache_info()["compiles"] == before + 1
    # keywords, a second type, and the machine code is the driver's own entry point
    np.testing.assert_allclose(g(x=np.array([2.0])), [12.0])
    np.testing.assert_allclose(g(np.arange(4.0)[::2]), [0.0, 12.0])       # layout A
    entry = g._nr_trampoline
    for sig, cres in entry.overloads.items():
        driver = g._drivers[(sig, "picked")][0]      # value_and_grad's driver
        own = driver.overloads[sig]
        assert cres.fndesc is own.fndesc and cres.library is own.library      # the same code
        if sig in vg._nr_trampoline.overloads:          # value_and_grad was called with it
            assert vg._nr_trampoline.overloads[sig] is own
    assert isinstance(g(x), np.ndarray) and isinstance(vg(x), tuple)


def stencil_sum(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def log_stencil_sum(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return math.log(s)


def test_grad_compiles_a_kernel_of_its_own_where_a_loop_runs_for_the_value_alone():
    # Rosenbrock's reverse is a gather that computes again what it reads: the forward loop
    # computes the value alone, which grad's own kernel does not return, so LLVM deletes that
    # loop (half the time: perf/bench_ad.py). value_and_grad then compiles its own kernel.
    x = np.array([0.3, -1.2, 0.8, 1.1, -0.4, 0.9])
    g, vg = nr.grad(stencil_sum), nr.value_and_grad(stencil_sum)
    before = nr.cache_info()["compiles"]
    gx = g(x)
    assert nr.cache_info()["compiles"] == before + 1
    value, vgx = vg(x)
    assert nr.cache_info()["compiles"] == before + 2
    np.testing.assert_array_equal(gx, vgx)
    assert value == pytest.approx(stencil_sum(x))
    check_grad(stencil_sum, x)
    driver = nr.code(g, x, kind="driver")
    assert driver.rstrip().endswith("return (d_x, )"), driver[-300:]
    assert nr.code(vg, x, kind="driver").rstrip().endswith("return (s, d_x, )")
    # where the reverse reads the loop's sum (log's), grad shares value_and_grad's kernel
    g, vg = nr.grad(log_stencil_sum), nr.value_and_grad(log_stencil_sum)
    gx = g(x)
    before = nr.cache_info()["compiles"]
    value, vgx = vg(x)
    assert nr.cache_info()["compiles"] == before
    np.testing.assert_array_equal(gx, vgx)
    check_grad(log_stencil_sum, x)
