"""numba.prange loops in differentiated code (issue 18, API.md 4c; ad/parallel.py).

A prange loop whose iterations are independent apart from accumulators runs its gradient in
chunks on several threads: even and odd chunks in turn when its adjoint writes stay within a few
elements of the iteration (a stencil), one chunk per thread with its own adjoint arrays
otherwise. Every gradient here is checked against central differences and against the same
function written with range (the serial engine), at one thread and at two.
"""

import ast
import math
import re
import types

import numba
import numpy as np
import pytest

import numbarules as nr
from numbarules.testing import check_grad
from numbarules.ad import outline
from numbarules.api import spec_for_call
from perf.bench_prange import heat2d_p as heat2d, heat_p, heat_swapped_p, matvec_p as matvec


def rosenbrock(x, a):
    s = 0.0
    for i in numba.prange(x.shape[0] - 1):
        s += a * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s



def smooth(x, w):
    """Two accumulators, one subtracted, neighbours on both sides, a loop-invariant before it."""
    c = w * w + 0.5
    s = 0.0
    t = 0.0
    for i in numba.prange(1, x.shape[0] - 1):
        d = x[i + 1] - 2.0 * x[i] + x[i - 1]
        s += c * d * d
        t -= math.sin(x[i]) * w
    return s + 0.25 * t



def pair_energy(pos):
    e = 0.0
    for i in numba.prange(pos.shape[0]):
        for j in range(i + 1, pos.shape[0]):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            r2 = dx * dx + dy * dy
            e += 1.0 / math.sqrt(r2 + 0.01)
    return e



def gathered(x, idx, a):
    s = 0.0
    for i in numba.prange(idx.shape[0]):
        s += a * x[idx[i]] ** 2 - math.cos(x[i % x.shape[0]])
    return s



def lse_rows(X, w):
    """Inner loops (their trip counts saved and restored per iteration), writes into the
    iteration's own row of the adjoint only: all chunks at once, into the shared array."""
    s = 0.0
    for i in numba.prange(X.shape[0]):
        m = X[i, 0]
        for j in range(1, X.shape[1]):
            m = max(m, X[i, j])
        t = 0.0
        for j in range(X.shape[1]):
            t += math.exp(w * (X[i, j] - m))
        s += m + math.log(t) / w
    return s



def row_max_times_sum(x0, m0):
    """From the fuzzer (seed 7, index 17): a running max along the row, a sum along it, their
    product. Numba's parfor passes without SSA reconstruction (which generated kernels skip
    otherwise) gave every adjoint of this loop wrong, with no error."""
    s = 0.0
    for i in numba.prange(m0.shape[0]):
        a = m0[i, 0]
        for j in range(1, m0.shape[1]):
            a = max(a, m0[i, j])
        t = 0.0
        for j in range(m0.shape[1]):
            t += x0 * m0[i, j] * m0[i, j] + -0.866
        s += -0.529 * a * t + x0
    return s * 1.29



def wrapped(x, k):
    """Starts at -1 (known only at run time): x[-1] is x's last element, which the last
    iteration reads too: one chunk."""
    s = 0.0
    for i in numba.prange(k, x.shape[0]):
        s += x[i] * x[i] * (1.0 + 0.1 * i)
    return s



def wrapped_const(x):
    """The same with the start written as a constant."""
    s = 0.0
    for i in numba.prange(-1, x.shape[0]):
        s += x[i] * x[i] * (1.0 + 0.1 * i)
    return s



def interior(x):
    """Neighbours on both sides over the middle of x only: its first and last elements get no
    term (the gather in chunks zeroes them, its adjoint allocated unfilled)."""
    s = 0.0
    for i in numba.prange(2, x.shape[0] - 3):
        s += (x[i + 1] - x[i - 1]) ** 2 * math.cos(x[i]) + x[i + 2]
    return s


def serial_twin(f):
    """``f`` with ``numba.prange`` meaning ``range``: the same code over globals whose ``numba``
    is a module with ``prange = range`` (the engine differentiates it as a serial loop)."""
    fake = types.ModuleType("numba_serial")
    fake.prange = range
    twin = types.FunctionType(f.__code__, dict(f.__globals__, numba=fake), f.__name__ + "_serial")
    twin.__qualname__ = f.__qualname__ + "_serial"
    return twin


rosenbrock_serial, smooth_serial = serial_twin(rosenbrock), serial_twin(smooth)
pair_energy_serial, gathered_serial = serial_twin(pair_energy), serial_twin(gathered)
lse_rows_serial, wrapped_serial = serial_twin(lse_rows), serial_twin(wrapped)
row_max_times_sum_serial = serial_twin(row_max_times_sum)
interior_serial = serial_twin(interior)


