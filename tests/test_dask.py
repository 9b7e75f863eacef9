"""nr.dask and numbarules objects in Dask workers (issue 18, API.md 4c): a LocalCluster of two
worker processes on this machine.

This module's functions travel to the workers by value (``cloudpickle.register_pickle_by_value``),
as a notebook's do: the workers cannot import it. Every result is compared with the same gradient
computed here, in the client, which the rest of the suite checks against finite differences; the
pendulum's gradient is also checked against central differences here.
"""

import math
import sys

import cloudpickle
import numpy as np
import pytest
from distributed import Client, LocalCluster

import numbarules as nr


def pendulum(p, state0, dt, nsteps):
    """Explicit Euler for a damped pendulum; the loss is the mean squared angle."""
    th, om = state0[0], state0[1]
    g, length, c = p[0], p[1], p[2]
    loss = 0.0
    for _ in range(nsteps):
        a = -(g / length) * math.sin(th) - c * om
        th, om = th + dt * om, om + dt * a
        loss += th * th
    return loss * dt


@nr.generic
def shape_energy(x: nr.Vector[nr.Float64], k: float):
    return k * np.sum(x * x * x)


@nr.generic
def soft(x: float):
    return math.sin(x)


@nr.rrule(soft)
def _(x: float):
    def soft_pullback(dy):
        return (3.0 * dy * math.cos(x),)      # not sin's derivative: shows the rule travelled
    return math.sin(x), soft_pullback


def with_rule(x, k):
    return shape_energy(x, k) + soft(x[0])


@nr.struct
class Spring(nr.Any):
    k: float
    x0: nr.Vector[nr.Float64]


def spring_energy(s, x):
    return s.k * np.sum((x - s.x0) ** 2)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """Two single-threaded worker processes sharing a fresh disk cache with this process."""
    cache_dir = str(tmp_path_factory.mktemp("nrcache"))
    mp = pytest.MonkeyPatch()
    mp.setenv("NUMBARULES_CACHE", "1")
    mp.setenv("NUMBARULES_CACHE_DIR", cache_dir)
    # Optimised code in this process and the workers alike (the disk cache keys on the level):
    # at NUMBA_OPT=0 (the suite's level, conftest.py) some kernels keep addresses of this
    # process in their code, and such a kernel is never stored.
    from numba.core import config
    mp.setattr(config, "OPT", config._OptLevel(3))
    mp.setenv("NUMBA_OPT", "3")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=40)
    c = Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        mp.undo()


def _params(n, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 2.0, size=(n, 3))


def test_map_grad_gives_the_gradients_computed_here(client):
    ps, s0 = _params(12), np.array([1.0, 0.0])
    mg = nr.dask.map_grad(pendulum, over=0)
    out = mg(ps, s0, 1e-2, 300, npartitions=5).compute()
    here = [nr.grad(pendulum)(p, s0, 1e-2, 300) for p in ps]
    assert len(out) == 12
    for a, b in zip(out, here):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=0)
    # and the gradient itself, against central differences at one point
    h, p = 1e-6, ps[3]
    fd = [(pendulum(p + h * e, s0, 1e-2, 300) - pendulum(p - h * e, s0, 1e-2, 300)) / (2 * h)
          for e in np.eye(3)]
    np.testing.assert_allclose(out[3], fd, rtol=1e-6)

    values = nr.dask.map_grad(pendulum, over=0, value=True)(ps, s0, 1e-2, 300).compute()
    assert [v for v, _ in values] == pytest.approx([pendulum(p, s0, 1e-2, 300) for p in ps],
                                                   rel=1e-13)
    total = mg(ps, s0, 1e-2, 300, reduce="sum").compute()
    mean = mg(ps, s0, 1e-2, 300, reduce="mean").compute()
    np.testing.assert_allclose(total, np.sum(here, axis=0), rtol=1e-12)
    np.testing.assert_allclose(mean, np.mean(here, axis=0), rtol=1e-12)


def test_compute_takes_futures_and_gives_the_bags_results(client, monkeypatch):
    ps, s0 = _params(11, seed=2), np.array([1.0, 0.0])
    mg = nr.dask.map_grad(pendulum, over=0, value=True)
    bag = mg(ps, s0, 1e-2, 250).compute()
    for npartitions in (None, 1, 3, 11, 40):
        out = mg.compute(ps, s0, 1e-2, 250, npartitions=npartitions)
        assert len(out) == 11
        for (v, g), (v2, g2) in zip(out, bag):
            assert v == v2
            np.testing.assert_array_equal(g, g2)
    g = nr.dask.map_grad(pendulum, over=0)
    here = [nr.grad(pendulum)(p, s0, 1e-2, 250) for p in ps]
    np.testing.assert_allclose(g.compute(ps, s0, 1e-2, 250, reduce="sum"), np.sum(here, axis=0),
                               rtol=1e-12)
    np.testing.assert_allclose(g.compute(ps, s0, 1e-2, 250, reduce="mean", npartitions=4),
                               np.mean(here, axis=0), rtol=1e-12)
    # value_and_grad results summed: the values and the gradients, each
    v_sum, g_sum = mg.compute(ps, s0, 1e-2, 250, reduce="sum")
    assert v_sum == pytest.approx(sum(v for v, _ in bag), rel=1e-12)
    np.testing.assert_allclose(g_sum, np.sum(here, axis=0), rtol=1e-12)
    # structs out, tangents back
    springs = [Spring(1.0 + i, np.full(3, 0.1 * i)) for i in range(4)]
    x = np.array([1.0, 2.0, 3.0])
    total = nr.dask.map_grad(spring_energy, over=0).compute(springs, x, reduce="sum")
    assert type(total) is nr.Tangent[Spring]
    assert total.k == pytest.approx(sum(nr.grad(spring_energy)(s, x).k for s in springs),
                                    rel=1e-12)
    # an error in a worker is the same error here
    with pytest.raises(nr.NoMethodError, match="no method of shape_energy"):
        nr.dask.map_grad(with_rule, over=0).compute([np.arange(3)], 2.0)
    with pytest.raises(ValueError, match="reduce must be"):
        g.compute(ps, s0, 1e-2, 250, reduce="max")
    # without a distributed client: the bag, on the current Dask scheduler
    import distributed

    def no_client():
        raise ValueError("No clients found")
    monkeypatch.setattr(distributed, "default_client", no_client)
    out = g.compute(ps[:3], s0, 1e-2, 250)
    for a, b in zip(out, here[:3]):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=0)


