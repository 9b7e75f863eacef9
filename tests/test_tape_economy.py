"""What the forward saves for the reverse pass (issue 15, tape economy): values the reverse can
recompute cheaply are recomputed, not saved, and only where that is sound.

Each form is checked three ways (nr.grad, nr.pullback, central finite differences), with zero,
one and several steps, and the forward's source is checked for the saves it must (not) make."""

import math
import re

import numpy as np
import pytest

import numbarules as nr

from test_rebinding import check, slices

VEC = np.array([0.4, -0.3, 0.7, 0.2, 0.5])


def pair_forces(x, c, steps):
    """The N-body pair loop: temporaries bound under ``if j != i``."""
    n = x.shape[0]
    u = x.copy()
    f = np.zeros_like(x)
    for t in range(steps):
        for i in range(n):
            f[i] = 0.0
            for j in range(n):
                if j != i:
                    d = u[j] - u[i]
                    r2 = d * d + 0.1
                    w = c / (r2 * math.sqrt(r2))
                    f[i] += d * w
        for i in range(n):
            u[i] += 0.01 * f[i]
    return np.sum(u * u)


def guarded_neighbour(x, c, steps):
    """A branch reading an index only valid when it runs (u[i + 1] at the last i), and an else
    branch with temporaries of its own."""
    u = x.copy()
    n = u.shape[0]
    for t in range(steps):
        s = 0.0
        for i in range(n):
            if i < n - 1:
                d = u[i + 1] - u[i]
                s += d * d * c
            else:
                e = u[i] * c
                s += math.sin(e)
        u[0] = u[0] + 0.1 * s
    return np.sum(u * u)


def read_after_branch(x, c, steps):
    """A value bound in a branch and read after it (or in a later iteration when the branch
    does not run): it must be saved."""
    u = x.copy()
    n = u.shape[0]
    for t in range(steps):
        q = 0.5
        for i in range(n):
            if u[i] > 0.0:
                q = u[i] * c
            u[i] = u[i] + 0.1 * q * q
    return np.sum(u * u)


def reads_carried(x, c, steps):
    """A branch temporary reading a scalar the loop changes: not recomputable."""
    u = x.copy()
    n = u.shape[0]
    s = 0.0
    for t in range(steps):
        for i in range(n):
            if i % 2 == 0:
                h = s * c + u[i]
                s = s + h * u[i]
            else:
                s = s * 0.9
    return s + np.sum(u)


def nested_branches(x, c, steps):
    u = x.copy()
    n = u.shape[0]
    s = 0.0
    for t in range(steps):
        for i in range(n):
            if i % 2 == 0:
                a = u[i] * c
                if a > 0.0:
                    b = a * a + u[i]
                    s += b * a
                else:
                    s += abs(a) * c
        u[0] = u[0] * 0.9 + 0.01 * s
    return s + np.sum(u * u)


def energy(a):
    return np.sum(a * a)


def callee_reads_array(x, c, steps):
    """A sweep calling a function of the array it writes: the callee's pullback reads the array
    (its residuals hold a reference), so the sweep saves what it overwrites element by element."""
    u = x.copy()
    s = 0.0
    for t in range(steps):
        for i in range(u.shape[0]):
            s += energy(u) * c
            u[i] = u[i] * c + 0.1
    return s + np.sum(u)


def product_reads_array(x, c, steps):
    """The same with the adjoint of an array product reading it."""
    u = x.copy()
    s = 0.0
    for t in range(steps):
        for i in range(u.shape[0]):
            s += np.sum(u * x) * c
            u[i] = u[i] * c + 0.1
    return s + np.sum(u)


FORMS = [pair_forces, guarded_neighbour, read_after_branch, reads_carried, nested_branches,
         callee_reads_array, product_reads_array]


@pytest.mark.parametrize("f", FORMS)
@pytest.mark.parametrize("steps", [0, 1, 3])
def test_branch_temporaries(f, steps):
    check(f, VEC, 0.7, steps)


def saved(f, args):
    """The names the forward of nr.grad(f) saves the old values of before assigning them."""
    src = nr.code(nr.grad(f, argnums=(0, 1)), *args)
    return set(re.findall(r"_tape_f8\[_k_f8\] = (\w+)\n", src + "\n"))


