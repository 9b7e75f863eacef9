"""Time-stepping simulations: the gradient against the njit primal of the same formulation, both
measured in this run (issue 15). Target: gradient <= 4x its primal.

2-D reaction-diffusion ``u <- u + k*lap(u) + r*u*(1-u)`` (gradient with respect to the initial
field and k), in the three ways a Numba user writes it:

- ``swap``: two buffers, an element loop, ``u, v = v, u`` each step;
- ``copy``: ``v = u.copy()`` each step, then the element loop writes ``u``;
- ``slices``: whole-array expressions on slices, ``u = u + ...`` rebinding ``u`` each step.

Also reported: the tape and residual bytes of the gradient (``nr.ad_stats``), and the swap form
at 2,000 steps under ``nr.checkpointed`` against its taped gradient (time, peak memory). Target:
peak <= 10% of the taped one, time <= 2.5x.

Run: python perf/bench_sim.py [--quick]
"""

import argparse
import ctypes
import importlib
import inspect
import math
import os
import sys
import tempfile
import time

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numba        # noqa: E402
import numpy as np  # noqa: E402

import numbarules as nr  # noqa: E402
from numbarules import numba_glue  # noqa: E402


def rd_swap(u0, k, steps):
    n = u0.shape[0]
    u = u0.copy()
    v = np.zeros_like(u0)
    for t in range(steps):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                lap = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
                v[i, j] = u[i, j] + k * lap + 0.1 * u[i, j] * (1.0 - u[i, j])
        u, v = v, u
    s = 0.0
    for i in range(n):
        for j in range(n):
            s += u[i, j] * u[i, j]
    return s


def rd_copy(u0, k, steps):
    n = u0.shape[0]
    u = u0.copy()
    for t in range(steps):
        v = u.copy()
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                lap = v[i - 1, j] + v[i + 1, j] + v[i, j - 1] + v[i, j + 1] - 4.0 * v[i, j]
                u[i, j] = v[i, j] + k * lap + 0.1 * v[i, j] * (1.0 - v[i, j])
    return np.sum(u * u)


def rd_slices(u0, k, steps):
    u = u0.copy()
    for t in range(steps):
        lap = np.zeros_like(u)
        lap[1:-1, 1:-1] = (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                           - 4.0 * u[1:-1, 1:-1])
        u = u + k * lap + 0.1 * u * (1.0 - u)
    return np.sum(u * u)


def nbody(x0, p0, dt, steps):
    """Leapfrog for n bodies in 3-D with softened gravity, in place: the loop-carried state is
    the positions and momenta, updated element by element (the issue's 64 bodies, 500 steps)."""
    x = x0.copy()
    p = p0.copy()
    n = x.shape[0]
    f = np.zeros_like(x0)
    for t in range(steps):
        for i in range(n):
            for k in range(3):
                f[i, k] = 0.0
        for i in range(n):
            for j in range(n):
                if j != i:
                    dx = x[j, 0] - x[i, 0]
                    dy = x[j, 1] - x[i, 1]
                    dz = x[j, 2] - x[i, 2]
                    r2 = dx * dx + dy * dy + dz * dz + 0.01
                    w = 1.0 / (r2 * math.sqrt(r2))
                    f[i, 0] += dx * w
                    f[i, 1] += dy * w
                    f[i, 2] += dz * w
        for i in range(n):
            for k in range(3):
                p[i, k] += dt * f[i, k]
                x[i, k] += dt * p[i, k]
    s = 0.0
    for i in range(n):
        for k in range(3):
            s += x[i, k] * x[i, k]
    return s


def wave(u0, c, steps):
    """A 1-D wave equation, three time levels rotated each step (the third workload)."""
    n = u0.shape[0]
    prev = u0.copy()
    cur = u0.copy()
    nxt = np.zeros_like(u0)
    for t in range(steps):
        for i in range(1, n - 1):
            nxt[i] = 2.0 * cur[i] - prev[i] + c * (cur[i - 1] - 2.0 * cur[i] + cur[i + 1])
        prev, cur, nxt = cur, nxt, prev
    s = 0.0
    for i in range(n):
        s += cur[i] * cur[i]
    return s



def workloads(quick):
    """N-body and the wave equation: primal, taped and checkpointed gradients, peak memory."""
    rng = np.random.default_rng(1)
    nb = 16 if quick else 64
    x0, p0 = rng.standard_normal((nb, 3)), 0.1 * rng.standard_normal((nb, 3))
    u0 = np.sin(np.linspace(0.0, np.pi, 1024)) * np.exp(-np.linspace(-3, 3, 1024) ** 2)
    cases = [(f"N-body, {nb} bodies, {100 if quick else 500} steps", nbody, checkpointed(nbody),
              (x0, p0, 0.001, 100 if quick else 500)),
             (f"1-D wave, 1024 points, {500 if quick else 2000} steps", wave, checkpointed(wave),
              (u0, 0.25, 500 if quick else 2000))]
    print(f"\n{'workload':<32} {'njit primal':>12} {'taped':>9} {'ratio':>6} {'peak MB':>8} "
          f"{'checkpointed (20)':>18} {'ratio':>6} {'peak MB':>8}")
    for name, f, fc, args in cases:
        tp = best(numba.njit(f), *args)
        g, gc = nr.grad(f, argnums=(0, 1)), nr.grad(fc, argnums=(0, 1))
        tg = best(g, *args, repeat=3)
        mg = max(peak_bytes(g, *args) for _ in range(2))
        tc = best(gc, *args, 20, repeat=3)
        mc = max(peak_bytes(gc, *args, 20) for _ in range(2))
        print(f"{name:<32} {tp * 1e3:>10.2f}ms {tg * 1e3:>7.1f}ms {tg / tp:>5.1f}x "
              f"{mg / 1e6:>8.1f} {tc * 1e3:>16.1f}ms {tc / tp:>5.1f}x {mc / 1e6:>8.1f}")


