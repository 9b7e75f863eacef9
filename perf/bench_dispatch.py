"""Call overhead from Python: a generic function against the same body as a plain @numba.njit,
and a gradient object (``nr.grad``) against an ``@numba.njit`` hand-written gradient.

Both sides are measured in the same run, interleaved, and reported as a ratio (targets: <= 1.5
for a generic function with one array argument, <= 1.3 for a gradient object).
Run: python perf/bench_dispatch.py [--quick]
"""

import argparse
import timeit

import numba
import numpy as np

import numbarules as nr


def body(x):
    return x[0]


def scalar_body(x, y):
    return x * y


def square_first(x):
    return x[0] * x[0]


def square_first_grad(x):          # by hand: what nr.grad(square_first) computes
    g = np.zeros_like(x)
    g[0] = 2.0 * x[0]
    return g


def scalar_body_grad(x, y):
    return y, x


def measure(fn, args, number, repeat):
    fn(*args)
    return min(timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)) / number


def run(quick=False, out=print):
    number, repeat = (20_000, 5) if quick else (200_000, 9)
    generic = nr.generic(body)
    generic.method(lambda x, y: x)    # a second arity: exercised below, separately
    single = nr.generic(body)
    njitted = numba.njit(body)
    two = nr.generic(scalar_body)
    two_njit = numba.njit(scalar_body)
    x = np.ones(16)
    rows = []
    for label, g, plain, args in [
        ("one array argument", single, njitted, (x,)),
        ("two float arguments", two, two_njit, (1.5, 2.0)),
        ("one array, two-arity function", generic, njitted, (x,)),
        ("nr.grad, one array", nr.grad(square_first), numba.njit(square_first_grad), (x,)),
        ("nr.grad, two floats", nr.grad(scalar_body, (0, 1)), numba.njit(scalar_body_grad),
         (1.5, 2.0)),
    ]:
        tg, tp = [], []
        for _ in range(3):                   # interleave to share the machine's noise
            tg.append(measure(g, args, number, repeat))
            tp.append(measure(plain, args, number, repeat))
        tg, tp = min(tg), min(tp)
        rows.append((label, tg, tp, tg / tp))
    out(f"{'case':34s} {'numbarules':>10s} {'njit':>10s} {'ratio':>7s}")
    for label, tg, tp, ratio in rows:
        out(f"{label:34s} {tg * 1e9:8.0f}ns {tp * 1e9:8.0f}ns {ratio:7.2f}")
    out("targets: ratio <= 1.5 for one array argument, <= 1.3 for nr.grad")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    run(parser.parse_args().quick)