def test_branch_temporaries_are_recomputed_not_saved():
    # the pair loop saves nothing per pair but the elements of f it accumulates into
    assert saved(pair_forces, (VEC, 0.7, 3)) & {"d", "r2", "w"} == set()
    assert saved(guarded_neighbour, (VEC, 0.7, 3)) & {"d", "e"} == set()
    assert saved(nested_branches, (VEC, 0.7, 3)) & {"a", "b"} == set()
    # read after the branch, or reading what the loop changes: saved
    assert "q" in saved(read_after_branch, (VEC, 0.7, 3))
    assert "h" in saved(reads_carried, (VEC, 0.7, 3))
    # and the pullback recomputes them inside the branch, where the indices are valid
    pb = nr.code(nr.grad(guarded_neighbour, argnums=(0, 1)), VEC, 0.7, 3, kind="pullback")
    branch = pb[pb.index("if _t"):]
    assert re.search(r"if _t\w+:\n\s+_t\w+ = i \+ 1\n\s+_t\w+ = u\[_t\w+\]", branch)


def test_a_sweep_saves_the_array_whole_when_its_reverse_reads_none_of_it():
    # the force loop reads f[i] (f[i] += ...) but its reverse reads nothing of f: f is copied
    # once before the loop instead of element by element (sound: nothing reads the elements the
    # element-wise restores would write before the copy overwrites them all)
    src = nr.code(nr.grad(pair_forces, argnums=(0, 1)), VEC, 0.7, 3)
    assert "_push_view(_tape_f8, _k_f8, f)" in src
    assert "_tape_f8[_k_f8] = f[" not in src
    # a sweep whose reverse reads the array (a callee's pullback, a product's adjoint): saved
    # element by element
    for f in (callee_reads_array, product_reads_array):
        src = nr.code(nr.grad(f, argnums=(0, 1)), VEC, 0.7, 3)
        assert "_tape_f8[_k_f8] = u[i]" in src and "_push_view(_tape_f8" not in src, f.__name__


def copied_each_step(x, c, steps):
    """The copy form of a time step: the sweep overwrites u reading only v, the step's copy of
    it; nothing in the reverse reads what the sweep overwrites (the product after the loop
    reads u's last values)."""
    n = x.shape[0]
    u = x.copy()
    for t in range(steps):
        v = u.copy()
        for i in range(1, n - 1):
            u[i] = v[i] + c * (v[i - 1] - 2.0 * v[i] + v[i + 1]) + 0.1 * v[i] * v[i]
    return np.sum(u * u)


def copied_each_checkpointed_step(x, c, steps):
    """The same under nr.checkpointed: its steps run again in the pullback, which keeps no arena
    (the fuzzer's seed 62000 #16: an arena copy there was a name the pullback never bound)."""
    n = x.shape[0]
    u = x.copy()
    for t in nr.checkpointed(range(steps), snapshots=2):
        v = u.copy()
        for i in range(1, n - 1):
            u[i] = v[i] + c * (v[i - 1] - 2.0 * v[i] + v[i + 1]) + 0.1 * v[i] * v[i]
    return np.sum(u * u)


def read_before_the_sweep(x, c, steps):
    """A product reads u before a sweep overwrites it, outside any loop the two share: its
    reverse runs after the sweep's reverse and needs the old values, which must be saved."""
    u = x.copy()
    s = np.sum(u * u)
    for i in range(u.shape[0]):
        u[i] = c * x[i] + steps
    return s + np.sum(u * x)


def test_a_store_saves_only_what_a_reverse_running_after_it_reads():
    # The sweep's old values are read by no statement that may run before it (2026-12-07:
    # the copy form of reaction-diffusion stopped saving 105 MB per gradient)
    src = nr.code(nr.grad(copied_each_step, argnums=(0, 1)), VEC, 0.3, 3)
    assert "_push_view(_tape_f8" not in src and "_tape_f8[_k_f8] = u[" not in src
    # each step's copy, kept for the reverse, is a block of the gradient's arena
    # (tape.arena_copy): a checked gradient also checks that no two copies share memory
    assert "v = _arena_f8[_ka_f8:_ka_f8 + u.size].reshape(u.shape)" in src
    for steps in (0, 1, 3):
        check(copied_each_step, VEC, 0.3, steps)
        check(copied_each_checkpointed_step, VEC, 0.3, steps)
    # a reader before it, in no loop around both: saved, and right
    src = nr.code(nr.grad(read_before_the_sweep, argnums=(0, 1)), VEC, 0.3, 2)
    assert "_push_view(_tape_f8, _k_f8, u)" in src or "_tape_f8[_k_f8] = u[" in src
    check(read_before_the_sweep, VEC, 0.3, 2)


