"""Forward mode: ``nr.jvp`` of the three AD workloads against their njit primal.

For each workload (perf/_workloads_ad.py: Rosenbrock over 10^6 inputs, the O(n^2) pair energy
over 1000 particles, the 20,000-step pendulum) the njit primal, ``nr.jvp(f, argnums)`` along a
random direction and ``nr.value_and_grad(f, argnums)`` are timed interleaved in one run (the
minimum of each kept), so the ratios share the machine's noise, with ``nr.hvp`` (the
Hessian-vector product, reverse over forward). The directional derivative is checked against the
hand-written adjoint's gradient dotted with the direction first, the Hessian-vector product
against differences of the gradient. Targets (issue 17): jvp at most 1.5x the primal; hvp of
Rosenbrock at most 4x its gradient, and at or under JAX's ``jit(jvp(grad(f)))`` (timed in the
same run, checked against nr.hvp) when JAX is installed.

Run: python perf/bench_higher.py [--quick]
"""

import argparse
import os
import platform
import sys
import time

import numpy as np

import numbarules as nr

try:
    from perf._workloads_ad import WORKLOADS
    from perf.bench_ad import time_interleaved
except ImportError:                         # run as a script without the repository on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from perf._workloads_ad import WORKLOADS
    from perf.bench_ad import time_interleaved

TARGET = 1.5
HVP_TARGET = 4.0


def bench(workload, size, rounds, sample_s, rng):
    args = workload.make_args(size, rng)
    nums = (workload.argnums,) if isinstance(workload.argnums, int) else workload.argnums
    dirs = tuple(rng.uniform(-1.0, 1.0, np.shape(args[k])) for k in nums)
    tangent = dirs[0] if isinstance(workload.argnums, int) else dirs
    jvp = nr.jvp(workload.primal, workload.argnums)
    vg = nr.value_and_grad(workload.primal, workload.argnums)
    y, dy = jvp(*args, tangent)
    _, g = workload.adjoint(*args)
    g = (g,) if isinstance(workload.argnums, int) else g
    want = sum(float(np.sum(gk * vk)) for gk, vk in zip(g, dirs))
    if not np.isclose(dy, want, rtol=1e-9):
        raise AssertionError(f"{workload.name}: jvp gives {dy!r}, grad . v {want!r}")
    workload.primal_jit(*args)
    vg(*args)
    hvp = nr.hvp(workload.primal, workload.argnums)
    hv = hvp(*args, tangent)
    h = 1e-6
    up = [a + h * d if k in nums else a for k, a in enumerate(args) for d in
          [dirs[nums.index(k)] if k in nums else None]]
    down = [a - h * d if k in nums else a for k, a in enumerate(args) for d in
            [dirs[nums.index(k)] if k in nums else None]]
    diff = [(a - b) / (2 * h) for a, b in zip(_as_tuple(vg(*up)[1]), _as_tuple(vg(*down)[1]))]
    for got, want in zip(_as_tuple(hv), diff):
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(want)))):
            raise AssertionError(f"{workload.name}: hvp disagrees with differences of the gradient")
    fns = [workload.primal_jit, lambda *a: jvp(*a, tangent), vg, lambda *a: hvp(*a, tangent)]
    jax_hvp = _jax_hvp(workload.name)
    if jax_hvp is not None:
        got = np.asarray(jax_hvp(args[0], tangent))
        if not np.allclose(got, hv, rtol=1e-9, atol=1e-9 * float(np.max(np.abs(hv)))):
            raise AssertionError(f"{workload.name}: JAX's hvp disagrees with nr.hvp")
        fns.append(lambda x: jax_hvp(x, tangent).block_until_ready())
    times = time_interleaved(fns, args, rounds, sample_s)
    primal, t_jvp, t_vg, t_hvp = times[:4]
    return workload.name, size, primal, t_jvp, t_vg, t_hvp, (times[4] if len(times) > 4 else None)


def _jax_hvp(name):
    """JAX's ``jit(jvp(grad(f)))`` for Rosenbrock (float64), or None without JAX."""
    if name != "rosenbrock":
        return None
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)

    def rosenbrock(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    return jax.jit(lambda x, v: jax.jvp(jax.grad(rosenbrock), (x,), (v,))[1])


def _as_tuple(g):
    return g if isinstance(g, tuple) else (g,)


def run(quick=False, out=print):
    rng = np.random.default_rng(0)
    rounds, sample_s = (10, 0.003) if quick else (40, 0.01)
    out(f"nr.jvp against the njit primal ({time.strftime('%Y-%m-%d')}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores)")
    out("| workload | size | njit primal | nr.jvp | jvp / primal | value_and_grad / primal | "
        "nr.hvp | hvp / value_and_grad |")
    out("|---|---|---|---|---|---|---|---|")
    rows, jax_line = [], None
    for w in WORKLOADS:
        name, size, primal, t_jvp, t_vg, t_hvp, t_jax = bench(
            w, w.quick_size if quick else w.size, rounds, sample_s, rng)
        rows.append((name, t_jvp / primal, t_hvp / t_vg))
        if t_jax is not None:
            jax_line = (f"nr.hvp of {name} (n = {size}): {t_hvp * 1e3:.3f} ms, JAX "
                        f"jit(jvp(grad(f))) {t_jax * 1e3:.3f} ms: {t_hvp / t_jax:.2f}x JAX's "
                        f"(target: at or under JAX's, "
                        f"{'met' if t_hvp <= t_jax else 'not met'})")
        out(f"| {name} | {size} | {primal * 1e3:.3f} ms | {t_jvp * 1e3:.3f} ms | "
            f"{t_jvp / primal:.2f}x | {t_vg / primal:.2f}x | {t_hvp * 1e3:.3f} ms | "
            f"{t_hvp / t_vg:.2f}x |")
    worst = max(r for _, r, _ in rows)
    out(f"target: jvp <= {TARGET}x the primal on every workload: "
        f"{'met' if worst <= TARGET else 'not met'} (worst {worst:.2f}x)")
    rb = next(h for n, _, h in rows if n == "rosenbrock")
    out(f"target: hvp of Rosenbrock <= {HVP_TARGET}x its gradient: "
        f"{'met' if rb <= HVP_TARGET else 'not met'} ({rb:.2f}x)")
    out(jax_line or "JAX is not installed: its hvp was not timed (pip install -e '.[bench]')")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    run(parser.parse_args().quick)
