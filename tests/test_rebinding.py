"""Arrays rebound in loops and branches: the idioms of time-stepping code (issue 15).

Each form is checked three ways (nr.grad, nr.pullback, central finite differences), with zero,
one and several steps (a loop that runs zero times leaves the first binding in place)."""

import math

import numpy as np
import pytest

import numbarules as nr


def fd(f, args, i, h=1e-6):
    a = list(args)
    x = a[i]
    if np.isscalar(x):
        a[i] = x + h
        fp = f(*a)
        a[i] = x - h
        return (fp - f(*a)) / (2 * h)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[k] += h
        xm[k] -= h
        a[i] = xp
        fp = f(*a)
        a[i] = xm
        g[k] = (fp - f(*a)) / (2 * h)
    return g


def check(f, *args, argnums=(0, 1)):
    g = nr.grad(f, argnums=argnums)(*args)
    y, pb = nr.pullback(f, *args)
    assert y == pytest.approx(f(*args), rel=1e-12)
    t = pb(1.0)
    for k, i in enumerate(argnums):
        ref = fd(f, args, i)
        np.testing.assert_allclose(g[k], ref, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(t[i], ref, rtol=1e-6, atol=1e-7)


def swap(u0, k, steps):
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
            s += u[i, j] * u[i, j] + 0.5 * v[i, j]
    return s


def copy_each_step(u0, k, steps):
    n = u0.shape[0]
    u = u0.copy()
    for t in range(steps):
        v = u.copy()
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                lap = v[i - 1, j] + v[i + 1, j] + v[i, j - 1] + v[i, j + 1] - 4.0 * v[i, j]
                u[i, j] = v[i, j] + k * lap + 0.1 * v[i, j] * (1.0 - v[i, j])
    return np.sum(u * u)


def slices(u0, k, steps):
    u = u0.copy()
    for t in range(steps):
        lap = np.zeros_like(u)
        lap[1:-1, 1:-1] = (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                           - 4.0 * u[1:-1, 1:-1])
        u = u + k * lap + 0.1 * u * (1.0 - u)
    return np.sum(u * u)


def rotate_three(x, c, steps):
    a = x.copy()
    b = x * 0.5
    d = np.zeros_like(x)
    for t in range(steps):
        for i in range(x.shape[0]):
            d[i] = c * a[i] + b[i] * a[i]
        a, b, d = d, a, b
    return np.sum(a * a) + b[0] + 2.0 * d[1]


def alias_new(x, c, steps):
    u = x.copy()
    for t in range(steps):
        un = np.zeros_like(u)
        for i in range(1, x.shape[0] - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un
    return np.sum(u * u * u)


def argument_rebound(x, c, steps):
    for t in range(steps):
        x = x * c + np.tanh(x)
    return np.sum(x * x)


def in_a_branch(x, c, steps):
    u = x * 1.0
    for t in range(steps):
        if u[0] > 0.3:
            u = u * c + 0.1
        else:
            u = u[::-1].copy()
    return np.sum(u * u) + u[0]


def view_of_rebound(x, c, steps):
    s = 0.0
    u = x.copy()
    for t in range(steps):
        w = u[1:3]
        s += w[0] * w[1] * c
        u = u * 0.9 + c
    return s + np.sum(u)


def shapes_change(x, c, steps):
    s = 0.0
    for t in range(steps):
        y = x[t:] * c
        s += np.sum(y * y)
    return s


def temporary_in_inner_loop(x, c, steps):
    s = 0.0
    u = x.copy()
    for t in range(steps):
        for i in range(x.shape[0]):
            w = u * u[i]
            s += np.sum(w) * c
        u = u * c
    return s


GRID = np.random.default_rng(0).random((5, 6)) * 0.5
VEC = np.array([0.4, -0.3, 0.7, 0.2, 0.5])


@pytest.mark.parametrize("f", [swap, copy_each_step, slices])
@pytest.mark.parametrize("steps", [0, 1, 3])
def test_reaction_diffusion_in_three_forms(f, steps):
    check(f, GRID, 0.1, steps)


@pytest.mark.parametrize("f", [rotate_three, alias_new, argument_rebound, in_a_branch,
                               view_of_rebound, shapes_change, temporary_in_inner_loop])
@pytest.mark.parametrize("steps", [0, 1, 3])
def test_rebinding_forms(f, steps):
    check(f, VEC, 0.7, steps)


def test_the_forms_compare_with_hand_written_adjoints():
    # argument_rebound with one step: f = sum((x c + tanh x)^2)
    x, c = VEC, 0.7
    y = x * c + np.tanh(x)
    gx, gc = nr.grad(argument_rebound, argnums=(0, 1))(x, c, 1)
    np.testing.assert_allclose(gx, 2 * y * (c + 1 - np.tanh(x) ** 2), rtol=1e-12)
    assert gc == pytest.approx(np.sum(2 * y * x), rel=1e-12)


def test_saved_arrays_are_references_not_copies():
    # A swap saves two references per step; the sweep that overwrites v's interior, which it
    # does not read, saves v whole before it runs (one copy per step, no element pushes).
    st = nr.ad_stats(swap, GRID, 0.1, 4, argnums=(0, 1))
    floats = 4 * GRID.size * 8              # 4 steps x one copy of the 5 x 6 grid
    assert floats <= st["tape_bytes"] <= floats + 8 * 30      # and the inner loops' trip counts
    assert st["residual_bytes"] < st["tape_bytes"] + 4 * GRID.nbytes + 1000
    g = nr.grad(swap, argnums=(0, 1))
    fwd = nr.code(g, GRID, 0.1, 4)
    assert "_push_view(_tape_f8, _k_f8, v)" in fwd and "_tape_f8[_k_f8] = " not in fwd
    assert "_restore(v, _tape_f8, _k_f8)" in nr.code(g, GRID, 0.1, 4, kind="pullback")


def recurrence(x, c, steps):
    u = x.copy()
    for t in range(steps):
        for i in range(1, u.shape[0]):
            u[i] = u[i - 1] * c + math.sin(u[i])
    return np.sum(u * u)


def maybe_the_same(x, c, steps):
    u = x.copy()
    v = np.zeros_like(x)
    for t in range(steps):
        if t % 2 == 0:
            w = v
        else:
            w = u               # the array the sweep reads: its elements must be saved one by one
        for i in range(u.shape[0]):
            w[i] = u[i] * c + 0.1 * u[i] * u[i]
    return np.sum(u * u) + np.sum(v * v)


def fresh_scratch(x, c, steps):
    u = x.copy()
    for t in range(steps):
        lap = np.zeros_like(u)
        for i in range(1, u.shape[0] - 1):
            lap[i] = u[i - 1] - 2.0 * u[i] + u[i + 1]
        u = u + c * lap * u
    return np.sum(u * u)


@pytest.mark.parametrize("f", [recurrence, maybe_the_same, fresh_scratch])
@pytest.mark.parametrize("steps", [0, 1, 3])
def test_whole_array_saves_only_where_sound(f, steps):
    check(f, VEC, 0.7, steps)


def test_whole_array_saves_only_where_sound_code():
    # a sweep reading the array it writes saves the values its reverse reads one by one (the
    # u[i - 1] and u[i] of each step) and the array whole; one writing an array that may be the
    # array its reverse reads saves the elements it overwrites one by one; a fresh scratch array
    # saves nothing at all (the arrays a step drops are kept, as copies in the gradient's arena,
    # where no other name holds them: test_tape_economy)
    for f, element, whole in ((recurrence, True, True), (maybe_the_same, True, False),
                              (fresh_scratch, False, False)):
        src = nr.code(nr.grad(f, argnums=(0, 1)), VEC, 0.7, 3)
        assert ("_tape_f8[_k_f8] = " in src) == element, f.__name__
        assert ("_push_view(_tape_f8" in src) == whole, f.__name__


def view_used_after_rebinding(x, c, steps):
    u = x.copy()
    w = u[1:3]
    for t in range(steps):
        u = u * c
    return np.sum(w) + np.sum(u)


def tuple_of_rebound(x, c, steps):
    u = x.copy()
    s = 0.0
    for t in range(steps):
        u = u * c
        p = (u, c)
        s += p[0][0]
    return s


def test_refusals_name_the_construct():
    with pytest.raises(nr.UnsupportedSyntaxError, match=r"(?s)a view .* of the array 'u', "
                                                        r"which is rebound.*w = u\[1:3\]"):
        nr.grad(view_used_after_rebinding)(VEC, 0.5, 2)
    with pytest.raises(nr.UnsupportedSyntaxError, match=r"holding the array 'u', which is "
                                                        r"rebound|tuple 'p'"):
        nr.grad(tuple_of_rebound)(VEC, 0.5, 2)
