"""numbarules.cuda.map_grad against jax.vmap(jax.grad(f)) and torch.func.vmap(torch.func.grad(f)).

The workload: the gradient of a scalar function with a loop inside (a damped oscillator advanced
with K explicit steps from x, with a per-element parameter c), at each of 10^7 points, one GPU
thread per point. Each peer runs the same arithmetic in float64 on the same GPU; its gradient is
checked against numbarules' on the first 1000 points before anything is timed. Reported: the
time per call (best of a few, after a warm-up that compiles), the throughput in gradients per
second, and each peer's time over numbarules'.

Run on a machine with an NVIDIA GPU:  python perf/bench_cuda.py [--quick] [--n N] [--steps K]
Without a usable GPU it prints why and exits with status 0 (nothing to measure); with
NUMBA_ENABLE_CUDASIM=1 it refuses as well (the simulator runs kernels as Python).
"""

import argparse
import math
import sys
import time

import numpy as np

STEPS = 16


def oscillator(x, c):
    """K steps of a damped, nonlinear oscillator from position x (velocity 0); its energy."""
    v = 0.0
    h = 0.05
    for i in range(STEPS):
        a = -math.sin(x) - c * v
        v = v + h * a
        x = x + h * v
    return 0.5 * v * v + (1.0 - math.cos(x))


def gpu_problem():
    """None when a GPU can run kernels here, else the reason why not."""
    try:
        from numba import config
        if config.ENABLE_CUDASIM:
            return "NUMBA_ENABLE_CUDASIM=1: the simulator runs kernels as Python, nothing to time"
        from numba import cuda
    except ImportError as exc:
        return f"numba-cuda is not installed ({exc})"
    try:
        if not cuda.is_available():
            return "no CUDA GPU or driver is available (numba.cuda.is_available() is False)"
        cuda.get_current_device()
    except Exception as exc:      # a driver that loads but cannot open a device, etc.
        return f"the CUDA driver cannot open a device: {exc}"
    return None


def best_of(fn, sync, repeats):
    fn()
    sync()                         # warm-up: compiles
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_numbarules(x, c, repeats):
    import numbarules as nr
    from numba import cuda
    # The loop overwrites x and v: each iteration saves their old values. STEPS is a constant
    # when the function is differentiated, so the per-thread tape is sized at compile time.
    mg = nr.cuda.map_grad(oscillator, argnums=(0, 1))
    dx, dc = cuda.to_device(x), cuda.to_device(c)
    out = {}

    def run():
        out["g"] = mg(dx, dc)

    t = best_of(run, cuda.synchronize, repeats)
    return t, out["g"][0].copy_to_host()


def jax_on_gpu():
    """(jax, None) where JAX is installed and sees a GPU (float64 turned on), else (None, why)."""
    try:
        import jax
    except ImportError:
        return None, "jax is not installed"
    jax.config.update("jax_enable_x64", True)
    if not any(d.platform == "gpu" for d in jax.devices()):
        return None, "jax sees no GPU"
    return jax, None


def time_jax(jax, f, x, c, repeats):
    """Best time of ``jit(vmap(grad(f)))`` in (x, c) at every point, and its gradients."""
    g = jax.jit(jax.vmap(jax.grad(f, argnums=(0, 1))))
    jx, jc = jax.numpy.asarray(x), jax.numpy.asarray(c)
    out = {}

    def run():
        out["g"] = g(jx, jc)

    t = best_of(run, lambda: out["g"][0].block_until_ready(), repeats)
    return t, (np.asarray(out["g"][0]), np.asarray(out["g"][1]))


def bench_jax(x, c, repeats):
    jax, why = jax_on_gpu()
    if jax is None:
        return None, why
    jnp = jax.numpy

    def f(x, c):
        v = 0.0
        h = 0.05
        for _ in range(STEPS):
            a = -jnp.sin(x) - c * v
            v = v + h * a
            x = x + h * v
        return 0.5 * v * v + (1.0 - jnp.cos(x))

    t, g = time_jax(jax, f, x, c, repeats)
    return t, g[0]


def bench_torch(x, c, repeats):
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch sees no GPU"

    def f(x, c):
        v = torch.zeros_like(x)
        h = 0.05
        for _ in range(STEPS):
            a = -torch.sin(x) - c * v
            v = v + h * a
            x = x + h * v
        return 0.5 * v * v + (1.0 - torch.cos(x))

    g = torch.func.vmap(torch.func.grad(f, argnums=(0, 1)))
    tx = torch.as_tensor(x, device="cuda")
    tc = torch.as_tensor(c, device="cuda")
    out = {}

    def run():
        out["g"] = g(tx, tc)

    t = best_of(run, torch.cuda.synchronize, repeats)
    return t, out["g"][0].cpu().numpy()


def main(argv=None):
    global STEPS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="points (threads)")
    parser.add_argument("--steps", type=int, default=STEPS, help="loop iterations per point")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="10^6 points, 3 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.repeats = min(args.n, 1_000_000), min(args.repeats, 3)
    problem = gpu_problem()
    if problem is not None:
        print(f"bench_cuda: skipped, {problem}.")
        print("bench_cuda: run it on a machine with an NVIDIA GPU and numba-cuda installed.")
        return 0
    STEPS = args.steps
    rng = np.random.default_rng(0)
    x = rng.uniform(-2.0, 2.0, args.n)
    c = rng.uniform(0.1, 0.5, args.n)
    t_nr, g_nr = bench_numbarules(x, c, args.repeats)
    # self-check before any peer: the device gradients against numbarules' CPU gradient
    import numbarules as nr
    k = min(200, args.n)
    cpu = np.array([nr.grad(oscillator)(x[i], c[i]) for i in range(k)])
    if not np.allclose(g_nr[:k], cpu, rtol=1e-9, atol=1e-12):
        print("bench_cuda: map_grad disagrees with the CPU gradient; nothing timed is valid")
        return 1
    rows = [("numbarules map_grad", t_nr, "")]
    for name, bench in (("jax vmap(grad)", bench_jax), ("torch.func vmap(grad)", bench_torch)):
        t, g = bench(x, c, args.repeats)
        if t is None:
            rows.append((name, None, g))
            continue
        k = min(1000, args.n)
        if not np.allclose(g[:k], g_nr[:k], rtol=1e-9, atol=1e-12):
            rows.append((name, None, "gradient disagrees with numbarules: not timed"))
            continue
        rows.append((name, t, ""))
    print(f"gradients of a {STEPS}-step loop at {args.n:,} points (float64, one thread each)")
    print(f"{'':24s} {'ms/call':>10s} {'Mgrad/s':>10s} {'vs numbarules':>14s}")
    for name, t, note in rows:
        if t is None:
            print(f"{name:24s} {'-':>10s} {'-':>10s} {'-':>14s}  ({note})")
        else:
            print(f"{name:24s} {t * 1e3:10.2f} {args.n / t / 1e6:10.1f} {t / t_nr:13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
