"""The simulations of perf/bench_sim.py against JAX ``lax.scan`` on the CPU (issue 15's peer).

Same problems, same arithmetic, float64: the 2-D reaction-diffusion swap form (256x256, 200
steps, gradient with respect to the initial field and k) and the 64-body leapfrog (500 steps,
gradient with respect to the initial positions and momenta). Each JAX gradient is checked
against numbarules' before anything is timed. Reported per workload: the njit primal,
numbarules' ``nr.grad``, and ``jax.jit(jax.grad(...))`` over ``lax.scan`` (plain, and with
``jax.checkpoint`` on the step), best of a few calls after one that compiles.

numbarules runs on one core. JAX uses the cores it is given: run the script under
``taskset -c 0`` for one core each (JAX's thread pool then has one core to run on).

Run: python perf/bench_sim_jax.py [--quick]     (skips with a note where JAX is not installed)
"""

import argparse
import os
import sys
import time

import numba
import numpy as np

import numbarules as nr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sim import best, nbody, rd_swap  # noqa: E402


def jax_rd(jax, jnp, lax, steps, remat):
    def step(carry, _):
        u, v, k = carry
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1]
        mid = u[1:-1, 1:-1]
        # v's boundary is kept: the swap form's two buffers alternate their boundaries
        v = v.at[1:-1, 1:-1].set(mid + k * lap + 0.1 * mid * (1.0 - mid))
        return (v, u, k), None

    def f(u0, k):
        body = jax.checkpoint(step) if remat else step
        (u, _, _), _ = lax.scan(body, (u0, jnp.zeros_like(u0), k), None, length=steps)
        return jnp.sum(u * u)
    return f


def jax_nbody(jax, jnp, lax, steps, remat):
    def step(carry, _):
        x, p, dt = carry
        n = x.shape[0]
        d = x[None, :, :] - x[:, None, :]                   # d[i, j] = x[j] - x[i]
        r2 = jnp.sum(d * d, axis=2) + 0.01
        w = jnp.where(jnp.eye(n, dtype=bool), 0.0, 1.0 / (r2 * jnp.sqrt(r2)))
        f = jnp.sum(d * w[:, :, None], axis=1)
        p = p + dt * f
        x = x + dt * p
        return (x, p, dt), None

    def f(x0, p0, dt):
        body = jax.checkpoint(step) if remat else step
        (x, _, _), _ = lax.scan(body, (x0, p0, dt), None, length=steps)
        return jnp.sum(x * x)
    return f


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")     # the CPU peer, also on a GPU machine
    try:
        import jax
        import jax.numpy as jnp
        from jax import lax
    except ImportError:
        print("bench_sim_jax: skipped, jax is not installed.")
        return 0
    jax.config.update("jax_enable_x64", True)
    cpu = jax.devices("cpu")[0]
    n, steps = (64, 50) if args.quick else (256, 200)
    nb, nsteps = (16, 100) if args.quick else (64, 500)
    rng = np.random.default_rng(0)
    u0 = rng.random((n, n)) * 0.5
    x0, p0 = rng.standard_normal((nb, 3)), 0.1 * rng.standard_normal((nb, 3))
    cases = [(f"reaction-diffusion {n}x{n}, {steps} steps (swap form)", rd_swap,
              (u0, 0.1, steps), (0, 1), lambda remat: jax_rd(jax, jnp, lax, steps, remat), 2),
             (f"N-body, {nb} bodies, {nsteps} steps", nbody, (x0, p0, 0.001, nsteps), (0, 1),
              lambda remat: jax_nbody(jax, jnp, lax, nsteps, remat), 3)]
    print(f"on {os.cpu_count()} visible cores, {len(os.sched_getaffinity(0))} usable; "
          f"JAX {jax.__version__} on {cpu.platform}")
    print(f"{'workload':<46} {'njit primal':>11} {'numbarules':>11} {'JAX scan':>10} "
          f"{'JAX remat':>10}")
    for name, f, fargs, argnums, make, nj in cases:
        tp = best(numba.njit(f), *fargs)
        g = nr.grad(f, argnums=argnums)
        ref = g(*fargs)
        tg = best(g, *fargs, repeat=3)
        cols = []
        for remat in (False, True):
            jg = jax.jit(jax.grad(make(remat), argnums=argnums))
            jargs = tuple(jax.device_put(a, cpu) for a in fargs[:nj])
            got = jg(*jargs)
            ok = all(np.allclose(np.asarray(a), b, rtol=1e-8, atol=1e-10)
                     for a, b in zip(got, ref))
            if not ok:
                cols.append("disagrees")
                continue
            t = best(lambda *a: jax.block_until_ready(jg(*a)), *jargs, repeat=3)
            cols.append(f"{t * 1e3:.1f}ms")
        print(f"{name:<46} {tp * 1e3:>9.2f}ms {tg * 1e3:>9.1f}ms {cols[0]:>10} {cols[1]:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
