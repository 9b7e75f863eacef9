"""Compile cost: the first gradient against Numba's first call of the same function.

For each workload a fresh Python process imports numbarules, compiles one trivial ``@njit``
function (Numba's own start-up, paid once by any Numba program), then times one first call:
either ``numba.njit(f)`` on the inputs (the baseline) or ``nr.value_and_grad(f, argnums)`` on the
same inputs, with numbarules' disk cache off. The two run in alternation, best of ``rounds``
each, so the machine's load is shared by both sides. JAX's ``jit(value_and_grad)`` first call is
shown where JAX is installed. The table reports seconds and the ratio; the target is a first
gradient at most 3x the njit primal's first call on every workload. ``--profile`` also prints
``nr.compile_stats()`` of each gradient's process: where the seconds go.

Run: python perf/bench_compile.py [--quick] [--profile]
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r'''
import json, sys, time
import numpy as np
import numba
import numbarules as nr
numba.njit(lambda x: x + 1.0)(1.0)       # Numba's own start-up, paid by any Numba program
from perf._workloads_ad import WORKLOADS
from perf.bench_arrays import lse_rows, mlp
name, side, profile = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
rng = np.random.default_rng(0)
if name == "mlp":
    f, argnums = mlp, (1, 2)
    args = (rng.standard_normal((64, 16)), rng.standard_normal((16, 16)) / 4,
            rng.standard_normal((16, 1)) / 4)
elif name == "row logsumexp":
    f, argnums, args = lse_rows, 0, (rng.standard_normal((20, 30)),)
else:
    w = next(w for w in WORKLOADS if w.name == name)
    f, argnums, args = w.primal, w.argnums, w.make_args(w.check_size, rng)
t0 = time.perf_counter()
if side == "njit":
    numba.njit(f)(*args)
else:
    value, grads = nr.value_and_grad(f, argnums)(*args)
out = {"seconds": time.perf_counter() - t0, "compiles": nr.cache_info()["compiles"]}
if side == "grad":   # self-check, after the clock stopped: the gradient against finite differences
    nums = (argnums,) if isinstance(argnums, int) else argnums
    nr.testing.check_grad(f, *args, argnums=nums, grad=lambda f, argnums: (
        lambda *a: grads if isinstance(grads, tuple) else (grads,)))
if profile and side == "grad":
    out["profile"] = str(nr.compile_stats())
print(json.dumps(out))
'''

JAX_CHILD = r'''
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
jax.jit(lambda x: x + 1.0)(1.0).block_until_ready()
name = sys.argv[1]
rng = np.random.default_rng(0)
def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
def lse(X):
    return jnp.sum(jax.scipy.special.logsumexp(X, axis=1))
def mlp(X, W1, W2):
    return jnp.mean((jnp.tanh(X @ W1) @ W2) ** 2)
cases = {"rosenbrock": (rosenbrock, 0, (rng.standard_normal(9),)),
         "row logsumexp": (lse, 0, (rng.standard_normal((20, 30)),)),
         "mlp": (mlp, (1, 2), (rng.standard_normal((64, 16)), rng.standard_normal((16, 16)),
                                rng.standard_normal((16, 1))))}
if name not in cases:
    print(json.dumps({"seconds": None}))
    sys.exit()
f, argnums, args = cases[name]
t0 = time.perf_counter()
jax.block_until_ready(jax.jit(jax.value_and_grad(f, argnums))(*args))
print(json.dumps({"seconds": time.perf_counter() - t0}))
'''

WORKLOADS = ["rosenbrock", "pair energy", "pendulum", "row logsumexp", "mlp"]
TARGET = 3.0


def _child(code, *argv):
    env = dict(os.environ, NUMBARULES_CACHE="0", NUMBARULES_PROGRESS="0",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _has_jax():
    try:
        import jax  # noqa: F401
        return True
    except ImportError:
        return False


def measure(name, rounds, profile=False):
    best = {"njit": None, "grad": None}
    prof = None
    for _ in range(rounds):
        for side in ("njit", "grad"):
            r = _child(CHILD, name, side, "1" if profile else "0")
            if best[side] is None or r["seconds"] < best[side]:
                best[side] = r["seconds"]
                if side == "grad":
                    prof = r.get("profile")
    return best, prof


def run(quick=False, profile=False, out=print):
    rounds = 1 if quick else 3
    jax = _has_jax()
    out(f"First call in a fresh process, best of {rounds} (disk cache off; {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores)")
    out(f"{'workload':15s} {'njit primal s':>14s} {'first grad s':>13s} {'ratio':>7s} "
        f"{'jax jit(vg) s':>14s}")
    met = 0
    results = {}
    for name in WORKLOADS:
        best, prof = measure(name, rounds, profile)
        ratio = best["grad"] / best["njit"]
        met += ratio <= TARGET
        j = _child(JAX_CHILD, name)["seconds"] if jax else None
        results[name] = (best, ratio, j)
        out(f"{name:15s} {best['njit']:14.2f} {best['grad']:13.2f} {ratio:6.1f}x "
            f"{'' if j is None else f'{j:14.2f}'}")
        if prof:
            out("  " + prof.replace("\n", "\n  "))
    out(f"target first gradient <= {TARGET:g}x the njit primal's first call: met on {met}/"
        f"{len(WORKLOADS)} workloads" + ("" if jax else "; jax not installed"))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--profile", action="store_true", help="nr.compile_stats() per gradient")
    args = parser.parse_args()
    t = time.perf_counter()
    run(args.quick, args.profile)
    print(f"({time.perf_counter() - t:.0f} s)")
