"""check_grad itself, without the AD engine: gradients come from hand-written factories."""
import re

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import numbarules
from numbarules.testing import check_grad


def f(x, y, a):
    return x * y ** 2 + np.sum(a ** 2)


def exact_partials(x, y, a):
    return (y ** 2, 2.0 * x * y, 2.0 * a)


def factory(partials, calls=None):
    """A stand-in for nr.grad: ``factory(partials)(f, argnums)(*args)`` picks the selected
    partials. ``calls`` (a list) records every ``argnums`` it was asked for."""
    def grad(fn, argnums):
        if calls is not None:
            calls.append(argnums)

        def run(*args):
            every = partials(*args)
            return tuple(every[i] for i in argnums)
        return run
    return grad


ARGS = (1.5, -0.7, np.array([1.0, -2.0, 0.5]))


def test_correct_gradient_passes_and_reports_small_errors():
    report = check_grad(f, *ARGS, grad=factory(exact_partials))
    assert set(report) == {0, 1, 2}
    assert all(0.0 <= err < 1e-6 for err in report.values())


@settings(max_examples=30, deadline=None)
@given(x=st.floats(-3, 3), y=st.floats(-3, 3),
       a=st.lists(st.floats(-3, 3), min_size=1, max_size=80).map(np.array))
def test_correct_gradient_passes_on_drawn_inputs(x, y, a):
    check_grad(f, x, y, a, grad=factory(exact_partials))


def test_wrong_scalar_tangent_fails_naming_function_argument_and_values():
    def wrong(x, y, a):
        return (y ** 2, 2.0 * x * y + 0.25, 2.0 * a)
    with pytest.raises(AssertionError) as info:
        check_grad(f, *ARGS, grad=factory(wrong))
    msg = str(info.value)
    assert "check_grad(f)" in msg
    assert "argument 1" in msg
    assert "the scalar" in msg
    assert f"AD  = {2.0 * 1.5 * -0.7 + 0.25!r}" in msg
    fd = float(re.search(r"FD  = (\S+)", msg).group(1))
    assert fd == pytest.approx(2.0 * 1.5 * -0.7, rel=1e-8)


def test_wrong_array_element_is_named():
    def wrong(x, y, a):
        g = 2.0 * a
        g[2] = 7.0
        return (y ** 2, 2.0 * x * y, g)
    with pytest.raises(AssertionError) as info:
        check_grad(f, *ARGS, grad=factory(wrong))
    msg = str(info.value)
    assert "argument 2" in msg and "element (2,)" in msg
    assert "AD  = 7.0" in msg and "FD  = 1.0" in msg
    assert "1 of 3 checked coordinates fail" in msg


def test_two_dimensional_element_index():
    def g2(m):
        return np.sum(m ** 3)
    m = np.arange(6.0).reshape(2, 3) / 4

    def wrong(m):
        t = 3.0 * m ** 2
        t[1, 2] += 1.0
        return (t,)
    assert check_grad(g2, m, grad=factory(lambda m: (3.0 * m ** 2,)))[0] < 1e-6
    with pytest.raises(AssertionError, match=r"element \(1, 2\)"):
        check_grad(g2, m, grad=factory(wrong))


def test_wrong_shape_dtype_and_kind_fail_clearly():
    with pytest.raises(AssertionError, match=r"argument 2 \(float64 array of shape \(3,\)\) "
                                             r"should be a float64 array of shape \(3,\), "
                                             r"got a float64 array of shape \(1, 3\)"):
        check_grad(f, *ARGS, grad=factory(lambda x, y, a: (y ** 2, 2 * x * y, 2 * a[None, :])))
    with pytest.raises(AssertionError, match=r"got a float32 array of shape \(3,\)"):
        check_grad(f, *ARGS, grad=factory(lambda x, y, a: (y ** 2, 2 * x * y,
                                                           (2 * a).astype(np.float32))))
    with pytest.raises(AssertionError, match=r"argument 0 .* should be a float, got float64"):
        check_grad(f, *ARGS, grad=factory(lambda x, y, a: (np.array([y ** 2]), 2 * x * y, 2 * a)))
    with pytest.raises(AssertionError, match=r"argument 1 \(float\) should be a float, got None"):
        check_grad(f, *ARGS, grad=factory(lambda x, y, a: (y ** 2, None, 2 * a)))
    with pytest.raises(AssertionError, match=r"argument 2 .* should be an ndarray, got float"):
        check_grad(f, *ARGS, grad=factory(lambda x, y, a: (y ** 2, 2 * x * y, 1.0)))


