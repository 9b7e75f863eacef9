"""Rules attach to methods (API section 3): rrule, the rule rule, opt_out, non_differentiable,
scalar_rule, rule_for, their errors and their backedges."""
import math
import re

import numba
import numpy as np
import pytest

import numbarules as nr
from numbarules.testing import check_grad


def family():
    """my_sum with an AbstractMatrix method and a more specific Vector method... per test."""

    @nr.generic
    def my_sum(x: nr.AbstractMatrix):
        s = 0.0
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                s += x[i, j]
        return s

    @my_sum.method
    def my_sum(x: nr.Matrix[nr.Float32]):       # a more specific method
        s = 0.0
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                s += x[i, j] * x[i, j]
        return s

    return my_sum


def add_scaled_rule(my_sum, factor, sig=nr.AbstractMatrix):
    # A rule that is deliberately *not* the true gradient (factor != 1), so a test can tell
    # whether the rule or the derived gradient ran.
    @nr.rrule(my_sum, sig)
    def _(x):
        y = my_sum(x)
        m, n = x.shape
        k = factor

        def my_sum_pullback(dy):
            return (np.full((m, n), k * dy),)
        return y, my_sum_pullback


A = np.arange(6.0).reshape(2, 3)
A32 = np.arange(6.0, dtype=np.float32).reshape(2, 3)


def test_rule_applies_to_the_method_it_was_written_for_only():
    my_sum = family()
    add_scaled_rule(my_sum, 5.0)
    np.testing.assert_allclose(nr.grad(my_sum)(A), np.full((2, 3), 5.0))       # rule
    np.testing.assert_allclose(nr.grad(my_sum)(A32), 2 * A32, rtol=1e-6)       # its own method
    assert nr.rule_for(my_sum, A) is not None
    assert nr.rule_for(my_sum, A32) is None
    assert nr.rule_for(my_sum, nr.Matrix[nr.Float64]).kind == "rrule"


def test_rule_on_a_narrower_signature_than_the_method():
    my_sum = family()
    add_scaled_rule(my_sum, 7.0, nr.Matrix[nr.Float64])
    np.testing.assert_allclose(nr.grad(my_sum)(A), np.full((2, 3), 7.0))
    F = np.asfortranarray(A)
    np.testing.assert_allclose(nr.grad(my_sum)(F), np.full((2, 3), 7.0))       # any layout
    B = A[:, ::2]
    np.testing.assert_allclose(nr.grad(my_sum)(B), np.full(B.shape, 7.0))


def test_rules_inside_differentiated_callers():
    my_sum = family()
    add_scaled_rule(my_sum, 3.0)

    def caller(A, B):
        return 2.0 * my_sum(A) + my_sum(B)
    ga, gb = nr.grad(caller, argnums=(0, 1))(A, A32)
    np.testing.assert_allclose(ga, np.full((2, 3), 6.0))
    np.testing.assert_allclose(gb, 2 * A32, rtol=1e-6)


def test_pullback_returning_none_for_some_arguments():
    @nr.generic
    def power(x: nr.Float64, n: nr.Int64):
        r = 1.0
        for _ in range(n):
            r *= x
        return r

    @nr.rrule(power)
    def _(x: nr.Float64, n: nr.Int64):
        y = power(x, n)

        def pb(dy):
            return (dy * n * x ** (n - 1), None)
        return y, pb

    assert nr.grad(power)(2.0, 3) == pytest.approx(12.0)
    gx, gn = nr.grad(power, argnums=(0, 1))(2.0, 3)
    assert gx == pytest.approx(12.0) and gn is None

    def uses(x):
        return power(x, 4) + x
    check_grad(uses, 1.3)


def test_rules_on_plain_njit_and_builtin_functions():
    def helper(x):
        return x * x

    @nr.rrule(helper, nr.Float64)
    def _(x):
        def pb(dy):
            return (10.0 * dy,)
        return helper(x), pb

    @numba.njit
    def jitted(x):
        return 2.0 * x

    @nr.rrule(jitted, nr.Float64)
    def _(x):
        def pb(dy):
            return (20.0 * dy,)
        return jitted(x), pb

    @nr.scalar_rule(math.gamma)
    def _(x):
        return (math.gamma(x) * 0.0 + 30.0,)

    def f(x):
        return helper(x) + jitted(x) + math.gamma(x)
    assert nr.grad(f)(1.5) == pytest.approx(60.0)
    assert nr.rule_for(math.gamma, 1.5).kind == "scalar"


