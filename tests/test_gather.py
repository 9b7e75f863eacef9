"""The reverse of stencil loop nests written as a gather (ad/gather.py): when it applies, what it
computes (the scatter's gradient, finite differences), and its run-time fallback."""

import contextlib

import numba
import numpy as np
import pytest

import numbarules as nr
from numbarules.ad import gather, runtime
from numbarules.testing import check_grad
from perf.bench_sim import rd_swap as rd      # the 2-D reaction-diffusion step, two buffers


def smooth1(x, c):
    n = x.shape[0]
    y = np.zeros_like(x)
    for i in range(1, n - 1):
        y[i] = c * x[i - 1] - 2.0 * x[i] * x[i] + x[i + 1]
    s = 0.0
    for i in range(n):
        s += y[i] * y[i]
    return s


def one_sided(x, w):
    # offsets 1 and 2 only, two written arrays (x and w), a scalar summed in the nest
    n = x.shape[0]
    m = x.shape[1]
    y = np.zeros((n, m))
    for i in range(n - 2):
        for j in range(m - 1):
            y[i, j] = x[i + 2, j + 1] * w[i + 1, j] + math_sin(x[i + 1, j])
    return np.sum(y * y)


def math_sin(a):
    return np.sin(a)


def wraps(x):
    # x[i - 1] at i = 0 reads x[-1]: Python's wraparound, which the gather must not change
    n = x.shape[0]
    y = np.zeros_like(x)
    for i in range(n):
        y[i] = x[i - 1] * x[i]
    return np.sum(y * y)


def carried(x):
    # a value carried from one iteration to the next: not a gather
    n = x.shape[0]
    y = np.zeros_like(x)
    a = 0.0
    for i in range(1, n):
        a = a * 0.5 + x[i - 1]
        y[i] = a * x[i]
    return np.sum(y)


def used_twice(x):
    # t and u are read several times in an iteration: their adjoints are summed there (d_t +=)
    n = x.shape[0]
    s = 0.0
    for i in range(n - 1):
        t = x[i]
        u = x[i + 1] - t * t
        s += t * x[i + 1] + u * u * t
    return s


def smooth_twice(x, c):
    # the same in a stencil written into an array (the two-kernel reverse)
    n = x.shape[0]
    y = np.zeros_like(x)
    for i in range(1, n - 1):
        t = x[i]
        y[i] = c * x[i - 1] * t - 2.0 * t * t + x[i + 1] * t
    s = 0.0
    for i in range(n):
        s += y[i] * y[i]
    return s


def lopsided(x, c):
    # a 2-D nest with offsets -1..0 along i and -1..+2 along j: the gather's interior (no
    # guard) and the ring around it (guarded) differ in each dimension
    n = x.shape[0]
    m = x.shape[1]
    y = np.zeros((n, m))
    for i in range(1, n):
        for j in range(1, m - 2):
            y[i, j] = x[i - 1, j] * x[i, j + 2] + c * x[i, j - 1] * x[i, j]
    return np.sum(y * y)


@contextlib.contextmanager
def _gather(flag):
    """The gather rewrite on or off inside the block, every kernel compiled afresh."""
    before = gather.GATHER
    gather.GATHER = flag
    nr.clear_cache()
    try:
        yield
    finally:
        gather.GATHER = before
        nr.clear_cache()


def _both(f, args, argnums, kind="pullback"):
    """The gradient with the gather rewrite and without it (the scatter), and the code of
    ``kind`` with it."""
    with _gather(True):
        on = nr.grad(f, argnums=argnums)(*args)
        code = nr.code(nr.grad(f, argnums=argnums), *args, kind=kind)
    with _gather(False):
        off = nr.grad(f, argnums=argnums)(*args)
    return on, off, code


def _close(a, b):
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)


def test_a_one_dimensional_stencil_is_gathered_and_matches_the_scatter():
    x = np.random.default_rng(0).standard_normal(9)
    on, off, code = _both(smooth1, (x, 0.7), 0)
    assert "as a gather" in code
    _close(on, off)
    check_grad(smooth1, x, 0.7)


@pytest.mark.parametrize("f, args, kind", [(used_twice, (), "driver"),
                                           (smooth_twice, (0.7,), "pullback")])