def test_wrong_number_of_tangents_fails():
    with pytest.raises(AssertionError, match="should return a tuple of 3 tangents"):
        check_grad(f, *ARGS, grad=lambda fn, argnums: lambda *args: (1.0, 2.0))


def mixed(x, n, idx, flag, a):
    s = x * n
    for i in idx:
        s += a[i] ** 2
    return s if flag else -s


def mixed_partials(x, n, idx, flag, a):
    sign = 1.0 if flag else -1.0
    ga = np.zeros_like(a)
    for i in idx:
        ga[i] += 2.0 * a[i]
    return (sign * n, None, None, None, sign * ga)


def test_integer_boolean_and_int_array_arguments_are_skipped():
    calls = []
    args = (0.3, 4, np.array([0, 2, 2]), True, np.array([1.0, 2.0, -1.5]))
    report = check_grad(mixed, *args, grad=factory(mixed_partials, calls))
    assert calls == [(0, 4)]
    assert set(report) == {0, 4}
    check_grad(mixed, *args[:3], False, args[4], grad=factory(mixed_partials))


def test_argnums_selects():
    calls = []
    assert set(check_grad(f, *ARGS, argnums=2, grad=factory(exact_partials, calls))) == {2}
    assert set(check_grad(f, *ARGS, argnums=(1, 0), grad=factory(exact_partials, calls))) == {0, 1}
    assert set(check_grad(f, *ARGS, argnums=-1, grad=factory(exact_partials, calls))) == {2}
    assert calls == [(2,), (1, 0), (2,)]


def test_argnums_errors():
    args = (0.3, 4, np.array([0, 2, 2]), True, np.array([1.0, 2.0, -1.5]))
    with pytest.raises(TypeError, match=r"argument 1, a int; only float"):
        check_grad(mixed, *args, argnums=1, grad=factory(mixed_partials))
    with pytest.raises(TypeError, match=r"argument 2, a int64 array"):
        check_grad(mixed, *args, argnums=(0, 2), grad=factory(mixed_partials))
    with pytest.raises(ValueError, match="selects argument 5, but f gets 5 arguments"):
        check_grad(mixed, *args, argnums=5, grad=factory(mixed_partials))
    with pytest.raises(ValueError, match="no float or float-array argument"):
        check_grad(lambda n: n * 1.0, 3, grad=factory(lambda n: (None,)))


def sum_sin(a):
    return float(np.sum(np.sin(a)))


def test_float32_arrays_get_float32_tangents_and_a_looser_tolerance():
    a = np.linspace(-1.0, 1.0, 7, dtype=np.float32)
    assert check_grad(sum_sin, a, grad=factory(lambda a: (np.cos(a),)))[0] < 1e-5

    def slightly_off(a):
        return ((np.cos(a) * np.float32(1 + 2e-4)).astype(np.float32),)
    assert 1e-4 < check_grad(sum_sin, a, grad=factory(slightly_off))[0] < 1e-3
    with pytest.raises(AssertionError, match=r"rtol=0.001"):
        check_grad(sum_sin, a, grad=factory(lambda a: ((np.cos(a) * 1.01).astype(np.float32),)))
    # A float64 tangent for a float32 argument is the wrong dtype.
    with pytest.raises(AssertionError, match="got a float64 array"):
        check_grad(sum_sin, a, grad=factory(lambda a: (np.cos(a.astype(np.float64)),)))


def test_float32_scalar():
    x = np.float32(0.4)
    assert check_grad(lambda x: x * x * x, x, grad=factory(lambda x: (3 * x * x,)))[0] < 1e-5


def test_float32_only_function_falls_back_to_float32_differences():
    def only32(a):
        if a.dtype != np.float32:
            raise TypeError("float32 only")
        return np.sum(a * a, dtype=np.float32)
    a = np.array([0.5, -1.25, 2.0], dtype=np.float32)
    assert check_grad(only32, a, grad=factory(lambda a: (2 * a,)))[0] < 1e-3


def test_float64_differences_for_float32_inputs():
    seen = []

    def record(a):
        seen.append(a.dtype)
        return float(np.sum(a * a))
    check_grad(record, np.ones(3, dtype=np.float32), grad=factory(lambda a: (2 * a,)))
    assert set(seen) == {np.dtype(np.float64)}