def test_opt_out_differentiates_the_method_instead():
    my_sum = family()
    add_scaled_rule(my_sum, 5.0)
    g = nr.grad(my_sum)
    np.testing.assert_allclose(g(A), np.full((2, 3), 5.0))
    nr.opt_out(my_sum, nr.Matrix[nr.Float64])
    np.testing.assert_allclose(g(A), np.ones((2, 3)))                          # same object
    assert nr.rule_for(my_sum, A) is None
    np.testing.assert_allclose(g(A.astype(np.int64).astype(np.float64)), np.ones((2, 3)))


def test_non_differentiable_gives_zero_tangents_without_entering_the_body():
    def untreated(x):
        return math.lgamma(x) + x        # lgamma has no rule: differentiating would fail

    def f(x):
        return untreated(x) + x * x
    with pytest.raises(nr.DifferentiationError, match="lgamma"):
        nr.grad(f)(1.5)
    nr.non_differentiable(untreated, nr.Float64)
    assert nr.grad(f)(1.5) == pytest.approx(3.0)


def test_scalar_rule_with_types_on_a_generic_function():
    @nr.generic
    def softplus(x: nr.Real):
        return math.log1p(math.exp(x))

    @nr.scalar_rule(softplus, nr.Float64, uses_result=True)
    def _(x, y):
        return (1.0 - math.exp(-y) + 100.0,)     # +100: tells the rule ran

    assert nr.grad(softplus)(0.3) == pytest.approx(1.0 / (1.0 + math.exp(-0.3)) + 100.0)


def test_scalar_partials_are_written_into_the_kernel_where_that_means_the_same():
    # sin's partial is an expression with no division: written at the call; log's is 1 / x,
    # which in a kernel with Python's error model would raise at 0: the compiled call stays
    def f(x):
        return math.sin(x) * math.log(x)

    code = nr.code(f, 1.3, kind="pullback")
    assert "math.cos(x)" in code and "_partials_sin" not in code
    assert "_partials_log(" in code
    check_grad(f, 1.3)

    @nr.generic
    def soft(x: nr.Real):
        return math.log1p(math.exp(x))

    @nr.scalar_rule(soft, nr.Float64, uses_result=True)
    def _(x, y):
        return (1.0 - math.exp(-y) + 100.0,)     # +100: tells the rule ran

    def g(x):
        return soft(x) * 2.0

    assert "math.exp(-" in nr.code(nr.grad(g), 0.3, kind="vjp")
    assert nr.grad(g)(0.3) == pytest.approx(2.0 / (1.0 + math.exp(-0.3)) + 200.0)

    @nr.generic
    def inv(x: nr.Real):
        return 1.0 / x if x != 0.0 else math.inf

    @nr.scalar_rule(inv, nr.Float64)
    def _(x):
        return (-1.0 / (x * x),)

    def h(x):
        return inv(x)

    assert nr.grad(h)(0.0) == -math.inf       # NumPy's error model, as JAX: no ZeroDivisionError