def carried(x):
    """Not independent: t carries from one iteration to the next (prange's rule broken): the
    gradient keeps the serial loop's meaning."""
    t = 0.0
    s = 0.0
    for i in numba.prange(x.shape[0]):
        t = 0.5 * t + x[i]
        s += t * t
    return s


def mapped(x, w):
    """Writes an array at its own index: the two-pass schedule, forward and reverse in chunks
    (tanh's value saved by each iteration in slots of its own, read back by the reverse)."""
    out = np.empty_like(x)
    for i in numba.prange(x.shape[0]):
        out[i] = math.tanh(w * x[i])
    return np.sum(out * out)



def mapped_sum(x, w):
    """An array written at its own index, a neighbour read, an accumulator read after the
    loop."""
    out = np.zeros_like(x)
    s = 0.0
    for i in numba.prange(1, x.shape[0]):
        a = math.exp(-w * x[i] * x[i])
        out[i] = a * x[i - 1]
        s += a
    return np.sum(out) + s * w



def rewritten(x):
    """Reads the array it writes: serial (the two-pass schedule saves the old elements)."""
    out = x * 2.0
    for i in numba.prange(x.shape[0]):
        out[i] = math.sin(out[i]) * x[i]
    return np.sum(out * out)


def last_read(x):
    """A value of the last iteration read after the loop: serial."""
    out = np.empty_like(x)
    a = 0.0
    for i in numba.prange(x.shape[0]):
        a = math.cos(x[i])
        out[i] = a * x[i]
    return np.sum(out) + a


def mapped_then_loop(x, w):
    """A map whose tanh values are saved in slots, then a serial loop saving floats on the same
    tape: its first save overwrites the slot of the map's last iteration (the serial layout
    holds that value in the variable), which the map's reverse in chunks puts back first."""
    out = np.empty_like(x)
    for i in numba.prange(x.shape[0]):
        out[i] = math.tanh(w * x[i]) * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        e = math.exp(0.5 * out[i])
        s += e * e
    return s


# perf/bench_prange.py's heat steps: two prange loops inside a time loop, updating in place;
# each step's maps in chunks (the tanh saved in the step's slots), the array each overwrites
# saved whole per step
heat = heat_p


# the same steps with one map and the buffers swapped (perf/bench_prange.py): the names u and v
# are bound to both arrays in turn, which Numba's parallel analysis of a whole kernel mis-sizes
# (it failed its own size check at run time on a step that rebinds ``u = u * 0.9 + ...``); the
# chunk loops run as functions of their own (ad/outline.py), whose arrays are arguments bound once
heat_swapped = heat_swapped_p


def rebound(u0, k, steps):
    """A prange reduction in a time loop whose step rebinds the array (to a new one)."""
    u = u0.copy()
    s = 0.0
    for t in range(steps):
        for i in numba.prange(u.shape[0]):
            s += math.tanh(u[i]) * k
        u = u * 0.9 + k * np.sin(u)
    return s


def row_map(x, w):
    """The row-wise map: an inner loop along each row writing ``out[i, j]``. Each chunk of rows
    saves on a tape of its own, kept for the chunk's reverse (ad/chunk_tapes.py); ``d_w[j]`` is
    written away from the row (a zeroed copy per chunk), ``d_x[i, j]`` at it (shared)."""
    n, m = x.shape
    out = np.empty_like(x)
    for i in numba.prange(n):
        for j in range(m):
            out[i, j] = math.tanh(x[i, j] * w[j])
    return np.sum(out * out)


def softmax_rows(x, w):
    n, k = x.shape
    out = np.empty_like(x)
    for i in numba.prange(n):
        m = x[i, 0]
        for j in range(1, k):
            m = max(m, x[i, j])
        s = 0.0
        for j in range(k):
            s += math.exp(x[i, j] - m)
        for j in range(k):
            out[i, j] = math.exp(x[i, j] - m) / s
    return np.sum(out * w)


def triangular(x):
    """An inner loop whose trip count grows with the row: no fixed share of a tape per row."""
    out = np.zeros_like(x)
    for i in numba.prange(x.shape[0]):
        t = 0.0
        for j in range(i + 1):
            t += x[j] * x[i]
        out[i] = math.tanh(t)
    return np.sum(out * out)


def branchy(x, a):
    """A branch per iteration (a math call's value saved on one side) and an accumulator."""
    out = np.empty_like(x)
    s = 0.0
    for i in numba.prange(x.shape[0]):
        if x[i] > 0.0:
            out[i] = x[i] ** 2 * a
        else:
            out[i] = math.sin(x[i]) * a
        s += x[i] * x[i] * 0.5
    return np.sum(out * out) + s


def inner_while(x, a):
    """A while loop along each row (its count saved per entry, as a range loop's trip)."""
    out = np.zeros_like(x)
    for i in numba.prange(x.shape[0]):
        j = 0
        t = 0.0
        while j < x.shape[1]:
            t += math.sin(x[i, j]) * a
            j += 1
        out[i, 0] = t * t
    return np.sum(out)