def test_large_arrays_sample_elements_and_a_random_direction():
    calls = []

    def counted(a):
        calls.append(1)
        return float(np.sum(np.sin(a)))
    a = np.linspace(-2.0, 2.0, 500)
    assert check_grad(counted, a, grad=factory(lambda a: (np.cos(a),)))[0] < 1e-6
    assert len(calls) == 1 + 2 * 64 + 2           # base value, 64 elements, one direction

    # Elements outside the sample still show up in the directional derivative.
    def off_everywhere(a):
        return (np.cos(a) + 1e-2,)
    with pytest.raises(AssertionError):
        check_grad(counted, a, grad=factory(off_everywhere))

    def one_far_off(a):
        g = np.cos(a)
        g[123] += 10.0
        return (g,)
    with pytest.raises(AssertionError, match="element \\(123,\\)|random direction"):
        check_grad(counted, a, grad=factory(one_far_off))


def test_user_arrays_are_not_modified():
    a = np.array([1.0, -2.0, 0.5])
    b = np.arange(4.0).reshape(2, 2)

    def overwrites(a, b):
        a[0] = 100.0                     # f scribbles on its inputs; check_grad must not care
        return float(np.sum(b * b))
    check_grad(overwrites, a, b, argnums=1, grad=factory(lambda a, b: (None, 2 * b)))
    assert a.tolist() == [1.0, -2.0, 0.5] and b.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    check_grad(f, *ARGS, grad=factory(exact_partials))
    assert ARGS[2].tolist() == [1.0, -2.0, 0.5]


def test_a_gradient_that_writes_into_its_input_is_caught_and_undone():
    a = np.array([1.0, -2.0, 0.5])

    def scribbling(x, y, a):
        a *= 2.0
        return (y ** 2, 2 * x * y, a)
    with pytest.raises(AssertionError, match="wrote into argument 2 \\(restored\\)"):
        check_grad(f, 1.5, -0.7, a, grad=factory(scribbling))
    assert a.tolist() == [1.0, -2.0, 0.5]


def test_non_scalar_f_is_rejected():
    with pytest.raises(TypeError, match="must return a real scalar"):
        check_grad(lambda a: a * 2.0, np.ones(2), grad=factory(lambda a: (2 * np.ones(2),)))


def test_numba_functions_and_explicit_step():
    @numba.njit
    def poly(x, a):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i] * x ** i
        return s

    def partials(x, a):
        return (sum(i * a[i] * x ** (i - 1) for i in range(1, len(a))), x ** np.arange(len(a)))
    a = np.array([1.0, -0.5, 0.25, 2.0])
    assert max(check_grad(poly, 0.7, a, grad=factory(partials)).values()) < 1e-6
    report = check_grad(poly, 0.7, a, eps=1e-4, rtol=1e-4, grad=factory(partials))
    assert max(report.values()) < 1e-4


def test_nan_gradient_fails():
    with pytest.raises(AssertionError, match="AD  = nan"):
        check_grad(lambda x: x * x, 1.0, grad=factory(lambda x: (float("nan"),)))


def test_default_gradient_is_numbarules_grad_looked_up_at_call_time(monkeypatch):
    calls = []
    monkeypatch.setattr(numbarules, "grad", factory(lambda x: (2.0 * x,), calls), raising=False)
    assert set(check_grad(lambda x: x * x, 1.25)) == {0}
    assert calls == [(0,)]


# --- struct and tuple arguments --------------------------------------------------------------------

@numbarules.struct
class Layer(numbarules.Any):
    w: numbarules.Matrix[numbarules.Float64]
    b: numbarules.Vector[numbarules.Float64]
    scale: float
    width: int


@numbarules.struct
class Inner(numbarules.Any):
    a: float
    v: numbarules.Vector[numbarules.Float64]


@numbarules.struct
class Outer(numbarules.Any):
    inner: Inner
    c: float
    n: int


@numbarules.struct
class Counts(numbarules.Any):
    n: int


def layer_loss(layer, x):
    h = layer.w @ x + layer.b
    return layer.width * layer.scale * float(h @ h)


def layer_partials(layer, x):
    h = layer.w @ x + layer.b
    c = layer.width
    T = numbarules.Tangent[Layer]
    return (T(2 * c * layer.scale * np.outer(h, x), 2 * c * layer.scale * h, c * float(h @ h), None),
            2 * c * layer.scale * layer.w.T @ h)


