"""A Dask sweep of gradients against one process, in one run (issue 18).

Workload: the explicit-Euler pendulum of perf/_workloads_ad.py (20,000 steps, as in bench_ad,
then 200,000 and 1,000,000), its value and gradient with respect to the parameters at 64
parameter sets. One process: ``nr.value_and_grad`` called 64 times in a loop (compiled, warm).
Dask: ``nr.dask.map_grad`` on a LocalCluster of 2 worker processes with one thread each, the
kernels compiled once on the client (``warm``) and loaded by the workers from the shared disk
cache, its results taken with ``sweep.compute(...)`` (one future per worker thread). Reported:
the throughput ratio (gradients per second, Dask / one process) at steady state (the median
ratio of runs taken in turn, after one sweep that starts the workers' imports and loads), the
same for the lazy bag (``sweep(...).compute()``, two partitions per worker), the first sweep's
time, and the kernels the workers compiled and loaded. A Dask round trip costs tens of milliseconds: at 20,000 steps
(0.4 ms a gradient) the whole sweep is shorter than that.

The workers run with glibc's default allocator thresholds: Dask sets ``MALLOC_TRIM_THRESHOLD_``
in the environment of the worker processes it spawns, which turns off glibc's adjustment of the
mmap threshold, so every tape of more than 128 kB is a fresh mapping whose pages fault in on each
gradient (measured: a worker's batch took 1.3-1.9x as long as the same calls in the client).
docs/dask.md says how to set it for a cluster.

Target: >= 1.6x the throughput of one process; 0 compiles in the workers.

Run: python perf/bench_dask.py [--quick]
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import numbarules as nr  # noqa: E402
from perf._workloads_ad import pendulum  # noqa: E402


def sweep_once(client, nsteps, n, repeats):
    """(one-process seconds, Dask seconds, median ratio of the two taken in turn, first sweep
    seconds, kernels compiled and loaded in the workers) for ``n`` gradients of the pendulum at
    ``nsteps`` steps."""
    rng = np.random.default_rng(0)
    ps = np.column_stack([rng.uniform(5.0, 15.0, n), rng.uniform(0.0, 0.5, n)])
    state0 = np.array([1.0, 0.0])
    dt = 1e-3
    vg = nr.value_and_grad(pendulum, argnums=0)
    sweep = nr.dask.map_grad(pendulum, argnums=0, over=0, value=True)
    sweep.warm(ps, state0, dt, nsteps)          # compiled here, stored for the workers
    here = [vg(p, state0, dt, nsteps) for p in ps]
    before = nr.dask.cache_info(client)
    t0 = time.perf_counter()
    out = sweep(ps, state0, dt, nsteps).compute()
    first = time.perf_counter() - t0
    for (v, g), (v2, g2) in zip(out, here):
        assert abs(v - v2) <= 1e-12 * abs(v2) and np.allclose(g, g2, rtol=1e-12, atol=0)
    for (v, g), (v2, g2) in zip(sweep.compute(ps, state0, dt, nsteps), out):
        assert v == v2 and np.array_equal(g, g2)       # the futures path: the same numbers
    # One process and the two Dask paths alternate, so that a slow spell of this shared machine
    # slows all three
    serial, dask_runs, bag_runs = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for p in ps:
            vg(p, state0, dt, nsteps)
        serial.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sweep.compute(ps, state0, dt, nsteps)
        dask_runs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sweep(ps, state0, dt, nsteps).compute()
        bag_runs.append(time.perf_counter() - t0)
    ratios = [a / b for a, b in zip(serial, dask_runs)]
    bag_ratios = [a / b for a, b in zip(serial, bag_runs)]
    after = nr.dask.cache_info(client)
    compiled = sum(after[w]["compiles"] - before[w]["compiles"] for w in after)
    loaded = sum(after[w]["disk_hits"] - before[w]["disk_hits"] for w in after)
    return float(np.median(serial)), float(np.median(dask_runs)), float(np.median(ratios)), \
        float(np.median(bag_ratios)), first, compiled, loaded


def main(quick=False):
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        print("dask[distributed] is not installed (pip install 'numbarules[dask]'): skipped")
        return None
    sizes, repeats = ([(2_000, 16), (50_000, 16)], 3) if quick else \
        ([(20_000, 64), (200_000, 64), (1_000_000, 64)], 5)
    os.environ.setdefault("NUMBARULES_CACHE_DIR", tempfile.mkdtemp(prefix="nr-bench-dask-"))
    import dask
    dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None})
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=40) as cluster, \
            Client(cluster) as client:
        for nsteps, n in sizes:
            rows.append((nsteps, n) + sweep_once(client, nsteps, n, repeats))
    print("pendulum value_and_grad sweep: one process against a 2-process LocalCluster "
          "(1 thread each), warm disk cache")
    print(f"{'steps':>9} {'grads':>5} {'one process':>12} {'Dask':>12} {'ratio':>6} "
          f"{'bag ratio':>9} {'first sweep':>11} {'compiles':>8} {'loaded':>6}")
    result = []
    for nsteps, n, t1, t2, ratio, bag_ratio, first, compiled, loaded in rows:
        print(f"{nsteps:>9} {n:>5} {t1 * 1e3:>9.1f} ms {t2 * 1e3:>9.1f} ms {ratio:>5.2f}x "
              f"{bag_ratio:>8.2f}x {first:>9.2f} s {compiled:>8} {loaded:>6}")
        result.append({"steps": nsteps, "n": n, "ratio": ratio, "compiles": compiled})
    print("target: >= 1.6x the throughput of one process; 0 compiles in the workers")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    main(parser.parse_args().quick)
