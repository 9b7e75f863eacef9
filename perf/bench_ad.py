"""Reverse-mode gradients: numbarules against a hand-written Numba adjoint and the njit primal.

Three loop-style workloads (perf/_workloads_ad.py): Rosenbrock over 10^6 inputs, a softened
pair energy over 1000 particles (O(n^2)), and a 20,000-step explicit-Euler pendulum. All variants
of a workload are timed interleaved in one run and the minimum is kept, so the ratios share the
machine's noise. The hand-written adjoints are checked against finite differences first, and
numbarules' gradient against the hand-written one. The "fastmath" column is
``nr.value_and_grad(f, fastmath=True)`` (reassociated sums, vmath's exp and tanh; issue 19); the
"nr.grad" column the gradient alone (no value: where a loop runs for the value alone, a kernel
without it). Until numbarules can differentiate a workload,
its row says why and the rest of the table still runs.

Run: python perf/bench_ad.py [--quick] [--disk-cache]
"""

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time

import numpy as np

import numbarules as nr

try:
    from perf._workloads_ad import WORKLOADS, check_handwritten, grads_as_tuple
except ImportError:                         # run as a script without the repository on the path
    from _workloads_ad import WORKLOADS, check_handwritten, grads_as_tuple

__all__ = ["run", "check_handwritten"]


class Unavailable(Exception):
    """numbarules cannot produce this gradient yet; the message is the reason shown."""


def _reason(exc):
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    reason = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return reason if len(reason) <= 160 else reason[:157] + "..."


def _seconds(fn, args, number):
    t0 = time.perf_counter()
    for _ in range(number):
        fn(*args)
    return (time.perf_counter() - t0) / number


def time_interleaved(fns, args, rounds, sample_s):
    """Min over `rounds` of each function's mean time, the functions taking turns in each round.
    Each sample runs a function often enough to last about `sample_s`; callers warm up first."""
    numbers = [max(1, round(sample_s / max(_seconds(fn, args, 1), 1e-9))) for fn in fns]
    best = [math.inf] * len(fns)
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            best[k] = min(best[k], _seconds(fn, args, numbers[k]))
    return best


def _mismatch(workload, expected, got, rtol=1e-8):
    """None if numbarules' (value, grads) agrees with the hand-written one, else a description.
    The tolerance allows for a different summation order, not for a different derivative."""
    value, grads = grads_as_tuple(workload, expected)
    nr_value, nr_grads = grads_as_tuple(workload, got)
    if not math.isclose(nr_value, value, rel_tol=rtol, abs_tol=rtol):
        return f"value {nr_value!r}, hand-written {value!r}"
    for k, (g, nr_g) in enumerate(zip(grads, nr_grads)):
        nr_g = np.asarray(nr_g)
        if nr_g.shape != g.shape:
            return f"gradient {k} has shape {nr_g.shape}, expected {g.shape}"
        err = float(np.abs(nr_g - g).max()) if g.size else 0.0
        scale = max(1.0, float(np.abs(g).max())) if g.size else 1.0
        if not err <= rtol * scale:
            return f"gradient {k} differs from hand-written by {err:.3g} (scale {scale:.3g})"
    return None


def _tape_bytes(workload, args):
    ad_stats = getattr(nr, "ad_stats", None)
    if ad_stats is None:
        return None
    try:
        return ad_stats(workload.primal, *args)["tape_bytes"]
    except Exception:
        return None