LAYER = Layer(np.array([[0.5, -1.0], [2.0, 0.25], [1.0, 1.5]]), np.array([0.1, -0.2, 0.3]), 0.7, 2)
XL = np.array([0.4, -1.3])


def outer_loss(o, y):
    return o.inner.a * np.sum(o.inner.v ** 2) + o.c * y * o.n


def outer_partials(o, y):
    ti = numbarules.Tangent[Inner](float(np.sum(o.inner.v ** 2)), 2 * o.inner.a * o.inner.v)
    return (numbarules.Tangent[Outer](ti, y * o.n, None), o.c * o.n)


OUTER = Outer(Inner(1.5, np.array([1.0, -2.0, 0.5])), -0.75, 3)


def tuple_loss(t, s):
    (x, a), k = t
    return x * np.sum(a ** 3) * k + s


def tuple_partials(t, s):
    (x, a), k = t
    return (((np.sum(a ** 3) * k, 3 * x * a ** 2 * k), None), 1.0)


TUPLE = ((0.8, np.array([1.0, -0.5])), 2)


def test_struct_arguments_are_checked_leaf_by_leaf():
    calls = []
    report = check_grad(layer_loss, LAYER, XL, grad=factory(layer_partials, calls))
    assert calls == [(0, 1)] and set(report) == {0, 1}
    assert report[0] < 1e-6

    def wrong_scale(layer, x):
        t, gx = layer_partials(layer, x)
        return (t._replace(scale=t.scale + 0.5), gx)
    with pytest.raises(AssertionError, match=r"argument 0 disagrees .* at field scale:"):
        check_grad(layer_loss, LAYER, XL, grad=factory(wrong_scale))

    def wrong_weight(layer, x):
        t, gx = layer_partials(layer, x)
        w = t.w.copy()
        w[1, 0] += 1.0
        return (t._replace(w=w), gx)
    with pytest.raises(AssertionError, match=r"at field w, element \(1, 0\):(?s:.*)1 of 10 checked"):
        check_grad(layer_loss, LAYER, XL, grad=factory(wrong_weight))


def test_nested_struct_fields_are_perturbed_by_rebuilding_the_structs():
    assert set(check_grad(outer_loss, OUTER, 0.3, grad=factory(outer_partials))) == {0, 1}

    def wrong_inner(o, y):
        t, gy = outer_partials(o, y)
        return (t._replace(inner=t.inner._replace(v=t.inner.v * np.array([1.0, 1.0, 2.0]))), gy)
    with pytest.raises(AssertionError, match=r"at field inner, field v, element \(2,\)"):
        check_grad(outer_loss, OUTER, 0.3, grad=factory(wrong_inner))


def test_tuple_arguments_are_checked_entry_by_entry():
    calls = []
    report = check_grad(tuple_loss, TUPLE, 0.2, grad=factory(tuple_partials, calls))
    assert calls == [(0, 1)] and set(report) == {0, 1}

    def wrong_entry(t, s):
        ((gx, ga), k), gs = tuple_partials(t, s)
        return (((gx, ga + np.array([0.0, 1.0])), k), gs)
    with pytest.raises(AssertionError, match=r"at entry 0, entry 1, element \(1,\)"):
        check_grad(tuple_loss, TUPLE, 0.2, grad=factory(wrong_entry))