def three_levels(x):
    out = np.zeros((x.shape[0], x.shape[1]))
    for i in numba.prange(x.shape[0]):
        for j in range(x.shape[1]):
            s = 0.0
            for k in range(x.shape[2]):
                s += math.tanh(x[i, j, k]) * x[i, j, k]
            out[i, j] = s * s
    return np.sum(out)


def overwritten(x, w):
    """The loop overwrites ``t``, whose value from before it the reverse of ``sin(t)`` reads:
    saved before the chunks, set back after the reverse's."""
    n, m = x.shape
    t = w * 2.0
    y = math.sin(t)
    out = np.empty_like(x)
    for i in numba.prange(n):
        for j in range(m):
            t = x[i, j] * w
            out[i, j] = t * t
    return np.sum(out) + y


def overwritten_in_steps(x, w):
    """A value from before a time loop, overwritten by the prange loop in each step, read by the
    reverse after the time loop's: saved before each step's chunks, popped after their reverse."""
    t = w * 2.0
    y = math.sin(t)
    out = np.empty_like(x)
    for k in range(2):
        for i in numba.prange(x.shape[0]):
            for j in range(x.shape[1]):
                t = x[i, j] * w
                out[i, j] = t * t * y
    return np.sum(out) + y


def row_products(A, B, c):
    """A product by loops with a nonlinearity per element, ``C[i, j]`` summed along ``k`` and
    read back in the same row (``C[i, j - 1]``)."""
    n, p = A.shape
    m = B.shape[1]
    C = np.zeros((n, m))
    for i in numba.prange(n):
        for j in range(m):
            for k in range(p):
                C[i, j] += A[i, k] * B[k, j]
            C[i, j] = math.sin(C[i, j] * c)
            if j > 0:
                C[i, j] += 0.5 * C[i, j - 1]
    return np.sum(C * C)


def row_map_in_place(x, w):
    """``out[i, j] += ...``: reads the element it writes, its own row."""
    out = x * 0.5
    for i in numba.prange(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] += math.tanh(x[i, j] * w)
    return np.sum(out * out)


ROWS = [row_map, softmax_rows, triangular, branchy, heat2d, overwritten, overwritten_in_steps,
        inner_while, three_levels, matvec, row_products, row_map_in_place]
(row_map_serial, softmax_rows_serial, triangular_serial, branchy_serial, heat2d_serial,
 overwritten_serial, overwritten_in_steps_serial, inner_while_serial,
 three_levels_serial, matvec_serial, row_products_serial,
 row_map_in_place_serial) = map(serial_twin, ROWS)
mapped_serial, mapped_sum_serial = serial_twin(mapped), serial_twin(mapped_sum)
mapped_then_loop_serial, heat_serial = serial_twin(mapped_then_loop), serial_twin(heat)
heat_swapped_serial, rebound_serial = serial_twin(heat_swapped), serial_twin(rebound)