def test_an_adjoint_summed_within_an_iteration_is_gathered(f, args, kind):
    # d_t += ...; d_t += ...; read; d_t = -0.0 each iteration: a version per sum (_versions),
    # and the gather runs where d_t is zero when the loop begins (until 2026-12-07: the scatter)
    x = np.random.default_rng(8).standard_normal(11)
    on, off, code = _both(f, (x, *args), 0, kind)
    assert "as a gather" in code and "_v1_0 = " in code and "d_t == 0.0" in code
    _close(on, off)
    check_grad(f, x, *args)
    for n in (1, 2, 3):            # the loop empty or short: the scatter, or a gather at the ends
        on, off, _ = _both(f, (x[:n].copy(), *args), 0, kind)
        _close(on, off)


def test_a_one_dimensional_loop_summing_a_scalar_keeps_the_scatter():
    # d_c summed in a single loop: lanes did not pay for the extra passes (ad/gather.py)
    x = np.random.default_rng(0).standard_normal(9)
    on, off, code = _both(smooth1, (x, 0.7), (0, 1))
    assert "as a gather" not in code
    _close(on, off)
    check_grad(smooth1, x, 0.7, argnums=(0, 1))


def test_a_two_dimensional_time_stepped_stencil_sums_its_scalar_in_lanes():
    u0 = np.random.default_rng(1).random((7, 7))
    on, off, code = _both(rd, (u0, 0.1, 3), (0, 1))
    assert "as a gather" in code and "_l" in code
    _close(on, off)
    check_grad(rd, u0, 0.1, 3, argnums=(0, 1))


def test_one_sided_offsets_two_written_arrays_and_a_call():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((6, 5)), rng.standard_normal((6, 5))
    on, off, code = _both(one_sided, (x, w), (0, 1))
    _close(on, off)
    check_grad(one_sided, x, w, argnums=(0, 1))


@pytest.mark.parametrize("f", [wraps, carried])
def test_what_is_not_gathered_keeps_the_scatter(f):
    x = np.random.default_rng(3).standard_normal(6)
    on, off, code = _both(f, (x,), 0)
    assert "as a gather" not in code
    _close(on, off)
    check_grad(f, x)


def test_empty_and_tiny_trip_counts():
    # n = 2 and 1: the stencil loop runs zero times; the guard sends the nest to the scatter
    for n in (1, 2, 3):
        x = np.arange(1.0, n + 1.0)
        on, off, _ = _both(smooth1, (x, 0.3), (0, 1))
        _close(on, off)
    for shape in ((2, 2), (3, 3), (4, 4)):
        u0 = np.random.default_rng(4).random(shape)
        on, off, _ = _both(rd, (u0, 0.2, 2), (0, 1))
        _close(on, off)


def test_a_two_dimensional_gather_runs_its_interior_unguarded():
    # The elements every offset's term reaches run in a nest of their own with no guard,
    # counted from 0 (so that Numba's wraparound folds and the loop vectorises); the ring
    # around them guarded. Shapes where the interior is empty, one row or column wide, or
    # differs from the ring in one dimension only.
    rng = np.random.default_rng(8)
    for shape in ((2, 4), (3, 4), (3, 5), (4, 4), (5, 9), (9, 5), (6, 12)):
        x = rng.standard_normal(shape)
        on, off, code = _both(lopsided, (x, 0.6), (0, 1))
        assert "as a gather" in code and "no guard, so it vectorises" in code
        _close(on, off)
    check_grad(lopsided, rng.standard_normal((6, 7)), 0.6, argnums=(0, 1))
    for n in (5, 6, 9):         # (rd's loops run over a square grid)
        u0 = rng.random((n, n))
        on, off, _ = _both(rd, (u0, 0.2, 3), (0, 1))
        _close(on, off)


def test_the_fallback_runs_where_arrays_may_overlap(monkeypatch):
    # _apart answering "they overlap" everywhere: every nest runs the scatter kept beside it
    monkeypatch.setitem(runtime.HELPERS, "_apart", numba.njit(lambda a, b: False))
    u0 = np.random.default_rng(5).random((6, 6))
    on, off, code = _both(rd, (u0, 0.1, 3), (0, 1))
    assert "as a gather" in code
    _close(on, off)


