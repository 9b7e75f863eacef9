"""The engine's kernels compiled at LLVM level 3, Numba's default: the code users run.

The rest of the in-process suite compiles at level 0 (tests/conftest.py: LLVM's optimisation is
half of every compile). Optimisation must not change what generated code computes, but code with
undefined behaviour (a tape slot read before it is written, an alias LLVM may assume away, an
intrinsic with a wrong attribute) tends to compute the right thing at level 0 and something else
at level 3. So the benchmark workloads, time-stepping simulations (taped and checkpointed: the
tape and snapshot intrinsics) and a stream of random programs are compiled here at level 3 and
checked against hand-written adjoints and central finite differences.

Each function is a fresh copy (``_fresh``): the suite may already hold level-0 kernels of the
original, which a call would reuse.
"""
import math
import types

import numba
import numba.core.config as numba_config
import numpy as np
import pytest

import numbarules as nr
from numbarules import fuzz
from perf import bench_sim
from perf._workloads_ad import WORKLOADS, central_differences, grads_as_tuple
from perf.bench_arrays import lse_rows, lse_rows_adjoint, mlp, mlp_adjoint


def _fresh(f):
    """A new function object with ``f``'s code: specializations of its own, compiled now."""
    return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__,
                              f.__closure__)


def _close(a, b, rtol=1e-9):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and np.allclose(a, b, rtol=rtol, atol=rtol * max(1.0, np.abs(b).max()))


def test_the_fixture_compiles_at_level_3(optimised):
    assert int(numba_config.OPT) == 3

    def twice(x):
        return 2.0 * x

    nr.compile_stats(reset=True)
    assert nr.grad(twice)(1.5) == 2.0
    assert nr.compile_stats().kernels, "the gradient compiled nothing inside the fixture"
    # (tests/test_vmath.py::test_loops_are_vectorized fails without the fixture: level 3 is what
    # vectorises its loops)


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda w: w.name)
def test_benchmark_workloads_match_their_hand_written_adjoints(w, optimised):
    args = w.make_args(w.check_size, np.random.default_rng(3))
    value, grads = grads_as_tuple(w, nr.value_and_grad(_fresh(w.primal), argnums=w.argnums)(*args))
    v_ref, g_ref = grads_as_tuple(w, w.adjoint(*args))
    assert math.isclose(value, v_ref, rel_tol=1e-12)
    for g, r in zip(grads, g_ref):
        assert _close(g, r, 1e-10), (g, r)


def test_array_workloads_match_their_hand_written_adjoints(optimised):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((6, 5))
    value, g = nr.value_and_grad(_fresh(lse_rows))(X)
    v_ref, g_ref = lse_rows_adjoint(X)
    assert math.isclose(value, v_ref, rel_tol=1e-12) and _close(g, g_ref, 1e-12)
    W1, W2 = 0.3 * rng.standard_normal((5, 4)), 0.3 * rng.standard_normal((4, 3))
    value, (d1, d2) = nr.value_and_grad(_fresh(mlp), argnums=(1, 2))(X, W1, W2)
    v_ref, (r1, r2) = mlp_adjoint(X, W1, W2)
    assert math.isclose(value, v_ref, rel_tol=1e-12) and _close(d1, r1) and _close(d2, r2)


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda w: w.name)
def test_fastmath_gradients_match_the_hand_written_adjoints(w, optimised):
    # fastmath=True's kernels as users run them: reassociated sums that LLVM splits into vector
    # lanes, vmath's exp and tanh inlined, saves stored one iteration ahead
    args = w.make_args(w.check_size, np.random.default_rng(13))
    g = nr.value_and_grad(_fresh(w.primal), argnums=w.argnums, fastmath=True)
    value, grads = grads_as_tuple(w, g(*args))
    v_ref, g_ref = grads_as_tuple(w, w.adjoint(*args))
    assert math.isclose(value, v_ref, rel_tol=1e-10)
    for a, r in zip(grads, g_ref):
        assert _close(a, r, 1e-9), (a, r)


def test_fastmath_logsumexp_vectorises_and_matches(optimised):
    # odd sizes: the vector loops' remainders run too
    X = np.random.default_rng(14).standard_normal((7, 37))
    fast = nr.value_and_grad(_fresh(lse_rows), fastmath=True)
    value, g = fast(X)
    v_ref, g_ref = lse_rows_adjoint(X)
    assert math.isclose(value, v_ref, rel_tol=1e-12) and _close(g, g_ref, 1e-10)
    rng = np.random.default_rng(15)
    Xm, W1, W2 = rng.standard_normal((9, 5)), 0.3 * rng.standard_normal((5, 7)), \
        0.3 * rng.standard_normal((7, 3))
    value, (d1, d2) = nr.value_and_grad(_fresh(mlp), argnums=(1, 2), fastmath=True)(Xm, W1, W2)
    v_ref, (r1, r2) = mlp_adjoint(Xm, W1, W2)
    assert math.isclose(value, v_ref, rel_tol=1e-10) and _close(d1, r1, 1e-9) \
        and _close(d2, r2, 1e-9)

    def vector_ops(g):
        import re
        (disp, _), = [v for k, v in g._drivers.items() if k[1]]
        return sum(len(re.findall(r"<\d+ x double>", disp.inspect_llvm(sig)))
                   for sig in disp.signatures)

    plain = nr.value_and_grad(_fresh(lse_rows))
    plain(X)
    assert vector_ops(fast) > vector_ops(plain), (vector_ops(fast), vector_ops(plain))


@pytest.mark.parametrize("name", ["rd_swap", "nbody", "wave"])
def test_simulations_taped_and_checkpointed(name, optimised):
    f = getattr(bench_sim, name)
    rng = np.random.default_rng(5)
    if name == "rd_swap":
        args = (rng.uniform(0.2, 0.8, (6, 6)), 0.1, 7)
    elif name == "nbody":
        args = (rng.standard_normal((4, 3)), 0.1 * rng.standard_normal((4, 3)), 0.01, 9)
    else:
        args = (np.sin(np.linspace(0.0, np.pi, 12)), 0.25, 11)
    taped = nr.grad(_fresh(f), argnums=(0, 1))(*args)
    checkpointed = nr.grad(bench_sim.checkpointed(f), argnums=(0, 1))(*args, 3)
    primal = numba.njit(f)
    for i in (0, 1):
        scalar = np.ndim(args[i]) == 0

        def at(x, i=i, scalar=scalar):      # the primal with argument i replaced by x
            return primal(*args[:i], x[0] if scalar else x, *args[i + 1:])

        fd = central_differences(at, [np.atleast_1d(np.asarray(args[i], dtype=float))], 0)
        assert _close(np.reshape(taped[i], fd.shape), fd, 1e-6), (i, taped[i], fd)
        assert _close(checkpointed[i], taped[i], 1e-12)


def test_random_programs_at_level_3():
    # worker processes with NUMBA_OPT=3 (the fixture is this process's): another slice of the
    # stream tests/test_fuzz.py checks at level 0
    s = fuzz.run(n=10, seed=20261205, timeout=300.0, opt=3, jobs=2)
    assert len(s.results) == 10 and not s.failures, s.report()
    assert s.invalid == 0 and sum(r.checked_coordinates for r in s.results) >= 50, s.table()
