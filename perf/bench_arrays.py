"""Array programs: numbarules' value_and_grad against hand-written adjoints (and JAX / PyTorch when
installed), all measured in the same run, every side with one BLAS thread. Target: within 1.5x
of the fastest. Also ``fastmath=True``'s gradient (reassociated sums, vmath's exp and tanh) and
the primal (issue 19's targets are ratios to it: the njit loops, the MLP's NumPy forward).

- row-wise logsumexp over a 2000 x 2000 matrix, written with loops;
- a two-layer MLP loss, X 4096x256, W1 256x256, W2 256x1, tanh, mean squared output, written with
  whole-array NumPy, gradient with respect to both weights.

Run: python perf/bench_arrays.py [--quick]
"""

import argparse
import math
import os
import time

if __name__ == "__main__":
    # One BLAS thread on every side, set before NumPy loads its BLAS. With two threads each, the
    # side whose BLAS threads wait for a core the machine gives to something else is 3-6x
    # slower in bursts (24 ms scheduler slices): the quick MLP row once read "hand-written
    # 96 ms, numbarules 2.9 ms" on a 2-core machine running other work.
    for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                       "intra_op_parallelism_threads=1")

import numba        # noqa: E402
import numpy as np  # noqa: E402

import numbarules as nr  # noqa: E402


def lse_rows(X):
    s = 0.0
    for i in range(X.shape[0]):
        m = X[i, 0]
        for j in range(1, X.shape[1]):
            m = max(m, X[i, j])
        t = 0.0
        for j in range(X.shape[1]):
            t += math.exp(X[i, j] - m)
        s += m + math.log(t)
    return s


@numba.njit
def lse_rows_adjoint(X):
    # the softmax of each row is the gradient of its logsumexp
    n, d = X.shape
    g = np.empty_like(X)
    s = 0.0
    for i in range(n):
        m = X[i, 0]
        for j in range(1, d):
            m = max(m, X[i, j])
        t = 0.0
        for j in range(d):
            e = math.exp(X[i, j] - m)
            g[i, j] = e
            t += e
        s += m + math.log(t)
        for j in range(d):
            g[i, j] /= t
    return s, g


def mlp(X, W1, W2):
    H = np.tanh(X @ W1)
    out = H @ W2
    return np.mean(out ** 2)


def mlp_adjoint(X, W1, W2):
    H = np.tanh(X @ W1)
    out = H @ W2
    n = out.size
    dout = 2.0 * out / n
    dW2 = H.T @ dout
    dH = dout @ W2.T
    dW1 = X.T @ (dH * (1.0 - H * H))
    return np.mean(out ** 2), (dW1, dW2)


def _time_interleaved(fns, args, rounds, burst=3):
    """{label: best seconds}: each round runs every callable ``burst`` times in a row, in turn,
    so that all of them share the machine's slow and fast moments (the ratio is what is
    reported). Bursts, not single calls: alternating two functions that each allocate tens of
    MB makes glibc return and re-fault that memory on every call (both get ~1.8x slower), which
    is not how a training loop calls a gradient. (bench_ad.time_interleaved takes the mean
    of a sample with no warm-up call after the switch: here that measured the re-faulting.)"""
    best = dict.fromkeys(fns, math.inf)
    for _ in range(rounds):
        for label, fn in fns.items():
            fn(*args)
            for _ in range(burst):
                t0 = time.perf_counter()
                fn(*args)
                best[label] = min(best[label], time.perf_counter() - t0)
    return best


def _peers(name, args):
    """JAX and PyTorch versions where installed: {label: callable} and notes for the absent."""
    peers, notes = {}, []
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
        if name == "mlp":
            f = jax.jit(jax.value_and_grad(
                lambda X, W1, W2: jnp.mean((jnp.tanh(X @ W1) @ W2) ** 2), argnums=(1, 2)))
        else:
            f = jax.jit(jax.value_and_grad(
                lambda X: jnp.sum(jax.scipy.special.logsumexp(X, axis=1))))
        peers["jax.jit(value_and_grad)"] = lambda *a: jax.block_until_ready(f(*a))
    except ImportError:
        notes.append("jax not installed: skipped")
    try:
        import torch
        torch.set_num_threads(1)

        def run_torch(*a):
            ts = [torch.tensor(x, requires_grad=(k > 0 or name != "mlp")) for k, x in enumerate(a)]
            if name == "mlp":
                y = torch.mean((torch.tanh(ts[0] @ ts[1]) @ ts[2]) ** 2)
            else:
                y = torch.sum(torch.logsumexp(ts[0], dim=1))
            y.backward()
            return y
        peers["torch autograd"] = run_torch
    except ImportError:
        notes.append("torch not installed: skipped")
    return peers, notes


def run(quick=False, out=print):
    rng = np.random.default_rng(0)
    n_lse, (n, d, h) = (500, (1024, 128, 128)) if quick else (2000, (4096, 256, 256))
    rounds = 2 if quick else 5
    X = rng.normal(size=(n_lse, n_lse))
    Xm, W1, W2 = rng.normal(size=(n, d)), rng.normal(size=(d, h)) * 0.1, rng.normal(size=(h, 1))
    # the primal each gradient is measured against (issue 19's targets): the loops compiled by
    # Numba, the MLP's NumPy forward (faster than Numba's compiled one here)
    cases = [("logsumexp rows", "lse", (X,), lse_rows, numba.njit(lse_rows), lse_rows_adjoint, 0),
             ("two-layer MLP", "mlp", (Xm, W1, W2), mlp, mlp, mlp_adjoint, (1, 2))]
    rows = []
    for label, name, args, f, primal, hand, argnums in cases:
        ours = nr.value_and_grad(f, argnums=argnums)
        fast = nr.value_and_grad(f, argnums=argnums, fastmath=True)
        v2, g2 = hand(*args)
        for grad, rtol in ((ours, 1e-8), (fast, 1e-6)):
            v1, g1 = grad(*args)
            for a, b in zip(g1 if isinstance(g1, tuple) else (g1,),
                            g2 if isinstance(g2, tuple) else (g2,)):
                np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-10)
        primal(*args)
        peers, notes = _peers(name, args)
        times = _time_interleaved({"numbarules": ours, "fastmath=True": fast,
                                   "hand-written": hand, **peers, "primal": primal},
                                  args, rounds)
        fastest = min(v for k, v in times.items()
                      if k not in ("numbarules", "fastmath=True", "primal"))
        rows.append({"case": label, "times": times, "ratio": times["numbarules"] / fastest,
                     "fast_ratio": times["fastmath=True"] / fastest,
                     "over_primal": times["numbarules"] / times["primal"],
                     "fast_over_primal": times["fastmath=True"] / times["primal"],
                     "notes": notes})
    for row in rows:
        cols = "  ".join(f"{k} {v * 1e3:.2f} ms" for k, v in row["times"].items())
        out(f"{row['case']:16s} {cols}  numbarules / fastest other {row['ratio']:.2f} "
            f"(fastmath {row['fast_ratio']:.2f}), / primal {row['over_primal']:.2f} "
            f"(fastmath {row['fast_over_primal']:.2f})")
        for note in row["notes"]:
            out(f"{'':16s} ({note})")
    out("targets: numbarules within 1.5x of the fastest; issue 19: logsumexp <= 1.0x its njit "
        "primal, the MLP <= 1.6x its NumPy forward")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    run(parser.parse_args().quick)
