"""Backedges: adding or replacing a method recompiles exactly what it affects."""
import math
import threading

import numba
import numpy as np
import pytest

import numbarules as nr
from mutual_recursion import SOURCE as CYCLE_SOURCE, loss_derivative


def compiles(f):
    return nr.cache_info(f)["compiles"]


def build_graph():
    """leaf <- mid <- top (nr.jit), plus an unrelated function that also calls leaf."""

    @nr.generic
    def leaf(x: nr.Real):
        return x + 1.0

    @nr.generic
    def mid(x: nr.Real):
        return leaf(x) * 2.0

    @nr.jit
    def top(x):
        return mid(x) + 100.0

    @nr.generic
    def unrelated(x: nr.Real):
        return x - 1.0

    @nr.jit
    def uses_leaf_on_ints(n):
        return leaf(n)

    return leaf, mid, top, unrelated, uses_leaf_on_ints


def test_precise_invalidation_through_two_levels():
    leaf, mid, top, unrelated, uses_leaf_on_ints = build_graph()
    assert top(1.0) == 104.0
    assert unrelated(1.0) == 0.0
    assert uses_leaf_on_ints(1) == 2.0
    counts = {f: compiles(f) for f in (leaf, mid, top, unrelated, uses_leaf_on_ints)}
    before = nr.cache_info()

    @leaf.method
    def leaf(x: nr.Float64):          # more specific for floats only
        return x + 10.0

    # Invalidated: mid(Float64), top(float64): a caller two levels up. Not the int path.
    after_add = nr.cache_info()
    assert after_add["invalidations"] - before["invalidations"] == 2
    assert top(1.0) == 122.0
    assert uses_leaf_on_ints(1) == 2.0
    assert unrelated(1.0) == 0.0
    assert compiles(top) == counts[top] + 1
    assert compiles(mid) == counts[mid] + 1
    assert compiles(leaf) == counts[leaf] + 1          # the new method's body, once
    assert compiles(uses_leaf_on_ints) == counts[uses_leaf_on_ints]
    assert compiles(unrelated) == counts[unrelated]


def test_adding_an_unrelated_method_recompiles_nothing():
    leaf, mid, top, unrelated, _ = build_graph()
    top(1.0)
    before = nr.cache_info()

    @leaf.method
    def leaf(x: nr.AbstractMatrix):   # no recorded call has a matrix argument
        return 0.0

    assert nr.cache_info()["invalidations"] == before["invalidations"]
    assert top(1.0) == 104.0
    assert nr.cache_info()["compiles"] == before["compiles"]


def test_replacing_a_method_recompiles_its_callers():
    leaf, mid, top, _, _ = build_graph()
    assert top(2.0) == 106.0
    assert mid(2.0) == 6.0

    @leaf.method
    def leaf(x: nr.Real):             # same signature: replaces the body
        return x * 0.0

    assert len(leaf.methods) == 1
    assert top(2.0) == 100.0
    assert mid(2.0) == 0.0
    assert leaf(2.0) == 0.0


def test_python_entry_is_invalidated_too():
    leaf, _, _, _, _ = build_graph()
    assert leaf(1.0) == 2.0
    n = compiles(leaf)

    @leaf.method
    def leaf(x: nr.Float64):
        return -1.0
    assert leaf(1.0) == -1.0
    assert leaf(1) == 2.0
    # The new method (for the float entry) and the Real method for Int64: the entries run the
    # methods' own compiled code and compile nothing themselves.
    assert compiles(leaf) == n + 2


def test_new_arity_keeps_old_entries_working():
    leaf, _, _, _, _ = build_graph()
    assert leaf(1.0) == 2.0

    @leaf.method
    def leaf(x: nr.Real, y: nr.Real):
        return x + y
    assert leaf(1.0) == 2.0
    assert leaf(1.0, 2.0) == 3.0


def test_method_that_makes_a_recorded_call_ambiguous():
    @nr.generic
    def f(x: nr.Real, y: nr.Real):
        return 1.0

    @nr.jit
    def g(x, y):
        return f(x, y)
    assert g(1.0, 1.0) == 1.0

    @f.method
    def f(x: nr.Float64, y: nr.Real):
        return 2.0
    assert g(1.0, 1.0) == 2.0

    @f.method
    def f(x: nr.Real, y: nr.Float64):
        return 3.0
    try:
        g(1.0, 1.0)
    except nr.AmbiguityError as exc:
        assert "ambiguous" in str(exc)
    else:
        raise AssertionError("an ambiguous call must not run stale code")