def test_struct_and_tuple_tangents_must_have_the_arguments_structure():
    T = numbarules.Tangent[Layer]
    good, gx = layer_partials(LAYER, XL)

    def returning(t):
        return factory(lambda layer, x: (t, gx))
    with pytest.raises(AssertionError, match=r"argument 0 \(Layer\) should be an "
                                             r"nr.Tangent\[Layer\], got tuple of 4"):
        check_grad(layer_loss, LAYER, XL, grad=returning(tuple(good)))
    with pytest.raises(AssertionError, match=r"should be an nr.Tangent\[Layer\], got Tangent\[Inner\]"):
        check_grad(layer_loss, LAYER, XL, grad=returning(numbarules.Tangent[Inner](1.0, XL)))
    with pytest.raises(AssertionError, match=r"argument 0, field width \(int\) should be None"):
        check_grad(layer_loss, LAYER, XL, grad=returning(good._replace(width=0.0)))
    with pytest.raises(AssertionError, match=r"argument 0, field w \(float64 array of shape \(3, 2\)\)"
                                             r" should be a float64 array of shape \(3, 2\), got a "
                                             r"float64 array of shape \(2, 3\)"):
        check_grad(layer_loss, LAYER, XL, grad=returning(good._replace(w=good.w.T.copy())))
    with pytest.raises(AssertionError, match=r"field b .* should be a float64 array .* got a float32"):
        check_grad(layer_loss, LAYER, XL, grad=returning(good._replace(b=good.b.astype(np.float32))))
    with pytest.raises(AssertionError, match=r"field scale \(float\) should be a float, got None"):
        check_grad(layer_loss, LAYER, XL, grad=returning(T(good.w, good.b, None, None)))
    nested = outer_partials(OUTER, 0.3)[0]
    with pytest.raises(AssertionError, match=r"field inner \(Inner\) should be an nr.Tangent\[Inner\]"):
        check_grad(outer_loss, OUTER, 0.3, argnums=0,
                   grad=lambda fn, argnums: lambda *a: (nested._replace(inner=(1.0, XL)),))

    def tuple_returning(t):
        return lambda fn, argnums: lambda *a: (t,)
    with pytest.raises(AssertionError, match=r"argument 0 \(tuple of 2\) should be a tuple of 2 "
                                             r"tangents, got tuple of 1"):
        check_grad(tuple_loss, TUPLE, 0.2, argnums=0, grad=tuple_returning(((1.0, XL),)))
    with pytest.raises(AssertionError, match=r"argument 0, entry 1 \(int\) should be None"):
        check_grad(tuple_loss, TUPLE, 0.2, argnums=0,
                   grad=tuple_returning(((1.0, np.ones(2)), 0.0)))


def test_argnums_selects_structs_and_tuples_but_not_integers():
    calls = []
    assert set(check_grad(layer_loss, LAYER, XL, argnums=0,
                          grad=factory(layer_partials, calls))) == {0}
    assert set(check_grad(tuple_loss, TUPLE, 0.2, argnums=(0,),
                          grad=factory(tuple_partials, calls))) == {0}
    assert calls == [(0,), (0,)]
    with pytest.raises(TypeError, match=r"argument 1, a int; only float"):
        check_grad(lambda c, n: c.n * n * 1.0, Counts(2), 3, argnums=1,
                   grad=factory(lambda c, n: (None, None)))
    with pytest.raises(TypeError, match=r"argument 0, a Counts; only float"):
        check_grad(lambda c, n: c.n * n * 1.0, Counts(2), 3, argnums=0,
                   grad=factory(lambda c, n: (None, None)))


def test_writes_into_arrays_inside_structs_are_caught_and_undone():
    layer = Layer(LAYER.w.copy(), LAYER.b.copy(), 0.7, 2)

    def scribbling(layer, x):
        layer.b[1] = 9.0
        return layer_partials(LAYER, x)
    with pytest.raises(AssertionError, match=r"wrote into argument 0, field b, \(restored\)"):
        check_grad(layer_loss, layer, XL, grad=factory(scribbling))
    assert layer.b.tolist() == LAYER.b.tolist()


def test_struct_arguments_with_the_engine():
    # nr.grad returns Tangent[Layer] for a flat struct (None for the int field).
    report = check_grad(layer_loss_loops, LAYER, XL)
    assert set(report) == {0, 1} and report[0] < 1e-6


def layer_loss_loops(layer, x):
    s = 0.0
    for j in range(x.shape[0]):
        h = layer.w[j, 1] * x[j] + layer.b[j]
        s += h * h
    return layer.width * layer.scale * s


def outer_loss_loops(o, y):
    s = 0.0
    for i in range(o.inner.v.shape[0]):
        s += o.inner.v[i] * o.inner.v[i]
    return o.inner.a * s + o.c * y * o.n


def tuple_loss_loops(t, s):
    (x, a), k = t
    r = 0.0
    for i in range(a.shape[0]):
        r += a[i] * a[i] * a[i]
    return x * r * k + s


def test_nested_struct_and_tuple_arguments_with_the_engine():
    # Awaits the engine's nested Tangent[Inner] and tuple tangents.
    assert set(check_grad(outer_loss_loops, OUTER, 0.3)) == {0, 1}
    assert set(check_grad(tuple_loss_loops, TUPLE, 0.2)) == {0, 1}


# --- check_rrule: cotangents, array outputs, structs ---------------------------------------------

@numbarules.generic
def sumsq(x: numbarules.Vector[numbarules.Float64]):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@numbarules.generic
def plain_sum(x: numbarules.Vector[numbarules.Float64]):
    return x.sum()


