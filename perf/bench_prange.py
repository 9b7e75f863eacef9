"""Gradients of numba.prange loops on 1 and 2 threads, in one run (issue 18).

Workloads (the loop workloads of perf/_workloads_ad.py and perf/bench_arrays.py written with
prange, and a stencil with a transcendental, whose fused loop keeps a one-iteration tape):

- W1 Rosenbrock, n = 10^6: neighbours i and i + 1 (the even/odd chunk schedule);
- W2 pair energy, 1,000 particles: an inner loop over the others (a chunk per thread, each with
  its own adjoint array);
- W4 row-wise logsumexp of a 2000 x 2000 matrix (perf/bench_arrays.py's, the rows in prange):
  each iteration writes its own row of the adjoint (one contiguous chunk per thread, all at once,
  into the shared adjoint) and keeps a tape of its two inner loops;
- a smoothness penalty with sin, n = 10^6: neighbours i - 1 .. i + 1 and a per-iteration tape.
  (W3, the pendulum, is sequential in time: no prange.)
- a map ``out[i] = tanh(w * x[i]) * x[i]``, n = 10^6, then ``np.sum(out * out)``: the two-pass
  schedule (its forward loop and its reverse loop in chunks, tanh's values saved in each
  iteration's slots);
- heat steps: 10 steps of an explicit heat equation with a tanh term, n = 200,000, two prange
  loops inside the time loop updating in place: each step's maps in chunks, the stencil's
  reverse in even and odd chunks, the overwritten buffers saved whole per step;
- heat swapped: the same steps with one prange loop and the buffers swapped (``u, v = v, u``),
  the form that stayed serial until the chunk loops were compiled as functions of their own
  (ad/outline.py);
- row map: ``out[i, j] = tanh(x[i, j] * w[j]) * x[i, j]`` over a 1000 x 2000 matrix, the rows in
  prange with an inner loop along each (each chunk of rows keeps a tape of its own from forward
  to reverse: ad/chunk_tapes.py; serial until 2026-12-06 late);
- heat 2-d swapped: 10 steps of a 2-d heat stencil with a tanh term on 500 x 500, rows in prange
  with an inner loop, the buffers swapped (the same schedule);
- matvec rows: ``y[i] += A[i, j] * x[j]`` over a 2000 x 2000 matrix, then ``np.sum(np.tanh(y))``:
  each row reads the element it writes (its own), the chunk tapes' schedule since 2026-12-07
  (serial before).

For each: the gradient (``nr.value_and_grad``) on 1 and on 2 threads (``numba.set_num_threads``),
and the primal compiled by Numba with ``parallel=True`` on the same thread counts; the serial
(``range``) gradient and primal beside them. Targets: the gradient on 2 threads >= 1.7x faster
than on 1, and its ratio to the primal no worse than the serial one's.

Times are the best of repeats taken in turn (this machine is shared). Run:
python perf/bench_prange.py [--quick] [WORKLOAD ...]
"""

import argparse
import math
import os
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numba  # noqa: E402
import numpy as np  # noqa: E402

import numbarules as nr  # noqa: E402


def rosenbrock_p(x):
    s = 0.0
    for i in numba.prange(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s



def pair_p(pos):
    e = 0.0
    for i in numba.prange(pos.shape[0]):
        for j in range(i + 1, pos.shape[0]):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            dz = pos[i, 2] - pos[j, 2]
            e += 1.0 / math.sqrt(dx * dx + dy * dy + dz * dz + 0.01)
    return e



def lse_rows_p(X):
    s = 0.0
    for i in numba.prange(X.shape[0]):
        m = X[i, 0]
        for j in range(1, X.shape[1]):
            m = max(m, X[i, j])
        t = 0.0
        for j in range(X.shape[1]):
            t += math.exp(X[i, j] - m)
        s += m + math.log(t)
    return s



def tanh_map_p(x, w):
    out = np.empty_like(x)
    for i in numba.prange(x.shape[0]):
        out[i] = math.tanh(w * x[i]) * x[i]
    return np.sum(out * out)



def heat_p(u0, k, steps):
    u = u0.copy()
    v = np.zeros_like(u0)
    n = u0.shape[0]
    for t in range(steps):
        for i in numba.prange(1, n - 1):
            v[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1]) - 0.1 * math.tanh(u[i])
        for i in numba.prange(1, n - 1):
            u[i] = v[i]
    return np.sum(u * u)


def row_map_p(x, w):
    out = np.empty_like(x)
    for i in numba.prange(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = math.tanh(x[i, j] * w[j]) * x[i, j]
    return np.sum(out * out)


def matvec_p(A, x):
    n, m = A.shape
    y = np.zeros(n)
    for i in numba.prange(n):
        for j in range(m):
            y[i] += A[i, j] * x[j]
    return np.sum(np.tanh(y))


def heat2d_p(u0, k, steps):
    n, m = u0.shape
    u = u0.copy()
    v = u0.copy()
    for t in range(steps):
        for i in numba.prange(1, n - 1):
            for j in range(1, m - 1):
                v[i, j] = u[i, j] + k * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1]
                                         - 4.0 * u[i, j]) - 0.1 * math.tanh(u[i, j])
        u, v = v, u
    return np.sum(u * u)