RNG = np.random.default_rng(7)
CASES = [
    ("waves", rosenbrock, rosenbrock_serial, (RNG.uniform(-1.5, 1.5, 41), 3.0), (0, 1)),
    ("gather", rosenbrock, rosenbrock_serial, (RNG.uniform(-1.5, 1.5, 41), 3.0), (0,)),
    ("gather", interior, interior_serial, (RNG.normal(size=27),), (0,)),
    ("waves", smooth, smooth_serial, (RNG.normal(size=37), 0.7), (0, 1)),
    ("rows", lse_rows, lse_rows_serial, (RNG.normal(size=(19, 6)), 1.3), (0, 1)),
    ("rows", row_max_times_sum, row_max_times_sum_serial, (0.72, RNG.normal(size=(13, 6))),
     (0, 1)),
    ("two passes", mapped, mapped_serial, (RNG.normal(size=29), 0.8), (0, 1)),
    ("two passes", mapped_sum, mapped_sum_serial, (RNG.normal(size=33), 0.6), (0, 1)),
    ("two passes", mapped_then_loop, mapped_then_loop_serial, (RNG.normal(size=26), 0.9), (0, 1)),
    ("time steps", heat, heat_serial, (RNG.normal(size=30), 0.2, 4), (0, 1)),
    ("swapped steps", heat_swapped, heat_swapped_serial, (RNG.normal(size=30), 0.2, 4), (0, 1)),
    ("rebound steps", rebound, rebound_serial, (RNG.normal(size=30), 0.3, 3), (0, 1)),
    ("rows", wrapped, wrapped_serial, (RNG.normal(size=31), 2), (0,)),
    ("chunks", pair_energy, pair_energy_serial, (RNG.normal(size=(23, 2)),), (0,)),
    ("chunks", gathered, gathered_serial, (RNG.normal(size=13), RNG.integers(0, 13, 29), 1.5),
     (0, 2)),
    ("chunk tapes", row_map, row_map_serial, (RNG.normal(size=(9, 5)), RNG.normal(size=5)), (0, 1)),
    ("chunk tapes", softmax_rows, softmax_rows_serial, (RNG.normal(size=(7, 4)),
                                                  RNG.normal(size=(7, 4))), (0, 1)),
    ("chunk tapes", triangular, triangular_serial, (RNG.normal(size=11),), (0,)),
    ("chunk tapes", branchy, branchy_serial, (RNG.normal(size=13), 0.7), (0, 1)),
    ("chunk tapes, steps", heat2d, heat2d_serial, (RNG.normal(size=(8, 6)), 0.1, 3), (0, 1)),
    ("chunk tapes", overwritten, overwritten_serial, (RNG.normal(size=(6, 4)), 0.6), (0, 1)),
    ("chunk tapes, steps", overwritten_in_steps, overwritten_in_steps_serial,
     (RNG.normal(size=(6, 4)), 0.6), (0, 1)),
    ("chunk tapes", inner_while, inner_while_serial, (RNG.normal(size=(9, 4)), 0.7), (0, 1)),
    ("chunk tapes", three_levels, three_levels_serial, (RNG.normal(size=(7, 3, 4)),), (0,)),
    # perf/bench_prange.py's matvec rows: each row reads the element it writes, its own
    ("chunk tapes", matvec, matvec_serial, (RNG.normal(size=(9, 5)), RNG.normal(size=5)), (0, 1)),
    ("chunk tapes", row_products, row_products_serial,
     (RNG.normal(size=(7, 3)), RNG.normal(size=(3, 4)), 0.8), (0, 1, 2)),
    ("chunk tapes", row_map_in_place, row_map_in_place_serial, (RNG.normal(size=(5, 7)), 0.7),
     (0, 1)),
]


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):
    before = numba.get_num_threads()
    numba.set_num_threads(min(request.param, numba.config.NUMBA_NUM_THREADS))
    yield request.param
    numba.set_num_threads(before)


@pytest.mark.parametrize("schedule, f, serial, args, argnums", CASES,
                         ids=[c[1].__name__ for c in CASES])