def test_apart():
    f = numba.njit(lambda a, b: runtime._apart(a, b))
    x = np.zeros((10, 10))
    cases = [(x, np.zeros(5), True), (x, x, False), (x[:5], x[5:], True), (x[:6], x[5:], False),
             (x[::-1], x[3], False), (x[0], x[1], True), (x[::-1][:3], x[8:], False),
             (x[::-1][:2], x[:8], True), (x[:0], x, True), (x.T, x[9, 9:], False),
             (x[:, 0], x[:, 1], False)]        # interleaved columns: spans overlap (conservative)
    for a, b, want in cases:
        assert f(a, b) == want, (a.shape, b.shape)
        assert f(b, a) == want
        if want:
            assert not np.shares_memory(a, b)


def test_vectorised_gather_matches_at_level_3(optimised):
    u0 = np.random.default_rng(6).random((9, 9))
    on, off, _ = _both(rd, (u0, 0.15, 4), (0, 1))
    _close(on, off)


def _vector_ops(g, *args):
    """Vector operations on doubles in the optimised LLVM IR of gradient object ``g``."""
    import re
    g(*args)
    (disp, _), = [v for k, v in g._drivers.items() if k[1]]
    return sum(len(re.findall(r"<\d+ x double>", disp.inspect_llvm(sig)))
               for sig in disp.signatures)


def test_the_gathered_reverse_vectorises(optimised):
    # Rosenbrock's reverse scatters g[i] and g[i + 1]: LLVM leaves the scatter scalar and
    # vectorises the gather (docs/ad-engine.md)
    from perf._workloads_ad import rosenbrock
    x = np.linspace(-1.0, 1.0, 50)
    counts = {}
    for flag in (False, True):
        with _gather(flag):
            counts[flag] = _vector_ops(nr.value_and_grad(rosenbrock), x)
    assert counts[False] == 0 and counts[True] > 0, counts


def test_hvp_gathers_its_reverse_and_computes_no_value(optimised):
    # The reverse of the tangent kernel reads each primal value twice (d_t += ...; d_t += ...):
    # gathered since 2026-12-07. The gradient of the directional derivative compiles a kernel
    # of its own that returns the gradient alone, so LLVM drops the forward sums nothing reads
    # (Rosenbrock at n = 10^6: 3.4 -> 1.3-1.6 ms, under JAX's; README, perf/bench_higher.py)
    from perf._workloads_ad import rosenbrock
    x = np.random.default_rng(3).uniform(-1.5, 1.5, 40)
    v = np.random.default_rng(4).uniform(-1.0, 1.0, 40)
    hvp = nr.hvp(rosenbrock)
    got, counts = {}, {}
    for flag in (False, True):
        with _gather(flag):
            got[flag] = hvp(x, v)
            grad, args = hvp.gradient((x, v))
            counts[flag] = _vector_ops(grad, *args)
            (disp, _), = [d for key, d in grad._drivers.items() if key[1]]
            # gathered, the forward loop runs for the value alone: a kernel of grad's own
            # (Kernels.value_loop); else value_and_grad's, which computes what the reverse reads
            assert disp.py_func.__name__.startswith("grad_" if flag else "value_and_grad_")
            assert ("as a gather" in nr.code(hvp, x, v, kind="driver")) == flag
    np.testing.assert_allclose(got[True], got[False], rtol=1e-12, atol=1e-9)
    vg = nr.value_and_grad(rosenbrock)
    h = 1e-6
    want = (vg(x + h * v)[1] - vg(x - h * v)[1]) / (2 * h)
    np.testing.assert_allclose(got[True], want, rtol=1e-6, atol=1e-6)
    assert counts[True] > counts[False], counts


def test_a_strided_argument_keeps_the_scatter():
    # layout A: LLVM would not vectorise the gather (strides known at run time only)
    x = np.random.default_rng(7).standard_normal(17)[::2]
    on, off, code = _both(smooth1, (x, 0.7), 0)
    assert "as a gather" not in code
    _close(on, off)
    check_grad(smooth1, x, 0.7)
