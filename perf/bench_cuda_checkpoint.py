"""Checkpointed time loops on the GPU: an ensemble of long trajectories, one per thread.

Each thread integrates a damped pendulum for T steps from its own start x and damping c and
returns the final energy; the gradient is with respect to (x, c). Three ways, same arithmetic:

- primal: the loop alone in a ``cuda.jit`` kernel (the baseline of the ratios);
- taped: ``nr.cuda.map_grad(f, tape=N)`` with the plain ``range`` loop: N entries of local memory
  per thread, N growing with T (each step saves what its reverse reads);
- checkpointed: ``for t in nr.checkpointed(range(T), snapshots=k)``: a tape of one step and
  ``k + 1`` saved states per thread whatever T, the reverse re-running steps (revolve.py);
- JAX, when installed with a GPU: ``jax.vmap(jax.grad(f))`` over ``lax.scan`` (its residuals
  in device memory, T per thread), and the same with ``jax.checkpoint`` on the step.

Every gradient is checked against numbarules' CPU gradient on a few hundred threads before
anything is timed. Reported: ms per call (best of a few after a warm-up that compiles), the ratio
to the primal, and the local memory each numbarules kernel reserves per thread.

Run on a machine with an NVIDIA GPU:  python perf/bench_cuda_checkpoint.py [--n N] [--steps T]
Without a GPU it prints why and exits with status 0. ``--smoke`` runs a tiny problem, under
NUMBA_ENABLE_CUDASIM=1 too (a check of this script, nothing timed is meaningful).
"""

import argparse
import math
import os
import re
import sys
import time

import numpy as np
from numba import cuda

import numbarules as nr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cuda import best_of, gpu_problem, jax_on_gpu, time_jax  # noqa: E402

H = 0.01


def pendulum(x, c, steps):
    v = 0.0
    for t in range(steps):
        a = -math.sin(x) - c * v
        v = v + H * a
        x = x + H * v
    return 0.5 * v * v + (1.0 - math.cos(x))


def pendulum_16(x, c, steps):
    v = 0.0
    for t in nr.checkpointed(range(steps), snapshots=16):
        a = -math.sin(x) - c * v
        v = v + H * a
        x = x + H * v
    return 0.5 * v * v + (1.0 - math.cos(x))


def pendulum_64(x, c, steps):
    v = 0.0
    for t in nr.checkpointed(range(steps), snapshots=64):
        a = -math.sin(x) - c * v
        v = v + H * a
        x = x + H * v
    return 0.5 * v * v + (1.0 - math.cos(x))


def primal_kernel():
    step = cuda.jit(device=True)(pendulum)

    @cuda.jit
    def kernel(out, x, c, steps):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = step(x[i], c[i], steps[i])
    return kernel


def local_bytes(mg, arrays):
    """Local memory per thread of map_grad ``mg``'s kernel (None where it cannot be read)."""
    from numbarules.cuda import glue
    kernel = mg.kernel_for(*(glue.element_type(a) for a in arrays))
    try:
        sizes = kernel.get_local_mem_per_thread()
        return max(sizes.values()) if isinstance(sizes, dict) else sizes
    except Exception:       # the simulator, or a numba-cuda without the query
        return None


def tape_needed(f, arrays):
    """The per-thread tape bound map_grad says the taped form needs (its error names it): what
    a user of that form has to find out."""
    small = tuple(a[:32] for a in arrays)
    try:
        nr.cuda.map_grad(f, argnums=(0, 1), tape=1)(*small)
    except nr.DifferentiationError as exc:
        return int(re.search(r"pass tape=(\d+)", str(exc)).group(1))
    return 1


def bench_jax(x, c, steps, repeats, remat):
    jax, why = jax_on_gpu()
    if jax is None:
        return None, why
    jnp = jax.numpy

    def f(x, c):
        def step(carry, _):
            x, v = carry
            a = -jnp.sin(x) - c * v
            v = v + H * a
            return (x + H * v, v), None
        body = jax.checkpoint(step) if remat else step
        (x, v), _ = jax.lax.scan(body, (x, 0.0 * x), None, length=steps)
        return 0.5 * v * v + (1.0 - jnp.cos(x))

    return time_jax(jax, f, x, c, repeats)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=262_144, help="threads (trajectories)")
    parser.add_argument("--steps", type=int, default=2000, help="time steps per trajectory")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="65,536 threads, 500 steps")
    parser.add_argument("--smoke", action="store_true", help="a tiny run that checks the script")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.steps, args.repeats = min(args.n, 65_536), min(args.steps, 500), 3
    from numba import config
    if args.smoke:
        args.n, args.steps, args.repeats = 64, 40, 1
    else:
        problem = gpu_problem()
        if problem is not None:
            print(f"bench_cuda_checkpoint: skipped, {problem}.")
            return 0
    rng = np.random.default_rng(0)
    x = rng.uniform(-2.0, 2.0, args.n)
    c = rng.uniform(0.1, 0.5, args.n)
    steps = np.full(args.n, args.steps, dtype=np.int64)
    dx, dc, ds = cuda.to_device(x), cuda.to_device(c), cuda.to_device(steps)
    k = min(200, args.n)
    ref = np.array([nr.grad(pendulum, argnums=(0, 1))(x[i], c[i], args.steps) for i in range(k)])

    out = cuda.device_array(args.n)
    kernel = primal_kernel()
    threads = 128
    blocks = (args.n + threads - 1) // threads
    t_primal = best_of(lambda: kernel[blocks, threads](out, dx, dc, ds), cuda.synchronize,
                       args.repeats)
    rows = [("primal (cuda.jit)", t_primal, "", None)]

    tape = tape_needed(pendulum, (x, c, steps))
    forms = [(f"taped (tape={tape})", pendulum, tape),
             ("checkpointed, 16 slots", pendulum_16, 0),
             ("checkpointed, 64 slots", pendulum_64, 0)]
    for name, f, tp in forms:
        mg = nr.cuda.map_grad(f, argnums=(0, 1), tape=tp)
        got = {}

        def run():
            got["g"] = mg(dx, dc, ds)

        t = best_of(run, cuda.synchronize, args.repeats)
        g = np.stack([got["g"][0].copy_to_host()[:k], got["g"][1].copy_to_host()[:k]], 1)
        if not np.allclose(g, ref, rtol=1e-9, atol=1e-12):
            rows.append((name, None, "disagrees with the CPU gradient: not timed", None))
            continue
        rows.append((name, t, "", local_bytes(mg, (x, c, steps))))
    for name, remat in (("jax vmap(grad(scan))", False), ("jax, jax.checkpoint step", True)):
        t, g = bench_jax(x, c, args.steps, args.repeats, remat)
        if t is not None and not np.allclose(np.stack([g[0][:k], g[1][:k]], 1), ref,
                                             rtol=1e-9, atol=1e-12):
            t, g = None, "gradient disagrees with numbarules' CPU gradient: not timed"
        rows.append((name, t, "" if t is not None else g, None))

    print(f"gradients of a {args.steps}-step trajectory at {args.n:,} threads (float64)"
          + ("  [smoke run: timings meaningless]" if args.smoke or config.ENABLE_CUDASIM else ""))
    print(f"{'':28s} {'ms/call':>9s} {'x primal':>9s} {'local B/thread':>15s}")
    for name, t, note, lmem in rows:
        mem = "-" if lmem is None else f"{lmem:,}"
        if t is None:
            print(f"{name:28s} {'-':>9s} {'-':>9s} {mem:>15s}  ({note})")
        else:
            print(f"{name:28s} {t * 1e3:9.2f} {t / t_primal:8.1f}x {mem:>15s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