def test_a_prange_gradient_is_the_serial_one(schedule, f, serial, args, argnums, threads):
    value, grads = nr.value_and_grad(f, argnums)(*args)
    value_s, grads_s = nr.value_and_grad(serial, argnums)(*args)
    assert value == pytest.approx(value_s, rel=1e-12)
    for g, gs in zip(grads, grads_s):
        np.testing.assert_allclose(g, gs, rtol=1e-11, atol=1e-12)
    check_grad(f, *args, argnums=argnums)
    y, pb = nr.pullback(f, *args)
    tangents = pb(1.0)
    for k in argnums:
        np.testing.assert_allclose(tangents[k], grads[argnums.index(k)], rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("schedule, f, serial, args, argnums", CASES,
                         ids=[c[1].__name__ for c in CASES])
def test_nr_code_shows_the_parallel_schedule(schedule, f, serial, args, argnums):
    src = nr.code(nr.value_and_grad(f, argnums), *args, kind="vjp")
    assert "_prange(" in src
    # adjoint arrays allocated unfilled, zeroed in parts on the threads (or written whole by a
    # gather): no serial memset before the chunks
    if not schedule.endswith("steps"):   # (a swap's adjoints: chosen by which array is which)
        assert "_zeros_like(" not in src
    src = src.replace("_prange(_znt)", "")      # (that part's prange)
    if schedule == "waves":
        assert "the even ones in parallel, then the odd ones" in src
        assert "_pa_" not in src          # the shared adjoints, written in place
    elif schedule == "gather":
        # the forward loop's accumulators per chunk, then the reverse as a gather in chunks,
        # into an adjoint allocated unfilled (the gather writes or zeroes every element)
        assert "accumulators per chunk" in src and "its chunks run on the threads" in src
        assert src.count("_prange(") == 2 and "d_x = _empty_like(x)" in src
    elif schedule == "two passes":
        assert src.count("_prange(") == 2                            # forward and reverse
        assert "arrays written at the iteration's own index only, in place" in src
        # the math calls' values saved in each iteration's slots, not evaluated again (and no
        # tape carried from one iteration to the next: each starts from its own counter)
        code = "\n".join(ln for ln in src.splitlines() if not ln.strip().startswith("#"))
        assert code.count("math.tanh(" if "tanh" in code else "math.exp(") == 1
        assert "_k_f8_c1 = _k_f8 + (_lo1 + _k1)" in src
    elif schedule == "time steps":
        # each step's maps in one chunk per thread, the stencil's reverse in waves
        assert src.count("_prange(") == 4 and "the even ones in parallel" in src
        assert "_k_f8_c2 = _k_f8 + (_lo2 + _k2)" in src and "_restore(v, " in src
    elif schedule == "swapped steps":
        # the map in chunks, forward and reverse, though the names u and v swap arrays
        assert src.count("_prange(") == 2 and "# prange: serial" not in src
    elif schedule == "rebound steps":
        assert src.count("_prange(") == 2 and "accumulators per chunk" in src
    elif schedule.startswith("chunk tapes"):
        # each chunk runs the two-pass schedule on a tape of its own, kept from its forward for
        # its reverse (ad/chunk_tapes.py): both loops in chunks
        code = "\n".join(ln for ln in src.splitlines() if not ln.strip().startswith("#"))
        assert src.count("_prange(") == 2 and "# prange: serial" not in src
        assert "each saving on a tape of its own, kept for the chunk's reverse" in src
        assert "each popping its own tape" in src
        assert re.search(r"_kt_(f8|i8)_(\d+)\[_kb\2 \+ _c\2\] = _tape_\1_c\2\[:_k_\1_c\2\]",
                         code)
        if f is row_map:
            assert "_pa_d_w_c1" in code and "d_x[i, j] = d_x[i, j] +" in code
            assert "_pa_d_x" not in code
        if f is overwritten:
            # t from before the loop: saved before the chunks, back after the reverse's
            assert "_tape_f8[_k_f8] = t" in code and "t = _tape_f8[_k_f8]" in code
        if f is heat2d:
            assert "_restore(v, _tape_f8, _k_f8)" in code   # the buffer saved whole per step
    elif schedule == "rows":
        assert "one contiguous chunk of iterations per thread, all at once" in src
        assert "_pa_" not in src
    else:
        assert "one chunk of iterations per thread" in src and "_pa_d_" in src
    assert "_prange(" not in nr.code(nr.value_and_grad(serial, argnums), *args, kind="vjp")


def test_a_short_loop_runs_as_one_chunk_and_a_long_one_in_several():
    x = np.linspace(-1.0, 1.0, 5)
    check_grad(rosenbrock, x, 2.0, argnums=(0, 1))      # 4 iterations: fewer than 2 x 2 x 2
    check_grad(rosenbrock, x, 2.0, argnums=(0,))        # the gather in chunks, 4 iterations
    x = RNG.uniform(-1.0, 1.0, 1001)
    np.testing.assert_allclose(nr.grad(rosenbrock)(x, 2.0), nr.grad(rosenbrock_serial)(x, 2.0),
                               rtol=1e-12)


@pytest.mark.parametrize("n", [0, 1, 2, 5, 6, 7])
def test_a_gather_in_chunks_over_an_empty_or_short_loop_leaves_zeros(n, threads):
    """x of n elements: interior's loop runs max(0, n - 5) times; an empty one takes the
    scatter's branch, which must zero the adjoint allocated unfilled first."""
    x = RNG.normal(size=n)
    value, g = nr.value_and_grad(interior)(x)
    value_s, g_s = nr.value_and_grad(interior_serial)(x)
    assert value == pytest.approx(value_s, rel=1e-12, abs=1e-300)
    np.testing.assert_allclose(g, g_s, rtol=1e-12, atol=0.0)
    # iterations 2 .. n - 4 read elements 1 .. n - 2: the first and the last get no term
    assert (g[0] == 0.0 and g[-1] == 0.0 and np.all(g[1:-1] != 0.0)) if n > 5 else \
        np.all(g == 0.0)


def test_a_write_that_may_count_from_the_end_keeps_one_chunk(threads):
    x = RNG.normal(size=31)
    src = nr.code(nr.grad(wrapped), x, 2, kind="vjp")
    assert "if 0 >= 0 else 1" not in src and " >= 0 else 1" in src     # the run-time guard
    for k in (-1, 0, 3):
        np.testing.assert_allclose(nr.grad(wrapped)(x, k), nr.grad(wrapped_serial)(x, k),
                                   rtol=1e-12)
        check_grad(wrapped, x, k, argnums=(0,))
    assert " >= 0 else 1" in nr.code(nr.grad(wrapped_const), x, kind="vjp")
    check_grad(wrapped_const, x, argnums=(0,))


def recurrence(x):
    """Not a sum: ``s = 0.5 * s + ...`` (Numba refuses it in a parallel primal). Chunks that
    each summed their own ``s`` gave a silently wrong gradient until 2026-12-06."""
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s = s * 0.5 + math.sin(x[i])
    return s


def recurrence_mapped(x):
    out = np.zeros_like(x)
    s = 0.0
    for i in numba.prange(x.shape[0]):
        out[i] = x[i] * 2.0
        s = s * 0.5 + x[i]
    return np.sum(out * out) + s


def running_sum_written(x):
    """``s += x[i]`` is a sum, but ``out[i] = s`` reads it: each iteration needs the ones
    before it (a prefix sum)."""
    out = np.zeros_like(x)
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i]
        out[i] = s * x[i]
    return np.sum(out * out)


