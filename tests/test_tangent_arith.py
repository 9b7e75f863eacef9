"""Tangent arithmetic: nr.Tangent[S] adds, subtracts, negates and scales field by field (not
as a tuple), nr.zero_tangent and nr.update, in Python and in compiled code."""
import numba
import numpy as np

import numbarules as nr


@nr.struct
class Inner(nr.Any):
    v: nr.Vector[nr.Float64]
    pair: nr.Any


@nr.struct
class Params(nr.Any):
    w: nr.Vector[nr.Float64]
    b: float
    n: int
    inner: Inner


def loss(p):
    return np.sum(p.w * p.w) * p.b + p.n + np.sum(p.inner.v) * p.inner.pair[0]


def params():
    return Params(np.array([1.0, 2.0]), 0.5, 3, Inner(np.array([0.5, -1.0]), (2.0, 4)))


def same(a, b):
    if isinstance(a, tuple):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is b
    return np.allclose(a, b)


def test_tangents_combine_field_by_field_in_python_and_in_compiled_code():
    p = params()
    g = nr.grad(loss)(p)
    T, TI = nr.Tangent[Params], nr.Tangent[Inner]
    want_sum = T(2 * g.w, 2 * g.b, None, TI(2 * g.inner.v, (2 * g.inner.pair[0], None)))
    assert same(g + g, want_sum) and len(g + g) == 4       # not a concatenation
    assert same(g - g, nr.zero_tangent(p))
    assert same(0.5 * g, g * 0.5) and same(-g, g * -1.0)
    assert same(nr.zero_tangent(p), T(np.zeros(2), 0.0, None, TI(np.zeros(2), (0.0, None))))

    @numba.njit
    def combine(p, g):
        return g + g, g - g, 0.5 * g, g * 0.5, -g, nr.zero_tangent(p)
    for got, want in zip(combine(p, g), (g + g, g - g, 0.5 * g, g * 0.5, -g, nr.zero_tangent(p))):
        assert same(got, want)


grad_loss = nr.grad(loss)


@numba.njit
def train(p, steps, lr):
    for _ in range(steps):
        p = nr.update(p, grad_loss(p), -lr)
    return p


def test_update_is_a_gradient_step_in_python_and_in_compiled_code():
    p = params()
    g = nr.grad(loss)(p)
    q = nr.update(p, g, -0.1)
    assert np.allclose(q.w, p.w - 0.1 * g.w) and q.b == p.b - 0.1 * g.b and q.n == 3
    assert np.allclose(q.inner.v, p.inner.v - 0.1 * g.inner.v) and q.inner.pair[1] == 4
    assert same(train(p, 1, 0.1), q)
    r = p
    for _ in range(3):
        r = nr.update(r, nr.grad(loss)(r), -0.05)
    assert same(train(p, 3, 0.05), r)
    assert loss(r) < loss(p)