def checkpointed(f):
    """``f`` with its time loop ``for t in range(steps):`` marked ``nr.checkpointed`` and a last
    parameter ``snapshots``: the same source otherwise (numbarules reads functions from their
    files, so the variant is written to a temporary module)."""
    src = inspect.getsource(f)
    name = f.__name__ + "_checkpointed"
    src = src.replace(f"def {f.__name__}(", f"def {name}(", 1).replace(
        ", steps):", ", steps, snapshots):", 1).replace(
        "for t in range(steps):", "for t in nr.checkpointed(range(steps), snapshots=snapshots):")
    folder = tempfile.mkdtemp(prefix="bench_sim_")
    with open(os.path.join(folder, f"{name}.py"), "w") as out:
        out.write("import math\nimport numpy as np\nimport numbarules as nr\n\n\n" + src)
    sys.path.insert(0, folder)
    return getattr(importlib.import_module(name), name)


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise OSError(field)


def peak_bytes(f, *args):
    """Bytes the process's resident memory rose to above where it was, while ``f(*args)`` ran
    (Linux: the peak is reset through /proc/self/clear_refs). Measures the tape and the
    snapshots the gradient touches, whatever allocates them (NumPy, Numba's runtime)."""
    # freed memory that malloc keeps resident would hide new allocations: give it back first,
    # and the blocks numbarules keeps for the next large arrays (numba_glue.blocks.BLOCKS)
    blocks = getattr(getattr(numba_glue, "blocks", numba_glue.intrinsics), "BLOCKS", None)
    if blocks is not None:
        blocks.release()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as c:
        c.write("5")
    before = _status("VmRSS")
    f(*args)
    return _status("VmHWM") - before


def checkpointing(n, steps, snaps):
    """The swap form with and without nr.checkpointed: gradient time and peak memory."""
    u0 = np.random.default_rng(0).random((n, n)) * 0.5
    print(f"\ncheckpointing: reaction-diffusion {n}x{n}, {steps} steps (swap form); peak memory "
          f"above the resting process while the gradient runs")
    print(f"{'schedule':<22} {'nr.grad':>10} {'vs tape':>8} {'peak MB':>8} {'vs tape':>8}")
    g = nr.grad(rd_swap, argnums=(0, 1))
    g(u0, 0.1, 3)
    t_tape = best(g, u0, 0.1, steps, repeat=3)
    m_tape = max(peak_bytes(g, u0, 0.1, steps) for _ in range(2))
    print(f"{'tape (range)':<22} {t_tape * 1e3:>8.1f}ms {1.0:>7.2f}x {m_tape / 1e6:>8.1f} "
          f"{1.0:>7.2f}x")
    gc = nr.grad(checkpointed(rd_swap), argnums=(0, 1))
    gc(u0, 0.1, 3, 2)
    for k in snaps:
        t = best(gc, u0, 0.1, steps, k, repeat=3)
        m = max(peak_bytes(gc, u0, 0.1, steps, k) for _ in range(2))
        print(f"{f'checkpointed, {k} slots':<22} {t * 1e3:>8.1f}ms {t / t_tape:>7.2f}x "
              f"{m / 1e6:>8.1f} {m / m_tape:>7.2f}x")


def best(f, *args, repeat=5):
    f(*args)
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        f(*args)
        ts.append(time.perf_counter() - t)
    return min(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    n, steps = (64, 50) if a.quick else (256, 200)
    u0 = np.random.default_rng(0).random((n, n)) * 0.5
    print(f"reaction-diffusion {n}x{n}, {steps} steps; gradient w.r.t. u0 and k")
    print(f"{'formulation':<10} {'njit primal':>12} {'nr.grad':>10} {'ratio':>7} "
          f"{'first grad':>11} {'tape MB':>8} {'residual MB':>12}")
    for f in (rd_swap, rd_copy, rd_slices):
        primal = numba.njit(f)
        tp = best(primal, u0, 0.1, steps)
        g = nr.grad(f, argnums=(0, 1))
        t0 = time.perf_counter()
        g(u0, 0.1, steps)
        first = time.perf_counter() - t0
        tg = best(g, u0, 0.1, steps, repeat=3)
        st = nr.ad_stats(f, u0, 0.1, steps, argnums=(0, 1))
        print(f"{f.__name__[3:]:<10} {tp * 1e3:>10.1f}ms {tg * 1e3:>8.1f}ms {tg / tp:>6.1f}x "
              f"{first:>10.1f}s {st['tape_bytes'] / 1e6:>8.1f} {st['residual_bytes'] / 1e6:>12.1f}")
    if a.quick:
        checkpointing(64, 400, (10, 40))
    else:
        checkpointing(64, 2000, (20, 100))
    workloads(a.quick)


if __name__ == "__main__":
    main()