def test_check_rrule_seeds_cotangents_so_a_pullback_ignoring_dy_fails():
    from numbarules.testing import check_rrule
    x = np.array([0.5, -1.0, 2.0])

    @numbarules.rrule(sumsq)
    def _(x: numbarules.Vector[numbarules.Float64]):
        def pb(dy):
            return (2.0 * dy * x,)
        return sumsq(x), pb
    assert set(check_rrule(sumsq, x)) == {0}

    @numbarules.rrule(sumsq)
    def _(x: numbarules.Vector[numbarules.Float64]):      # replaces it: right only at dy = 1
        def pb(dy):
            return (2.0 * x,)
        return sumsq(x), pb
    with pytest.raises(AssertionError, match=r"check_rrule\(sumsq\) with the cotangent dy = "
                                             r"(?s:.*)disagrees with central finite differences"):
        check_rrule(sumsq, x)

    @numbarules.rrule(plain_sum)
    def _(x: numbarules.Vector[numbarules.Float64]):      # right only at dy = 1
        n = x.shape[0]

        def pb(dy):
            return (np.ones(n),)
        return plain_sum(x), pb
    with pytest.raises(AssertionError, match="disagrees with central finite differences"):
        check_rrule(plain_sum, x)


@numbarules.generic
def running(x: numbarules.Vector[numbarules.Float64]):
    return np.cumsum(x)


def test_check_rrule_checks_array_outputs_as_vector_jacobian_products():
    from numbarules.testing import check_rrule
    x = np.array([0.5, -1.0, 2.0, 0.25])

    @numbarules.rrule(running)
    def _(x: numbarules.Vector[numbarules.Float64]):
        def pb(dy):
            return (np.cumsum(dy[::-1])[::-1],)           # J^T dy
        return running(x), pb
    assert set(check_rrule(running, x)) == {0}

    @numbarules.rrule(running)
    def _(x: numbarules.Vector[numbarules.Float64]):
        def pb(dy):
            return (np.cumsum(dy),)                       # J dy: the transpose is missing
        return running(x), pb
    with pytest.raises(AssertionError, match=r"with a random cotangent of shape \(4,\)"):
        check_rrule(running, x)


@numbarules.struct
class Diag(numbarules.AbstractMatrix):
    diag: numbarules.Vector[numbarules.Float64]
    k: int


@numbarules.generic
def wtrace(x: Diag, s: float):
    return s * x.diag.sum()


def test_check_rrule_checks_struct_arguments():
    from numbarules.testing import check_rrule
    D = Diag(np.array([1.0, 2.0, 3.0]), 4)

    @numbarules.rrule(wtrace)
    def _(x: Diag, s: float):
        n = x.diag.shape[0]

        def pb(dy):
            return (numbarules.Tangent[Diag](np.full(n, s * dy), None), dy * x.diag.sum())
        return wtrace(x, s), pb
    assert set(check_rrule(wtrace, D, 0.5)) == {0, 1}

    @numbarules.rrule(wtrace)
    def _(x: Diag, s: float):
        n = x.diag.shape[0]

        def pb(dy):                                       # the struct's tangent ignores dy
            return (numbarules.Tangent[Diag](np.full(n, s), None), dy * x.diag.sum())
        return wtrace(x, s), pb
    with pytest.raises(AssertionError, match=r"argument 0 disagrees .* at field diag, element"):
        check_rrule(wtrace, D, 0.5)


def tdot(t, s):
    (x, a), k = t
    return s * x * np.sum(a) * k


def test_check_rrule_checks_tuple_arguments():
    from numbarules.testing import check_rrule
    t = ((0.8, np.array([1.0, -0.5, 2.0])), 2)

    def add_rule(wrong):
        @numbarules.rrule(tdot, numbarules.Any, numbarules.Float64)
        def _(t, s):
            (x, a), k = t
            sa = np.sum(a)
            n = a.shape[0]
            c = 1.0 if wrong else 0.0

            def pb(dy):
                da = np.full(n, (dy + c * (1.0 - dy)) * s * x * k)     # wrong: dy ignored there
                return (((dy * s * sa * k, da), None), dy * x * sa * k)
            return tdot(t, s), pb
    add_rule(False)
    assert set(check_rrule(tdot, t, 0.3)) == {0, 1}
    add_rule(True)
    with pytest.raises(AssertionError, match=r"argument 0 disagrees .* at entry 0, entry 1, element"):
        check_rrule(tdot, t, 0.3)