def test_plain_njit_keeps_the_decisions_it_was_compiled_with():
    leaf, _, _, _, _ = build_graph()

    @numba.njit
    def plain(x):
        return leaf(x)
    assert plain(1.0) == 2.0

    @leaf.method
    def leaf(x: nr.Float64):
        return 0.0
    assert plain(1.0) == 2.0          # world age: as documented in the README
    assert plain(np.float32(1.0)) == 2.0


def test_clear_cache_resets_counters_and_recompiles_lazily():
    leaf, mid, top, _, _ = build_graph()
    assert top(3.0) == 108.0
    nr.clear_cache()
    info = nr.cache_info()
    assert info["compiles"] == 0 and info["hits"] == 0 and info["specializations"] == 0
    assert top(3.0) == 108.0
    assert nr.cache_info()["compiles"] >= 3


def test_concurrent_calls_while_methods_are_added():
    @nr.generic
    def f(x: nr.Real):
        return 1.0

    @nr.jit
    def g(x):
        return f(x) * 10.0

    xs = [1.0, 2, np.float32(3.0)]
    for x in xs:
        g(x)
    stop = threading.Event()
    seen, errors = [], []

    def worker():
        while not stop.is_set():
            for x in xs:
                try:
                    seen.append((type(x), g(x)))
                except Exception as exc:   # noqa: BLE001 - the test reports any failure
                    errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        @f.method
        def f(x: nr.Float64):
            return 2.0

        @f.method
        def f(x: nr.Int64):
            return 3.0

        @f.method
        def f(x: nr.Real):
            return 4.0
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    allowed = {float: {10.0, 20.0}, int: {10.0, 30.0}, np.float32: {10.0, 40.0}}
    assert all(v in allowed[t] for t, v in seen)
    assert [g(x) for x in xs] == [20.0, 30.0, 40.0]


# --- what the AD engine learned from a callee's body follows later methods -----------------------

def test_a_method_added_later_that_writes_into_an_argument_reaches_a_caller_through_a_helper():
    """f passes its scratch array to a plain helper that calls a generic function. When a
    method that fills the array is added after the first gradient, the helper now writes into
    f's array: the gradient must follow (here: refuse, as a fresh process does), not keep the
    answer the first probe of the helper's body gave (it returned [2, 2.22, 2.89, 4] for a true
    gradient of [2, 2, 2, 2]). Same for a new gradient object."""
    @nr.generic
    def fill(buf: nr.Vector[nr.Float64], c: nr.Real):
        return 0.0

    def wrap(buf, c):
        return fill(buf, c)

    def f(x):
        buf = np.zeros(x.shape[0])
        k = wrap(buf, 1.0)
        s = 0.0
        for i in range(x.shape[0]):
            buf[i] = x[i] * x[i]
        k = wrap(buf, 2.0)
        for i in range(x.shape[0]):
            s += buf[i] * x[i]
        return s

    x = np.linspace(0.0, 1.0, 4)
    g = nr.grad(f)
    np.testing.assert_allclose(g(x), 3 * x ** 2)

    @fill.method
    def fill(buf: nr.Vector[nr.Float64], c: nr.Float64):
        for i in range(buf.shape[0]):
            buf[i] = c
        return 0.0

    def calls_f(x):
        return f(x)

    assert f(x) == 4.0
    for grad in (g, nr.grad(f), nr.grad(calls_f)):
        with pytest.raises(nr.UnsupportedSyntaxError, match="call of wrap writes into its array"):
            grad(x)


def test_a_method_added_later_that_returns_a_view_reaches_a_caller_through_a_helper():
    """As above, for a callee that starts returning a view of its argument: a write through the
    result then writes into the caller's array, which the gradient must not miss."""
    @nr.generic
    def pick(v: nr.Vector[nr.Real]):
        return v.copy()

    def wrap(v):
        return pick(v)

    def f(x):
        a = x * 1.0
        r = wrap(a)
        r[0] = 0.0
        return np.sum(a * x)

    x = np.linspace(0.5, 1.5, 3)
    g = nr.grad(f)
    np.testing.assert_allclose(g(x), 2 * x)

    @pick.method
    def pick(v: nr.Vector[nr.Float64]):
        return v[0:]

    def calls_f(x):
        return f(x)

    assert f(x) == pytest.approx(np.sum(x[1:] ** 2))
    for grad in (g, nr.grad(f), nr.grad(calls_f)):
        with pytest.raises(nr.UnsupportedSyntaxError, match="shares memory with the array"):
            grad(x)