@pytest.mark.parametrize("f, args", [(carried, (RNG.normal(size=9),)),
                                     (last_read, (RNG.normal(size=8),)),
                                     (recurrence, (RNG.normal(size=30),)),
                                     (recurrence_mapped, (RNG.normal(size=30),)),
                                     (running_sum_written, (RNG.normal(size=30),))])
def test_loops_that_carry_state_or_write_arrays_stay_serial_and_right(f, args):
    src = nr.code(nr.grad(f), *args, kind="vjp")
    assert "_prange(" not in src and "# prange: serial" in src
    check_grad(f, *args, argnums=(0,))


def nested_map(x, w):
    """A prange map along each row inside a prange over the rows: the inner loop's reverse
    reads and zeroes ``d_out[i, j]``, which zeroed per-chunk copies of ``d_out`` (the schedule
    for adjoints written at no index of the loop's own) got wrong: zero for ``x``, silently."""
    out = np.zeros_like(x)
    for i in numba.prange(x.shape[0]):
        for j in numba.prange(x.shape[1]):
            out[i, j] = math.tanh(w * x[i, j]) * x[i, j]
    return np.sum(out * out)


def nested_sum(x, w):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        for j in numba.prange(x.shape[1]):
            s += math.tanh(w * x[i, j]) * x[i, 0]
    return s


def row_of_another_name(x, w):
    """Writes ``out[k, j]`` with ``k = i``: the analysis does not follow that ``k`` is the row,
    so the rows may read what other rows write; serial."""
    out = x * 0.5
    for i in numba.prange(x.shape[0]):
        k = i
        for j in range(x.shape[1]):
            out[k, j] += math.tanh(x[i, j] * w)
    return np.sum(out * out)


def rows_reading_another_row(x, w):
    """Reads row 0 of the array every row writes: serial (a race in the primal's prange)."""
    out = x * 0.5
    for i in numba.prange(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] += math.tanh(out[0, j] * w)
    return np.sum(out * out)


@pytest.mark.parametrize("f", [row_of_another_name, rows_reading_another_row])
def test_rows_that_may_read_what_other_rows_write_stay_serial_and_right(f):
    x = RNG.normal(size=(5, 7))
    src = nr.code(nr.value_and_grad(f, (0, 1)), x, 0.7, kind="vjp")
    assert "# prange: serial in this schedule" in src
    value, grads = nr.value_and_grad(f, (0, 1))(x, 0.7)
    value_s, grads_s = nr.value_and_grad(serial_twin(f), (0, 1))(x, 0.7)
    assert value == pytest.approx(value_s, rel=1e-12)
    for g, gs in zip(grads, grads_s):
        np.testing.assert_allclose(g, gs, rtol=1e-11, atol=1e-12)
    check_grad(f, x, 0.7, argnums=(0, 1))


@pytest.mark.parametrize("f", [nested_map, nested_sum])
def test_a_prange_nested_in_a_prange_is_the_serial_gradient(f):
    x = RNG.normal(size=(5, 13))
    serial = serial_twin(f)
    src = nr.code(nr.value_and_grad(f, (0, 1)), x, 0.7, kind="vjp")
    assert "_pa_d_out" not in src        # no private copy of an adjoint the loop reads
    value, grads = nr.value_and_grad(f, (0, 1))(x, 0.7)
    value_s, grads_s = nr.value_and_grad(serial, (0, 1))(x, 0.7)
    assert value == pytest.approx(value_s, rel=1e-12)
    for g, gs in zip(grads, grads_s):
        np.testing.assert_allclose(g, gs, rtol=1e-11, atol=1e-12)
    check_grad(f, x, 0.7, argnums=(0, 1))


def test_only_added_into():
    """The private-copy schedule's condition (parallel_reads.only_added_into)."""
    from numbarules.ad.parallel_reads import only_added_into
    ok = ["d_x[i, j] = d_x[i, j] + _d9", "d_x[i] += _d6 * w"]
    assert only_added_into(ast.parse("\n".join(ok)).body, {"d_x"})
    for bad in ["_d10 = d_x[i, j]", "d_x[i, j] = 0.0", "d_x[i] = d_x[i + 1] + _d",
                "d_x[i] += d_x[0]", "d_x[i] = d_x[i] * 2.0", "d_x[d_x[0]] += 1.0"]:
        assert not only_added_into(ast.parse("\n".join(ok + [bad])).body, {"d_x"}), bad