@contextlib.contextmanager
def _fresh_disk_cache():
    # A kernel loaded from numbarules' disk cache in ~10 ms would make "compile s" measure a
    # cache load on every run but the first; a fresh directory measures the cold compile.
    old = os.environ.get("NUMBARULES_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="numbarules-bench-") as d:
        os.environ["NUMBARULES_CACHE_DIR"] = d
        try:
            yield
        finally:
            if old is None:
                del os.environ["NUMBARULES_CACHE_DIR"]
            else:
                os.environ["NUMBARULES_CACHE_DIR"] = old


def _numbarules_gradient(workload, args, **options):
    """The warm numbarules gradient callable, its first-call seconds (building the callable
    included) and its result, or Unavailable with the reason. ``options``: nr.value_and_grad's
    (``fastmath=True``)."""
    value_and_grad = getattr(nr, "value_and_grad", None)
    if value_and_grad is None:
        raise Unavailable("numbarules has no value_and_grad yet")
    try:
        t0 = time.perf_counter()
        fn = value_and_grad(workload.primal, argnums=workload.argnums, **options)
        result = fn(*args)
        first_s = time.perf_counter() - t0
    except Exception as exc:
        raise Unavailable(_reason(exc)) from exc
    return fn, first_s, result


def bench_workload(workload, size, rounds, sample_s, rng):
    args = workload.make_args(size, rng)
    row = {"workload": workload.name, "size": size, "nr_s": None, "nr_over_hand": None,
           "nr_over_primal": None, "compile_s": None, "tape_bytes": None, "fast_s": None,
           "fast_over_primal": None, "grad_s": None, "grad_over_primal": None,
           "tape_bytes_min": workload.tape_bytes_min(*args)}
    fns = [workload.primal_jit, workload.adjoint]
    expected = workload.adjoint(*args)          # warms (compiles) the adjoint
    workload.primal_jit(*args)
    try:
        nr_fn, first_s, result = _numbarules_gradient(workload, args)
        try:
            wrong = _mismatch(workload, expected, result)
        except Exception as exc:                # a result of the wrong structure
            wrong = f"result not comparable: {_reason(exc)}"
        row["numbarules"] = f"wrong gradient ({wrong})" if wrong else "ok"
        fns.append(nr_fn)
    except Unavailable as exc:
        row["numbarules"] = f"unavailable ({exc})"
    if len(fns) == 3:
        # fastmath=True: reassociated sums, vmath's exp and tanh (nr.grad's docstring); held to
        # the hand-written adjoint within the reassociation's rounding (1e-6 of the scale)
        try:
            fast_fn, _, result = _numbarules_gradient(workload, args, fastmath=True)
            wrong = _mismatch(workload, expected, result, rtol=1e-6)
            if wrong:
                row["numbarules"] = f"wrong gradient with fastmath=True ({wrong})"
            fns.append(fast_fn)
        except Unavailable as exc:
            row["numbarules"] = f"fastmath=True unavailable ({exc})"
    grad_at = None
    if len(fns) == 4:
        # nr.grad: the gradient alone, which where a loop runs for the value alone is a kernel
        # of its own without that loop (Kernels.value_loop)
        grad_fn = nr.grad(workload.primal, argnums=workload.argnums)
        got = grad_fn(*args)
        wrong = _mismatch(workload, expected, (expected[0], got))
        if wrong:
            row["numbarules"] = f"wrong gradient from nr.grad ({wrong})"
        grad_at = len(fns)
        fns.append(grad_fn)

    times = time_interleaved(fns, args, rounds, sample_s)
    row["primal_s"], row["hand_s"] = times[0], times[1]
    row["hand_over_primal"] = times[1] / times[0]
    if len(times) >= 4:
        row["fast_s"] = times[3]
        row["fast_over_primal"] = times[3] / times[0]
    if grad_at is not None:
        row["grad_s"] = times[grad_at]
        row["grad_over_primal"] = times[grad_at] / times[0]
    if len(times) >= 3:
        row["nr_s"] = times[2]
        row["nr_over_hand"] = times[2] / times[1]
        row["nr_over_primal"] = times[2] / times[0]
        row["compile_s"] = first_s - times[2]
        row["tape_bytes"] = _tape_bytes(workload, args)
    return row


def _fmt_time(s):
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def print_table(rows, out):
    header = (f"{'workload':26s} {'primal':>9s} {'hand-written':>12s} {'numbarules':>10s} "
              f"{'nr/hand':>7s} {'nr/primal':>9s} {'compile s':>9s} {'tape bytes (min)':>22s} "
              f"{'hand/primal':>11s} {'fastmath':>9s} {'fast/primal':>11s} {'nr.grad':>9s} "
              f"{'grad/primal':>11s}")
    out(header)
    out("-" * len(header))
    for r in rows:
        tape = f"{'n/a' if r['tape_bytes'] is None else r['tape_bytes']} ({r['tape_bytes_min']:,})"
        out(f"{r['workload'] + ' n=' + format(r['size'], ','):26s} {_fmt_time(r['primal_s']):>9s} "
            f"{_fmt_time(r['hand_s']):>12s} {_fmt_time(r['nr_s']):>10s} "
            f"{_fmt(r['nr_over_hand'], '.2f'):>7s} {_fmt(r['nr_over_primal'], '.2f'):>9s} "
            f"{_fmt(r['compile_s'], '.2f'):>9s} {tape:>22s} {r['hand_over_primal']:11.2f} "
            f"{_fmt_time(r['fast_s']):>9s} {_fmt(r['fast_over_primal'], '.2f'):>11s} "
            f"{_fmt_time(r['grad_s']):>9s} {_fmt(r['grad_over_primal'], '.2f'):>11s}")
        if r["numbarules"] != "ok":
            out(f"  numbarules: {r['numbarules']}")


def run(quick=False, out=print, disk_cache=False):
    """Benchmark every workload; print the table through `out` and return one dict per row.
    `disk_cache=True` keeps numbarules' configured disk cache, so "compile s" may be a load."""
    check_handwritten()
    out("hand-written adjoints match central finite differences")
    rounds, sample_s = (15, 0.003) if quick else (60, 0.01)
    rng = np.random.default_rng(0)
    with contextlib.nullcontext() if disk_cache else _fresh_disk_cache():
        rows = [bench_workload(w, w.quick_size if quick else w.size, rounds, sample_s, rng)
                for w in WORKLOADS]
    print_table(rows, out)
    out("times: min over interleaved repeats; compile s: numbarules' first call minus a warm one"
        + ("" if disk_cache else ", cold disk cache"))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, about 20 s")
    parser.add_argument("--disk-cache", action="store_true",
                        help="use numbarules' configured disk cache instead of a fresh one")
    args = parser.parse_args()
    rows = run(args.quick, disk_cache=args.disk_cache)
    # a wrong gradient makes the run fail (numbarules bench reports it), not just a table note
    sys.exit(1 if any(r.get("numbarules", "").startswith("wrong") for r in rows) else 0)