def test_a_scalar_rule_whose_file_changed_is_not_written_from_the_new_text(tmp_path, monkeypatch):
    mod = tmp_path / "nr_edited_rule.py"
    mod.write_text("import math\nimport numbarules as nr\n\n"
                   "def cube(x):\n    return x * x * x\n\n"
                   "@nr.scalar_rule(cube)\ndef _(x):\n    return (3.0 * x * x,)\n\n"
                   "def f(x):\n    return cube(x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    m = importlib.import_module("nr_edited_rule")
    mod.write_text(mod.read_text().replace("3.0 * x * x", "5.0 * x * x"))
    # the kernel runs the rule the process loaded, never the text now on disk
    assert nr.grad(m.f)(2.0) == pytest.approx(12.0)


def test_a_rule_added_after_the_first_gradient_is_picked_up_precisely():
    my_sum = family()

    def model(A):
        return my_sum(A) * 2.0

    def unrelated(x):
        return x * 3.0

    g, u = nr.grad(model), nr.grad(unrelated)
    np.testing.assert_allclose(g(A), np.full((2, 3), 2.0))
    assert u(1.0) == 3.0
    before = nr.cache_info(u)["compiles"]
    add_scaled_rule(my_sum, 4.0)
    np.testing.assert_allclose(g(A), np.full((2, 3), 8.0))
    assert u(1.0) == 3.0
    assert nr.cache_info(u)["compiles"] == before


def test_a_new_more_specific_method_stops_the_rule_for_its_types():
    my_sum = family()
    add_scaled_rule(my_sum, 5.0)
    g = nr.grad(my_sum)
    np.testing.assert_allclose(g(A), np.full((2, 3), 5.0))

    @my_sum.method
    def my_sum(x: nr.Matrix[nr.Float64]):
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i, 0]
        return s
    expected = np.zeros((2, 3))
    expected[:, 0] = 1.0
    np.testing.assert_allclose(g(A), expected)
    assert nr.rule_for(my_sum, A) is None


# --- errors ------------------------------------------------------------------------------------

def test_rule_errors_name_the_rule():
    my_sum = family()

    @nr.rrule(my_sum, nr.AbstractMatrix)
    def too_many(x):
        def pb(dy):
            return (x, x)
        return my_sum(x), pb
    with pytest.raises(nr.RuleError, match=r"(?s)test_rules.py.*must return a tuple of 1 tangent"):
        nr.grad(my_sum)(A)

    @nr.rrule(my_sum, nr.AbstractMatrix)
    def wrong_kind(x):
        def pb(dy):
            return (dy,)
        return my_sum(x), pb
    with pytest.raises(nr.RuleError, match="tangent 0 is float64, but argument 0 is array"):
        nr.grad(my_sum)(A)

    @nr.rrule(my_sum, nr.AbstractMatrix)
    def no_pair(x):
        return my_sum(x)
    with pytest.raises(nr.RuleError, match=r"must end with `return y, pullback`"):
        nr.grad(my_sum)(A)

    def outside(dy):
        return (dy,)

    @nr.rrule(my_sum, nr.AbstractMatrix)
    def not_nested(x):
        return my_sum(x), outside
    with pytest.raises(nr.RuleError, match="must be a function defined inside the rule"):
        nr.grad(my_sum)(A)


def test_a_rule_no_method_accepts_is_refused_at_definition():
    my_sum = family()
    with pytest.raises(nr.RuleError, match="no single method of my_sum accepts"):
        @nr.rrule(my_sum, nr.Vector[nr.Float64])
        def _(x):
            def pb(dy):
                return (x,)
            return 0.0, pb


def test_ambiguous_rules_are_an_error():
    @nr.generic
    def f(x: nr.Real, y: nr.Real):
        return x * y

    def mk(sig):
        @nr.rrule(f, *sig)
        def _(x, y):
            def pb(dy):
                return (dy, dy)
            return f(x, y), pb
    mk((nr.Float64, nr.Real))
    mk((nr.Real, nr.Float64))
    with pytest.raises(nr.RuleError, match="ambiguous"):
        nr.grad(f)(1.0, 2.0)


def test_check_rrule_passes_a_correct_rule_and_catches_wrong_ones():
    my_sum = family()
    add_scaled_rule(my_sum, 1.0)
    report = nr.testing.check_rrule(my_sum, A)
    assert set(report) == {0}
    with pytest.raises(AssertionError, match="no rule applies"):
        nr.testing.check_rrule(my_sum, A32)          # the Float32 method is derived
    add_scaled_rule(my_sum, 2.0)                     # replaces it: now wrong by a factor 2
    with pytest.raises(AssertionError, match="disagrees with central finite differences"):
        nr.testing.check_rrule(my_sum, A)