def test_a_loop_reading_the_array_it_writes_runs_its_reverse_in_chunks():
    """``out[i] = sin(out[i]) * x[i]``: the forward stays serial (an element read before it is
    overwritten), but it saves the old element and sin's value in each iteration's slots, so
    the reverse, which reads neither ``out`` nor another iteration's values, runs in chunks."""
    x = RNG.normal(size=7)
    src = nr.code(nr.grad(rewritten), x, kind="vjp")
    assert "# prange: serial in this schedule" in src
    assert src.count("_prange(_nch1)") == 1
    assert "_k_f8_c1 = _k_f8 + (_lo1 + _k1) * 2" in src
    np.testing.assert_allclose(nr.grad(rewritten)(x), 2.0 * (np.sin(2 * x) * x) * (
        2.0 * np.cos(2 * x) * x + np.sin(2 * x)), rtol=1e-13)
    check_grad(rewritten, x, argnums=(0,))


def test_a_parallel_jit_function_and_its_gradient():
    pj = nr.jit(parallel=True)(rosenbrock)
    x = RNG.uniform(-1.0, 1.0, 300)
    assert pj(x, 2.0) == pytest.approx(rosenbrock_serial(x, 2.0), rel=1e-12)
    np.testing.assert_allclose(nr.grad(pj)(x, 2.0), nr.grad(rosenbrock_serial)(x, 2.0),
                               rtol=1e-12)


def scaled_p(x, k):
    """Post computes from constants (-0.5) and from values of before the loop (k2), which the
    fused schedule evaluates before the loop: the reverse of the return reads them first."""
    k2 = k * k
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += math.sin(x[i]) * k
    return s * -0.5 + k2


@pytest.mark.parametrize("f", [serial_twin(scaled_p), scaled_p])
def test_a_return_of_constants_and_early_values_keeps_the_fused_schedule(f):
    x = RNG.normal(size=17)
    src = nr.code(nr.value_and_grad(f, (0, 1)), x, 1.3, kind="vjp")
    assert "fused forward and reverse" in src
    value, (gx, gk) = nr.value_and_grad(f, (0, 1))(x, 1.3)
    assert value == pytest.approx(-0.5 * 1.3 * np.sum(np.sin(x)) + 1.69, rel=1e-12)
    np.testing.assert_allclose(gx, -0.5 * 1.3 * np.cos(x), rtol=1e-12)
    assert gk == pytest.approx(-0.5 * np.sum(np.sin(x)) + 2.6, rel=1e-12)
    check_grad(f, x, 1.3, argnums=(0, 1))


def test_a_prange_gradient_inside_a_parallel_batch_loop():
    """Compiled callers run the chunks one after the other (no nested parallel launch, which
    Numba's workqueue threading layer aborts on)."""
    g = nr.grad(rosenbrock)

    @numba.njit(parallel=True)
    def batch(xs):
        out = np.empty_like(xs)
        for b in numba.prange(xs.shape[0]):
            out[b] = g(xs[b], 2.0)
        return out

    xs = RNG.uniform(-1.0, 1.0, (6, 50))
    got = batch(xs)
    for b in range(6):
        np.testing.assert_allclose(got[b], nr.grad(rosenbrock_serial)(xs[b], 2.0), rtol=1e-12)


def test_zero_part_zeroes_exactly_its_share_of_the_bytes():
    """A parallel kernel allocates its adjoint arrays unfilled and zeroes them in parts on the
    threads (ad/parallel.py zeroed_in_chunks): part c of n is bytes [nbytes c / n, nbytes
    (c + 1) / n), and the parts together are the whole array, with nothing outside touched."""
    from numbarules.ad.runtime import _zero_part

    @numba.njit
    def part(a, c, n):
        _zero_part(a, c, n)

    def filled(shape):
        a = np.empty(shape)
        a.reshape(-1).view(np.uint8)[:] = 0xAB      # no byte of it zero
        return a

    for shape in [(7,), (3, 5), (1,), (0,), (2, 3, 4)]:
        for n in (1, 2, 3, 8):
            whole = filled(shape)
            for c in range(n):
                a = filled(shape)
                part(a, c, n)
                b = a.reshape(-1).view(np.uint8)
                lo, hi = b.size * c // n, b.size * (c + 1) // n
                assert np.all(b[lo:hi] == 0) and np.all(b[:lo] == 0xAB) and np.all(b[hi:] == 0xAB)
                part(whole, c, n)
            assert np.all(whole == 0.0)
    f = np.asfortranarray(np.full((4, 3), 2.0))
    part(f, 0, 1)
    assert np.all(f == 0.0)


