"""Struct arguments get nr.Tangent[S] tangents; fields with no tangent are None."""
import numpy as np
import pytest

import numbarules as nr


@nr.struct
class Layer(nr.Any):
    w: nr.Matrix[nr.Float64]
    b: nr.Vector[nr.Float64]
    scale: float
    width: int


@nr.struct
class Diagonal(nr.AbstractMatrix):
    diag: nr.Vector[nr.Float64]


def forward(layer, x):
    s = 0.0
    for i in range(layer.w.shape[0]):
        h = layer.b[i]
        for j in range(layer.w.shape[1]):
            h += layer.w[i, j] * x[j]
        s += layer.scale * h * h
    return s * layer.width


def hand_written(layer, x):
    """d forward / d (w, b, scale, x)."""
    h = layer.w @ x + layer.b
    c = layer.width
    return (2 * c * layer.scale * np.outer(h, x), 2 * c * layer.scale * h,
            c * float(h @ h), 2 * c * layer.scale * layer.w.T @ h)


def test_struct_tangent_fields_match_a_hand_written_adjoint():
    rng = np.random.default_rng(1)
    layer = Layer(rng.normal(size=(3, 2)), rng.normal(size=3), 0.7, 2)
    x = rng.normal(size=2)
    t, gx = nr.grad(forward, argnums=(0, 1))(layer, x)
    assert type(t) is nr.Tangent[Layer]
    dw, db, dscale, dx = hand_written(layer, x)
    np.testing.assert_allclose(t.w, dw, rtol=1e-12)
    np.testing.assert_allclose(t.b, db, rtol=1e-12)
    assert t.scale == pytest.approx(dscale, rel=1e-12)
    assert t.width is None
    np.testing.assert_allclose(gx, dx, rtol=1e-12)


def test_struct_through_a_generic_function_method():
    @nr.generic
    def total(x: nr.AbstractMatrix):
        s = 0.0
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                s += x[i, j]
        return s

    @total.method
    def total(x: Diagonal):
        s = 0.0
        for i in range(x.diag.shape[0]):
            s += x.diag[i] * x.diag[i]
        return s

    def loss(D, A):
        return total(D) * total(A)

    D, A = Diagonal(np.array([1.0, 2.0])), np.ones((2, 2))
    tD, tA = nr.grad(loss, argnums=(0, 1))(D, A)
    np.testing.assert_allclose(tD.diag, 2 * D.diag * 4.0)
    np.testing.assert_allclose(tA, np.full((2, 2), 5.0))


def test_rule_pullback_returning_a_struct_tangent():
    @nr.generic
    def trace(x: Diagonal):
        return 0.0 + x.diag.sum()

    @nr.rrule(trace)
    def _(x: Diagonal):
        n = x.diag.shape[0]

        def pb(dy):
            return (nr.Tangent[Diagonal](np.full(n, dy)),)
        return trace(x), pb

    D = Diagonal(np.array([1.0, 2.0, 3.0]))
    t = nr.grad(trace)(D)
    np.testing.assert_allclose(t.diag, np.ones(3))
    assert set(nr.testing.check_rrule(trace, D)) == {0}    # the struct's float leaves checked


def test_a_struct_built_from_differentiated_values_passes_tangents_back():
    def build(x):
        d = Diagonal(x * 3.0)
        return d.diag[0] * x[1]
    np.testing.assert_allclose(nr.grad(build)(np.array([2.0, 5.0])), [15.0, 6.0])