def test_explain_shows_method_and_how_each_call_is_differentiated():
    my_sum = family()
    add_scaled_rule(my_sum, 1.0)

    @nr.generic
    def act(x: nr.Real):
        return math.tanh(x)

    def untreated(x):
        return math.lgamma(x)
    nr.non_differentiable(untreated, nr.Float64)

    def loss(A, B, x):
        return my_sum(A) + my_sum(B) + act(x) + untreated(x)

    text = str(nr.explain(loss, A, A32, 0.5))
    lines = text.splitlines()
    assert lines[0].startswith("loss(::Matrix[Float64], ::Matrix[Float32], ::Float64)  [derived]")
    assert "my_sum(::Matrix[Float64]) -> my_sum(x::AbstractMatrix)  [rule]  (rrule at" in text
    assert "my_sum(::Matrix[Float32]) -> my_sum(x::Matrix[Float32])  [derived]" in text
    assert "act(::Float64) -> act(x::Real)  [derived]" in text
    assert "math.tanh(::Float64)  [rule]" in text
    assert "untreated(::Float64)  [non-differentiable]" in text
    nr.opt_out(my_sum, nr.AbstractMatrix)
    assert "[opted out]" in str(nr.explain(loss, A, A32, 0.5))


def test_a_rule_tangent_of_the_wrong_shape_is_an_error_not_a_broadcast():
    my_sum = family()

    @nr.rrule(my_sum, nr.AbstractMatrix)
    def _(x):
        n = x.shape[1]

        def pb(dy):
            return (np.full((1, n), dy),)      # broadcastable, but the wrong shape
        return my_sum(x), pb

    def caller(A):
        return my_sum(A) * 2.0
    with pytest.raises(nr.TangentShapeError, match=r"tangent 0 has another shape than the argument: shape \(1, 3\), expected \(2, 3\)"):
        nr.grad(caller)(A)


def test_rules_for_numpy_functions():
    @nr.rrule(np.sum, nr.Vector[nr.Float64])
    def _(x):
        n = x.shape[0]

        def pb(dy):
            return (np.full(n, dy),)
        return np.sum(x), pb

    def f(x):
        return np.sum(x) * 3.0
    np.testing.assert_allclose(nr.grad(f)(np.arange(3.0)), np.full(3, 3.0))


def test_rule_added_later_reaches_gradients_compiled_into_nr_jit_code():
    my_sum = family()
    g = nr.grad(my_sum)

    @nr.jit
    def step(A):
        return A - 0.5 * g(A)
    np.testing.assert_allclose(step(A), A - 0.5)
    add_scaled_rule(my_sum, 4.0)
    np.testing.assert_allclose(step(A), A - 2.0)


def test_top_level_rule_keeps_its_residuals_and_its_value():
    # A top-level call keeps the rule's residuals: its forward runs once, and its value is the
    # one the gradient reports (ChainRules semantics). A rule whose forward returns another type
    # than the primal call is checkpointed instead; in a loop, always.
    def shifted(x):
        return np.sum(x * x)

    @nr.rrule(shifted, nr.Vector[nr.Float64])
    def _(x):
        y = np.sum(x * x) + 1.0          # deliberately not the primal value

        def pb(dy):
            return (2.0 * x * dy,)
        return y, pb

    def top(x):
        return shifted(x) * 3.0

    def in_loop(x):
        s = 0.0
        for k in range(2):
            s += shifted(x)
        return s

    x = np.array([1.0, 2.0, -0.5])
    fwd = nr.code(top, x)
    assert "fwd_" in fwd and "_rr" in fwd, fwd
    pullback = nr.code(top, x, kind="pullback")
    assert re.search(r"bwd_\w+\(_rr\d+, ", pullback) and "fwd_" not in pullback, pullback
    v, g = nr.value_and_grad(top)(x)
    assert v == pytest.approx((np.sum(x * x) + 1.0) * 3.0)
    np.testing.assert_allclose(g, 6.0 * x)
    assert "_rr" not in nr.code(in_loop, x)
    np.testing.assert_allclose(nr.grad(in_loop)(x), 4.0 * x)

    def as_int(x):
        return 1

    @nr.rrule(as_int, nr.Float64)
    def _(x):
        def pb(dy):
            return (0.0,)
        return 1.0, pb                    # a float where the primal gives an int

    def uses_int(x):
        n = as_int(x)
        return x * n
    assert "_rr" not in nr.code(uses_int, 2.0)
    assert nr.grad(uses_int)(2.0) == pytest.approx(1.0)