def test_the_driver_runs_each_chunk_loop_as_a_function_of_its_own():
    """The driver Python calls is compiled without ``parallel=True``; each chunk loop is a
    function of its own (ad/outline.py), which Numba's parallel passes analyse alone: the
    swapped names ``u`` and ``v`` are its arguments there, each bound once."""
    args = (RNG.normal(size=30), 0.2, 4)
    k = spec_for_call(heat_swapped, args, (0, 1)).kernels
    names = [name for name, _ in k.chunks]
    # the map's forward, the zeroing of an adjoint array (two runs of them: one function),
    # the map's reverse
    assert names == [f"_chunks_heat_swapped_p_{j}" for j in (1, 2, 3)]
    body = "\n".join(k.whole_body)
    assert "_prange(" not in body and "u = _t26" in body     # the swap, in the driver
    assert all(f"{name}(" in body for name in names)
    assert body.count("_chunks_heat_swapped_p_2(_znt, ") == 2
    for name, src in k.chunks:
        assert src.startswith(f"def {name}(") and src.count("_prange(") == 1
    # nr.code shows it: the driver's text, then its chunk functions
    drv = nr.code(nr.value_and_grad(heat_swapped, (0, 1)), *args, kind="driver")
    head, *defs = drv.split("\n\n\ndef ")
    assert head.startswith("def driver_") and "_prange(" not in head
    assert [d.split("(")[0] for d in defs] == names
    # the driver Python calls compiles without parallel=True, its chunk functions with it
    g = nr.value_and_grad(heat_swapped, (0, 1))
    g(*args)
    (driver, _), = g._drivers.values()
    assert not driver.targetoptions.get("parallel")
    ns = driver.py_func.__globals__
    assert all(ns[name].targetoptions.get("parallel") for name in names)
    check_grad(heat_swapped, *args, argnums=(0, 1))


def test_outline_takes_what_a_chunk_reads_and_refuses_a_chunk_value_read_after():
    body = ["    s = 0.0",
            "    for t in range(m):",
            "        # the chunks",
            "        for _c in _prange(n):",
            "            v = x[_c] * s",
            "            y[_c] = v",
            "        v = 2.0",
            "        s = s + v"]
    driver, chunks = outline.outline(body, "f", ("x", "y", "n", "m"))
    assert driver[:3] == ("    s = 0.0", "    for t in range(m):", "        # the chunks")
    assert driver[3] == "        _chunks_f_1(n, x, s, y)"
    assert chunks == (("_chunks_f_1", "def _chunks_f_1(n, x, s, y):\n"
                       "    for _c in _prange(n):\n        v = x[_c] * s\n        y[_c] = v\n"),)
    # v read after the loop before it is assigned (on the next step's path, or after the loop)
    assert outline.outline(body[:6] + ["        s = s + v"], "f", ("x", "y", "n", "m")) is None
    assert outline.outline(body + ["    z = v"], "f", ("x", "y", "n", "m")) is not None
    # the same loop over other arrays calls the same function
    twice = body + ["    for _c in _prange(n):", "        v = m[_c] * s", "        x[_c] = v"]
    driver, chunks = outline.outline(twice, "f", ("x", "y", "n", "m"))
    assert len(chunks) == 1 and driver[-1] == "    _chunks_f_1(n, m, s, x)"
    assert outline.outline(body[:6] + ["    z = v"], "f", ("x", "y", "n", "m")) is None


def test_a_kernel_that_cannot_be_outlined_and_rebinds_arrays_stays_serial(monkeypatch):
    """The fallback of codegen.generate: were a driver's chunk loops not outlined, the whole
    driver would compile with parallel=True, whose array analysis mis-sizes the swapped names:
    such a kernel keeps its prange loops serial (and right)."""
    from numbarules.ad import codegen
    monkeypatch.setattr(codegen.outline, "outline", lambda *args: None)
    f = types.FunctionType(heat_swapped_p.__code__, heat_swapped_p.__globals__, "heat_fallback")
    args = (RNG.normal(size=30), 0.2, 4)
    src = nr.code(nr.grad(f, (0, 1)), *args, kind="vjp")
    assert "_prange(" not in src and "this kernel binds an array name" in src
    check_grad(f, *args, argnums=(0, 1))


def test_rebinds_arrays_names_the_arrays_and_adjoints_bound_twice():
    from numbarules.ad import parallel
    a = numba.typeof(np.zeros(3))
    arrays = parallel.array_names({"u": a, "v": a, "_t4": a, "k": numba.float64},
                                  {"u": "d_u", "v": "d_v_", "_t4": "_d4", "k": "d_k"})
    assert arrays == {"u", "v", "_t4", "d_u", "d_v_", "_d4"}
    src = ("def f(u, v, k):\n    d_v_ = u\n    d_k = 0.0\n    d_k = 1.0\n    u, v = v, u\n"
           "    d_v_ = v\n    _d4 = u\n")
    assert parallel.rebinds_arrays(src, arrays) == {"u", "v", "d_v_"}