def test_a_method_that_turns_an_undifferentiated_int_result_into_a_float_is_followed():
    """k = g(x) was an int (no tangent, the call not differentiated) when the first gradient
    was built; a method that makes it a float depending on x changes the primal's types, and the
    gradient must include the new term (it returned only x^2 cos x, missing 2x sin x), from the
    old object, a new one, value_and_grad, pullback, through a helper and inside nr.jit code."""
    @nr.generic
    def g(x: nr.Real):
        return 2

    def f(x):
        k = g(x)
        return k * math.sin(x)

    def through(x):
        return f(x)

    gf, gt = nr.grad(f), nr.grad(through)

    @nr.jit
    def in_jit(x):
        return gf(x)

    x = 0.7
    assert gf(x) == pytest.approx(2 * math.cos(x)) and gt(x) == pytest.approx(2 * math.cos(x))
    assert in_jit(x) == pytest.approx(2 * math.cos(x))

    @g.method
    def g(x: nr.Float64):
        return x * x

    want = 2 * x * math.sin(x) + x * x * math.cos(x)
    assert gf(x) == pytest.approx(want) and nr.grad(f)(x) == pytest.approx(want)
    assert gt(x) == pytest.approx(want) and in_jit(x) == pytest.approx(want)
    assert nr.value_and_grad(f)(x)[1] == pytest.approx(want)
    assert nr.pullback(f, x)[1](1.0)[0] == pytest.approx(want)


def test_a_method_that_turns_an_undifferentiated_float_into_an_array_is_followed():
    """The same for a call whose argument is not differentiated: after the method f returns an
    array; nr.grad refuses by name (it raised a raw Numba TypingError) and nr.pullback works, as
    in a fresh process."""
    @nr.generic
    def c(n: nr.Integer):
        return 2.0

    def f(x, n):
        return x * x * c(n)

    g = nr.grad(f)
    assert g(0.7, 3) == pytest.approx(2.8)

    @c.method
    def c(n: nr.Int64):
        return np.ones(2) * n

    for grad in (g, nr.grad(f)):
        with pytest.raises(nr.UnsupportedSyntaxError, match="need a scalar float result"):
            grad(0.7, 3)
    y, pb = nr.pullback(f, 0.7, 3)
    np.testing.assert_allclose(y, [1.47, 1.47])
    assert pb(np.ones(2))[0] == pytest.approx(8.4)


@nr.struct
class _Box:
    w: nr.Vector[nr.Float64]


def test_a_method_added_later_that_writes_into_a_structs_array_is_refused():
    @nr.generic
    def fill(b: nr.Any):
        return 0

    def f(x):
        a = x * 1.0
        b = _Box(a)
        k = fill(b)
        return np.sum(a * x)

    x = np.linspace(0.5, 1.5, 3)
    g = nr.grad(f)
    np.testing.assert_allclose(g(x), 2 * x)

    @fill.method
    def fill(b: _Box):
        w = b.w
        w[0] = 0.0
        return 0

    for grad in (g, nr.grad(f)):
        with pytest.raises(nr.UnsupportedSyntaxError, match="writes into its array argument 'b'"):
            grad(x)



def test_a_rule_added_later_reaches_a_mutually_recursive_caller_built_inside_the_cycle(
        make_module):
    # nr.grad(up) builds up's kernels and, inside that build, down's, whose call back into up
    # waits for up's kernels (kernels._bind_waiters). A rule of bend (called in up only) drops
    # up's kernels; until 2026-12-07 down's kept calling them: a gradient reached through down
    # kept the old derivative, silently (forward mode: tests/test_jvp.py)
    m = make_module("cycle_backedges", CYCLE_SOURCE)
    assert nr.grad(m.up)(0.7, 3) == pytest.approx(
        (m.up(0.7 + 1e-6, 3) - m.up(0.7 - 1e-6, 3)) / 2e-6, rel=1e-6)
    g = nr.grad(m.loss)
    assert g(0.6) == pytest.approx(loss_derivative(0.6), rel=1e-12)

    @nr.rrule(m.bend)
    def _(x: float):
        def pullback(dy):
            return (2.0 * math.cos(x) * dy,)      # deliberately twice the derivative
        return math.sin(x), pullback
    assert g(0.6) == pytest.approx(loss_derivative(0.6, scale=2.0), rel=1e-12)