def damped(p, state0, dt, nsteps):
    """A function no worker has seen before test_workers_load_what_the_client_compiled."""
    return pendulum(p, state0, dt, nsteps) * 0.5


def test_workers_load_what_the_client_compiled(client):
    ps, s0 = _params(8, seed=1), np.array([0.5, 0.1])
    mg = nr.dask.map_grad(damped, over=0)
    mg.warm(ps, s0, 1e-2, 200)               # compiled here, stored in the shared cache
    before = nr.dask.cache_info(client)
    out = mg(ps, s0, 1e-2, 200).compute()
    after = nr.dask.cache_info(client)
    for a, b in zip(out, [nr.grad(damped)(p, s0, 1e-2, 200) for p in ps]):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=0)
    compiled = {w: after[w]["compiles"] - before[w]["compiles"] for w in after}
    loaded = {w: after[w]["disk_hits"] - before[w]["disk_hits"] for w in after}
    assert compiled == {w: 0 for w in after}, (compiled, loaded,
                                                {w: after[w]["by_function"] for w in after})
    assert sum(loaded.values()) >= 1


def test_rules_and_a_method_added_on_the_client_reach_the_workers(client):
    xs = [np.array([0.3, -1.2, 2.0]) + i for i in range(6)]
    mg = nr.dask.map_grad(with_rule, over=0)
    out = mg(xs, 2.0).compute()
    for x, g in zip(xs, out):
        want = 2.0 * 3.0 * x ** 2
        want[0] += 3.0 * math.cos(x[0])      # the rule's pullback, not cos alone
        np.testing.assert_allclose(g, want, rtol=1e-13)

    @shape_energy.method
    def squares(x: nr.Vector[nr.Float64], k: float):     # replaces the method
        return k * np.sum(x * x)

    try:
        out = mg(xs, 2.0).compute()
        for x, g in zip(xs, out):
            want = 2.0 * 2.0 * x
            want[0] += 3.0 * math.cos(x[0])
            np.testing.assert_allclose(g, want, rtol=1e-13)
    finally:
        @shape_energy.method
        def cubes(x: nr.Vector[nr.Float64], k: float):      # the original method again
            return k * np.sum(x * x * x)


def test_structs_go_out_and_tangents_come_back(client):
    springs = [Spring(1.0 + i, np.full(3, 0.1 * i)) for i in range(5)]
    x = np.array([1.0, 2.0, 3.0])
    mg = nr.dask.map_grad(spring_energy, over=0)
    out = mg(springs, x).compute()
    here = [nr.grad(spring_energy)(s, x) for s in springs]
    for a, b in zip(out, here):
        assert type(a) is nr.Tangent[Spring]
        assert a.k == pytest.approx(b.k, rel=1e-13)
        np.testing.assert_allclose(a.x0, b.x0, rtol=1e-13)
    total = mg(springs, x, reduce="sum").compute()
    assert type(total) is nr.Tangent[Spring]
    assert total.k == pytest.approx(sum(t.k for t in here), rel=1e-12)


def test_a_refusal_in_a_worker_is_the_same_error_here(client):
    xs = [np.arange(3)]          # int arrays: no method of shape_energy takes them
    with pytest.raises(nr.NoMethodError, match="no method of shape_energy"):
        nr.dask.map_grad(with_rule, over=0)(xs, 2.0).compute()


def test_bad_calls_are_refused_before_anything_runs():
    mg = nr.dask.map_grad(pendulum, over=(0, 1))
    with pytest.raises(ValueError, match="different lengths"):
        mg(_params(3), [np.zeros(2)] * 2, 0.1, 3)
    with pytest.raises(TypeError, match="must be a sequence"):
        mg(_params(3), 1.0, 0.1, 3)
    with pytest.raises(TypeError, match="over=.*names argument 7"):
        nr.dask.map_grad(pendulum, over=7)(_params(3), np.zeros(2), 0.1, 3)
    with pytest.raises(ValueError, match="reduce must be"):
        nr.dask.map_grad(pendulum)(_params(3), np.zeros(2), 0.1, 3, reduce="max")