def heat_swapped_p(u0, k, steps):
    u = u0.copy()
    v = np.empty_like(u0)
    n = u0.shape[0]
    for t in range(steps):
        for i in numba.prange(1, n - 1):
            v[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1]) - 0.1 * math.tanh(u[i])
        v[0] = u[0]
        v[n - 1] = u[n - 1]
        u, v = v, u
    return np.sum(u * u)


def smooth_p(x):
    s = 0.0
    for i in numba.prange(1, x.shape[0] - 1):
        d = x[i + 1] - 2.0 * x[i] + x[i - 1]
        s += d * d + 0.1 * math.sin(x[i])
    return s



def serial_twin(f):
    """``f`` with ``numba.prange`` meaning ``range`` (the same code over globals whose ``numba``
    has ``prange = range``): the serial gradient and primal to compare with."""
    fake = types.ModuleType("numba_serial")
    fake.prange = range
    twin = types.FunctionType(f.__code__, dict(f.__globals__, numba=fake), f.__name__ + "_s")
    twin.__qualname__ = f.__qualname__ + "_serial"
    return twin


def _best(fn, args, threads, repeats):
    numba.set_num_threads(threads)
    fn(*args)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def main(quick=False, only=()):
    rng = np.random.default_rng(0)
    n1, n2, n4 = (10_000, 200, 100) if quick else (1_000_000, 1_000, 2_000)
    repeats = 3 if quick else 15
    two = min(2, numba.config.NUMBA_NUM_THREADS)
    cases = [("W1 Rosenbrock", rosenbrock_p, (rng.uniform(-1.5, 1.5, n1),)),
             ("W2 pair energy", pair_p, (rng.normal(size=(n2, 3)),)),
             ("W4 row logsumexp", lse_rows_p, (rng.normal(size=(n4, n4)),)),
             ("stencil + sin", smooth_p, (rng.normal(size=n1),)),
             ("tanh map", tanh_map_p, (rng.normal(size=n1), 0.7)),
             ("heat steps", heat_p, (rng.normal(size=n1 // 5), 0.2, 10)),
             ("heat swapped", heat_swapped_p, (rng.normal(size=n1 // 5), 0.2, 10)),
             ("row map", row_map_p, (rng.normal(size=(n4 // 2, n4)), rng.normal(size=n4))),
             ("heat 2-d swapped", heat2d_p, (rng.normal(size=(n4 // 4, n4 // 4)), 0.1, 10)),
             ("matvec rows", matvec_p, (rng.normal(size=(n4, n4)), rng.normal(size=n4)))]
    if only:
        cases = [c for c in cases if c[0] in only]
    print(f"prange gradients, {numba.config.NUMBA_NUM_THREADS} threads available "
          f"(threading layer after the first run below)")
    print(f"{'workload':<18} {'grad 1t':>9} {'grad 2t':>9} {'speedup':>7} {'primal 2t':>9} "
          f"{'ratio 2t':>8} {'serial grad':>11} {'serial primal':>13} {'ratio':>6}")
    out = []
    for name, fp, args in cases:
        fs = serial_twin(fp)
        gp, gs = nr.value_and_grad(fp, 0), nr.value_and_grad(fs, 0)
        v1, g1 = gp(*args)
        v2, g2 = gs(*args)
        assert abs(v1 - v2) <= 1e-9 * abs(v2) and np.allclose(g1, g2, rtol=1e-9, atol=1e-9)
        assert "_prange(" in nr.code(gp, *args, kind="vjp")
        pj, sj = numba.njit(parallel=True)(fp), numba.njit(fs)
        t = {k: [] for k in ("g1", "g2", "p2", "gs", "ps")}
        for _ in range(3):      # in turn, so that a slow spell of the machine slows every column
            t["g1"].append(_best(gp, args, 1, repeats))
            t["g2"].append(_best(gp, args, two, repeats))
            t["p2"].append(_best(pj, args, two, repeats))
            t["gs"].append(_best(gs, args, 1, repeats))
            t["ps"].append(_best(sj, args, 1, repeats))
        b = {k: min(v) for k, v in t.items()}
        speedup, ratio2, ratios = b["g1"] / b["g2"], b["g2"] / b["p2"], b["gs"] / b["ps"]
        print(f"{name:<18} {b['g1'] * 1e3:>7.2f}ms {b['g2'] * 1e3:>7.2f}ms {speedup:>6.2f}x "
              f"{b['p2'] * 1e3:>7.2f}ms {ratio2:>7.2f}x {b['gs'] * 1e3:>9.2f}ms "
              f"{b['ps'] * 1e3:>11.2f}ms {ratios:>5.2f}x")
        out.append({"name": name, "speedup": speedup, "ratio": ratio2, "serial_ratio": ratios})
    print(f"threading layer: {numba.threading_layer()}; targets: speedup >= 1.7x on 2 threads, "
          f"ratio 2t <= the serial ratio")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("only", nargs="*", help="the workloads to run (by name; all if none)")
    a = parser.parse_args()
    main(a.quick, a.only)
