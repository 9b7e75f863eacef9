"""A parameter sweep of gradients on a Dask cluster, with Dask's progress bar.

A damped pendulum is simulated with explicit Euler; the loss is the squared distance between
its trajectory and an observed one. From 64 starting guesses of (g/L, damping) we want the
loss and its gradient at each guess (to pick where to start a fit), then the mean gradient:
64 gradients of a 20,000-step simulation, spread over the worker processes of a LocalCluster.

The functions are defined here, in ``__main__``, as a notebook defines them: the workers get
them by value, with their source, and load the kernels this process compiled from the shared
disk cache (``warm``): the last lines print how many kernels each worker compiled (none).

Needs Dask: pip install 'numbarules[dask]'. Run: python examples/dask_sweep.py [--quick]
"""

import argparse
import math
import time

import numpy as np
from dask.distributed import Client, LocalCluster, progress

import numbarules as nr


def simulate(p, theta0, dt, nsteps, out):
    """Explicit Euler for theta'' = -p[0] sin(theta) - p[1] theta'; angles into ``out``."""
    th, om = theta0, 0.0
    for t in range(nsteps):
        a = -p[0] * math.sin(th) - p[1] * om
        th, om = th + dt * om, om + dt * a
        out[t] = th


def misfit(p, observed, theta0, dt):
    """Mean squared distance between the simulated and the observed angles."""
    n = observed.shape[0]
    th, om = theta0, 0.0
    s = 0.0
    for t in range(n):
        a = -p[0] * math.sin(th) - p[1] * om
        th, om = th + dt * om, om + dt * a
        s += (th - observed[t]) ** 2
    return s / n


def main(quick=False):
    nsteps, nguesses = (2_000, 16) if quick else (20_000, 64)
    dt, theta0 = 1e-3, 1.0
    observed = np.empty(nsteps)
    simulate(np.array([9.81, 0.3]), theta0, dt, nsteps, observed)
    rng = np.random.default_rng(0)
    guesses = np.column_stack([rng.uniform(5.0, 15.0, nguesses), rng.uniform(0.0, 1.0, nguesses)])

    sweep = nr.dask.map_grad(misfit, argnums=0, over=0, value=True)
    t0 = time.perf_counter()
    sweep.warm(guesses, observed, theta0, dt)     # compile here; workers load from the cache
    print(f"compiled on the client in {time.perf_counter() - t0:.1f} s")

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        t0 = time.perf_counter()
        results = client.compute(sweep(guesses, observed, theta0, dt))
        progress(results, notebook=False)          # Dask's own text progress bar
        results = results.result()
        print(f"\n{nguesses} gradients in {time.perf_counter() - t0:.2f} s on "
              f"{len(client.scheduler_info()['workers'])} worker processes")

        losses = np.array([v for v, _ in results])
        best = int(np.argmin(losses))
        print(f"best guess g/L={guesses[best, 0]:.3f}, damping={guesses[best, 1]:.3f}: "
              f"loss {losses[best]:.4g}, gradient {np.round(results[best][1], 4)}")
        mean = sweep(guesses, observed, theta0, dt, reduce="mean").compute()
        print(f"mean loss {mean[0]:.4g}, mean gradient {np.round(mean[1], 4)}")
        # the same gradient computed here, for one guess: the workers computed the same numbers
        here = nr.value_and_grad(misfit)(guesses[best], observed, theta0, dt)
        assert abs(here[0] - results[best][0]) <= 1e-12 * abs(here[0])
        assert np.allclose(here[1], results[best][1], rtol=1e-12, atol=0)
        compiled = {w.rsplit(":", 1)[-1]: info["compiles"]
                    for w, info in nr.dask.cache_info(client).items()}
        print(f"kernels compiled in each worker (port: count): {compiled}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller sweep, for the tests")
    main(parser.parse_args().quick)