# --- a rule's residuals in loops: on the number tapes ------------------------------------------

def soft(x, k):
    return math.tanh(k * x) / k


@nr.rrule(soft, nr.Float64, nr.Int64)
def soft_rule(x, k):
    t = math.tanh(k * x)
    # residuals: a float and an int (two tapes), popped in reverse order
    def soft_pullback(dy):
        return (dy * (1.0 - t * t) * (k // k), None)
    return t / k, soft_pullback


def soft_with_array(x, k):
    return x * 2.0


@nr.rrule(soft_with_array, nr.Float64, nr.Int64)
def soft_with_array_rule(x, k):
    w = np.full(2, x)          # an array residual: kept on a list per call site
    def pullback(dy):
        return (dy * 2.0 + 0.0 * w[0], None)
    return x * 2.0, pullback


def rules_in_loops(x, c, steps):
    s = 0.0
    for t in range(steps):
        for i in range(x.shape[0]):
            if x[i] > -0.35:
                s += soft(c * x[i] + s * 0.1, 2) * x[i]
            else:
                s += soft(x[i], 3) + soft_with_array(x[i], 1) * 0.5
    return s


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_a_rules_residuals_in_loops_go_on_the_tapes(steps):
    """A rule called in a loop saves its residuals per call; numbers go on the number tapes (a
    typed list per call site made Numba compile its list methods for each residual type: 0.27 s
    of a 0.42 s first gradient). Arrays still go on a list. Pullbacks may be called again."""
    check(rules_in_loops, VEC, 0.8, steps)
    src = nr.code(rules_in_loops, VEC, 0.8, steps)
    fwd = src.split("def bwd_")[0]
    assert len(re.findall(r"_tape_f8\[_k_f8\] = _rs\d+\[\d\]", fwd)) == 2, fwd
    assert len(re.findall(r"_tape_i8\[_k_i8\] = _rs\d+\[\d\]", fwd)) == 2, fwd
    assert len(re.findall(r"_l_rs\d+\.append", fwd)) == 1, fwd      # the array residual
    y, pb = nr.pullback(rules_in_loops, VEC, 0.8, steps)
    first = pb(1.0)
    np.testing.assert_array_equal(pb(1.0)[0], first[0])


def two_saved(x, w, n):
    """An inner loop overwriting two values the reverse needs, on one tape, every iteration."""
    s = 0.0
    for k in range(x.shape[0]):
        for i in range(n):
            a = math.sin(x[(k + i) % x.shape[0]] * w + 0.01 * s)
            b = math.sin(a)
            s += a * b
    return s


def saved_in_a_branch(x, w, n):
    """One value assigned in a branch: its tape keeps the push before each assignment."""
    s = 0.0
    for k in range(x.shape[0]):
        for i in range(n):
            a = x[(k + i) % x.shape[0]] * w
            if a > 0.1:
                a = math.cos(a)
            b = math.sin(a)
            s += a * b
    return s


@pytest.mark.parametrize("f", [two_saved, saved_in_a_branch])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_saves_stored_one_iteration_ahead(f, n):
    # the shifted saves (codegen, tape.shifted_saves) lay the tape out as the push before each
    # assignment does: zero, one and several iterations, and a pullback run twice
    check(f, VEC, 0.8, n)
    y, pb = nr.pullback(f, VEC, 0.8, n)
    first = pb(1.0)
    np.testing.assert_array_equal(pb(1.0)[0], first[0])


def test_which_saves_are_shifted():
    fwd = nr.code(two_saved, VEC, 0.8, 3)
    assert re.search(r"# \w+, a, b: saved as assigned, for the next iteration", fwd)
    assert "_tape_f8 = _reserve(_tape_f8, _k_f8, (_n2 + 1) * 3)" in fwd
    assert "_tape_f8[_k_f8 + 1] = a\n" in fwd and "_tape_f8[_k_f8 + 4] = a\n" in fwd
    assert "_tape_f8[_k_f8 + 2] = b\n" in fwd and "_tape_f8[_k_f8 + 5] = b\n" in fwd
    assert "_k_f8 += 3" in fwd
    # a value assigned twice in the body (once in a branch) is pushed before each assignment,
    # and so is every other value on its tape; the branch's test, alone on its own, is shifted
    fwd = nr.code(saved_in_a_branch, VEC, 0.8, 3)
    assert "# _t10: saved as assigned" in fwd and "f8 + " not in fwd


# --- arrays kept only for their shapes ---------------------------------------------------------

def broadcast_steps(x, M, steps):
    """A row broadcast against a matrix each step: the row's adjoint sums the matrix-shaped
    gradient down to the row's shape (kept: a 1-D shape, not the matrix's)."""
    v = x.copy()
    for t in range(steps):
        w = v * 0.5
        P = w + M
        Q = P * P
        v = 0.1 * (Q[0] + Q[1]) + v
    return np.sum(v * v)


def transposed_steps(M, c, steps):
    """Fortran-layout temporaries (arithmetic on a transpose): kept as shapes, stood for by a
    transposed empty array of the reversed shape."""
    A = M.T * 1.0
    for t in range(steps):
        B = A * 0.9
        A = B + c * M.T
        A = A * (1.0 + 0.1 * c)
    return np.sum(A * A)


def column_steps(M, c, steps):
    """A column of a Fortran matrix: 1-D arrays of layout F kept as shapes."""
    w = M[:, 0] * 1.0
    for t in range(steps):
        z = w * 0.5
        w = z + c * M[:, 1]
    return np.sum(w * w)


def checkpointed_sliced_steps(u0, k, steps):
    u = u0.copy()
    for t in nr.checkpointed(range(steps), snapshots=1):
        lap = np.zeros_like(u)
        lap[1:-1, 1:-1] = (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                           - 4.0 * u[1:-1, 1:-1])
        u = u + k * lap + 0.1 * u * (1.0 - u)
    return np.sum(u * u)


def _kept(f, args):
    """(arrays kept whole, arrays kept as shapes) by the forward of nr.grad(f)."""
    src = nr.code(nr.grad(f, argnums=(0, 1)), *args, kind="forward")
    return (set(re.findall(r"_lr_(\w+)\.append\(", src)),
            set(re.findall(r"_ls_(\w+)\.append\(\1\.shape\)", src)))


def test_arrays_the_reverse_reads_only_the_shapes_of_keep_their_shapes():
    U = np.random.default_rng(3).random((6, 5)) * 0.5
    # The slices form of reaction-diffusion (test_rebinding.slices): of the step's twelve arrays
    # dropped, the reverse reads the values of three: lap (d_k = sum(g * lap)) and the
    # product's two factors. u too is read for its shape alone (its slices are taken again for
    # theirs; u * u after the loop reads its last value, which is not dropped).
    whole, shapes = _kept(slices, (U, 0.1, 2))
    assert "lap" in whole and len(whole) == 3, whole
    assert "u" in shapes and len(shapes) == 9, shapes
    assert not whole & shapes
    x, M = np.array([0.3, -0.2, 0.5]), np.array([[0.1, 0.4, -0.3], [0.2, -0.1, 0.6]])
    whole, shapes = _kept(broadcast_steps, (x, M, 2))
    assert "w" in shapes and "P" in whole, (whole, shapes)     # 2 * P * g reads P
    whole, shapes = _kept(transposed_steps, (M, 0.7, 2))
    assert "B" in shapes, (whole, shapes)
    F = np.asfortranarray(M.T)
    assert "z" in _kept(column_steps, (F, 0.7, 2))[1]
    for steps in (0, 1, 3):
        check(slices, U, 0.1, steps)
        check(checkpointed_sliced_steps, U, 0.1, steps)
        check(broadcast_steps, x, M, steps)
        check(transposed_steps, M, 0.7, steps)
        check(column_steps, F, 0.7, steps)
    # the residuals: 3 arrays a step and 9 shapes, not 12 arrays
    big = np.random.default_rng(4).random((40, 40)) * 0.5
    kept = nr.ad_stats(slices, big, 0.1, 10, argnums=(0, 1))["residual_bytes"]
    assert kept < 5 * 10 * big.nbytes, kept


def test_a_large_tape_takes_the_block_the_last_one_freed():
    """Arrays of 4 MB or more that kernels allocate live in blocks of numbarules' own; freed, a
    block is kept for the next large array (numba_glue.blocks): a tape of a state per step
    is written into pages written before, not into fresh ones the OS zeroes on every call.
    The NRT's counts stay balanced, the gradients are the same call after call, and
    nr.clear_cache() gives the block back."""
    import numba
    from numbarules.api import spec_for_call
    from numbarules.numba_glue.blocks import BLOCKS
    from test_rebinding import swap
    from test_trust import nrt_counts

    u0 = np.random.default_rng(5).random((32, 32)) * 0.5
    args = (u0, 0.1, 600)                  # 600 states of 8 KB: a 4.9 MB tape
    g = nr.grad(swap, argnums=(0, 1))
    spec = spec_for_call(g, args)
    at = spec.kernels.residuals.index("_tape_f8")
    _, res = spec.fwd(*args)
    tape = res[at]
    assert tape.nbytes >= 1 << 22
    first = tape.ctypes.data
    del res, tape
    assert BLOCKS.spare_bytes() >= 1 << 22
    _, res = spec.fwd(*args)
    assert res[at].ctypes.data == first           # the same block again
    del res

    def run():
        for _ in range(3):
            g(*args)                # (the gradients returned, dropped: nothing left alive)
    allocated, freed, made, unmade = nrt_counts(run)
    assert allocated == freed and made == unmade > 0
    d1, d2 = g(*args), g(*args)
    np.testing.assert_array_equal(d1[0], d2[0])
    assert d1[1] == d2[1]
    primal, h = numba.njit(swap), 1e-6
    ref_k = (primal(u0, 0.1 + h, 600) - primal(u0, 0.1 - h, 600)) / (2 * h)
    assert d1[1] == pytest.approx(ref_k, rel=1e-6)
    for idx in [(3, 4), (16, 16), (30, 1)]:
        up, down = u0.copy(), u0.copy()
        up[idx] += h
        down[idx] -= h
        ref = (primal(up, 0.1, 600) - primal(down, 0.1, 600)) / (2 * h)
        assert d1[0][idx] == pytest.approx(ref, rel=1e-5, abs=1e-8)

    nr.clear_cache()
    assert BLOCKS.spare_bytes() == 0
    np.testing.assert_array_equal(g(*args)[0], d1[0])


def handed_to_a_callee(x, c, steps):
    """v goes to a callee, whose pullback may read it through residuals of its own (the array,
    not a copy the reverse restores v[0] into), then is written and dropped: kept by
    reference."""
    u = x * 1.0
    s = 0.0
    for t in range(steps):
        v = u * c
        s += energy(v)
        v[0] = 5.0 * c
        u = v + 0.1
    return s + np.sum(u)


def handed_to_a_ufunc(x, c, steps):
    """v goes to np.arctan, whose rule keeps its argument for the pullback, then is written and
    dropped: a copy of v would leave the rule reading the written array, not the values the
    reverse restores (a wrong d_x and d_c, silently, before 2026-12-07 21:15 UTC)."""
    u = x * 1.0
    s = 0.0
    for t in range(steps):
        v = u * c
        w = np.arctan(v) + np.maximum(v, 0.3) + np.power(v, 1.5)
        v[0] = 5.0 * c
        s += np.sum(w)
        u = v * 0.9 + 0.1
    return s + np.sum(u * u)


def returned_by_a_rule(x, c, steps):
    """v is np.tanh's result, which the array rule's pullback keeps (``1 - y * y``), then is
    written in place and dropped: a copy of v would leave the pullback reading the written
    array (a wrong d_x and d_c, silently, in stop 51: 0.941 against 0.954)."""
    u = x * 1.0
    s = 0.0
    for t in range(steps):
        v = np.tanh(u * c)
        v[0] *= v[1] * c + 1.2
        s += np.sum(v * v)
        u = v * 0.9
    return s + np.sum(u * u)


def test_arrays_a_step_drops_keep_their_pages_between_calls():
    """The arrays the slices form keeps per step are fresh ones no other name holds: the
    forward keeps copies of them in the gradient's arena (analysis._kept_as_copies), whose
    blocks join the process's pool when freed (numba_glue.blocks) and come back on the next
    call: the arrays NumPy allocated each step were freed at the end of each call and their
    pages faulted in again by the next (79,000 page faults a call at 256 x 256 and 200 steps).
    Gradients the same call after call; nr.clear_cache() empties the pool."""
    import resource
    from numbarules.numba_glue.blocks import BLOCKS
    from test_trust import nrt_counts

    src = nr.code(nr.grad(slices, argnums=(0, 1)), np.ones((4, 4)), 0.1, 2)
    for v in ("lap", "_t26", "_t27"):           # the three arrays kept (see above)
        assert f"_lr_{v}.append(_arena_f8[_ka_f8:_ka_f8 + {v}.size].reshape({v}.shape))" \
            in src, v
    # not where something else may hold the array: a callee's residuals, np.sum's
    src = nr.code(nr.grad(handed_to_a_callee, argnums=(0, 1)), VEC, 0.7, 3)
    assert "_lr_v.append(v)" in src and "_lr_u.append(u)" in src and "_arena" not in src
    src = nr.code(nr.grad(handed_to_a_ufunc, argnums=(0, 1)), np.abs(VEC), 0.7, 3)
    assert "_lr_v.append(v)" in src
    src = nr.code(nr.grad(returned_by_a_rule, argnums=(0, 1)), VEC, 0.8, 3)
    assert "_lr_v.append(v)" in src
    for steps in (0, 1, 3):
        check(handed_to_a_callee, VEC, 0.7, steps)
        check(handed_to_a_ufunc, np.abs(VEC), 0.7, steps)
        check(returned_by_a_rule, VEC, 0.8, steps)
    u0 = np.random.default_rng(6).random((128, 128)) * 0.5
    args = (u0, 0.1, 100)                  # 3 arrays of 128 KB a step: 39 MB kept
    g = nr.grad(slices, argnums=(0, 1))
    d1 = g(*args)
    assert BLOCKS.spare_bytes() >= 30 << 20     # the arena's blocks of 4 MB and more
    faults = []
    for _ in range(2):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        d2 = g(*args)
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
    assert min(faults) < 39e6 / 4096 / 5, faults      # (each fresh page is one fault)
    np.testing.assert_array_equal(d1[0], d2[0])
    assert d1[1] == d2[1]
    allocated, freed, made, unmade = nrt_counts(lambda: g(*args))
    assert allocated == freed and made == unmade > 0
    nr.clear_cache()
    assert BLOCKS.spare_bytes() == 0
    small = (u0[:12, :12], 0.1, 3)
    check(slices, *small)


def test_the_block_pool_under_threads():
    """The pool's take and give from four threads at once (ctypes calls release the GIL): every
    block a thread holds is its own (a word written into it is still there after the others
    ran), the pool never holds more than its bytes, and release empties it. The kernels of a
    parallel gradient free their arrays from the threading layer's threads."""
    import ctypes
    import threading
    from numbarules.numba_glue import blocks

    blocks.BLOCKS.ensure()
    lib = blocks.BLOCKS.library
    take = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64)(
        lib.get_pointer_to_function(blocks.TAKE_SYMBOL))
    give = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lib.get_pointer_to_function(blocks._GIVE))
    errors, held_max = [], []

    def work(k):
        rng = np.random.default_rng(k)
        mine = []
        for step in range(3000):
            if mine and (len(mine) > 3 or rng.random() < 0.5):
                data, mark = mine.pop(int(rng.integers(len(mine))))
                if ctypes.c_int64.from_address(data).value != mark:
                    errors.append((k, step))
                give(data)
            else:
                data = take(int(rng.integers(4, 300)) << 20)   # (the 1 GB bound reached)
                mark = k * 1_000_000 + step
                ctypes.c_int64.from_address(data).value = mark
                mine.append((data, mark))
            if step % 500 == 0:
                held_max.append(blocks.BLOCKS.spare_bytes())
        for data, _ in mine:
            give(data)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert max(held_max) <= blocks._POOL_BYTES
    assert 0 < blocks.BLOCKS.spare_bytes() <= blocks._POOL_BYTES
    blocks.BLOCKS.release()
    assert blocks.BLOCKS.spare_bytes() == 0
