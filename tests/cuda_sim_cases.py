"""CUDA semantics under the simulator (DESIGN, "CUDA", level 1).

Run by tests/test_cuda_sim.py in a subprocess with NUMBA_ENABLE_CUDASIM=1 set before Numba is
imported (the file name keeps pytest from collecting it in the main run). Kernels run as Python:
the device vjps numbarules generates run line by line, generic functions and gradient objects
called inside kernels run their compiled CPU code (dispatched at run time). A few hundred
threads in all.
"""

import math

import numpy as np
import pytest

import numbarules as nr
from numba import cuda
import numbarules.cuda as nrc
from numbarules.cuda import glue

from cuda_zoo import CASES, IDS, cpu_gradients

N = 24          # threads per program


def test_running_in_the_simulator():
    assert glue.SIMULATOR


def rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


def as_tuple(out, argnums):
    return (out,) if isinstance(argnums, int) else tuple(out)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_map_grad_matches_the_cpu_gradient(case):
    arrays = case.make(N)
    ref = cpu_gradients(case, arrays)
    out = as_tuple(nrc.map_grad(case.f, case.argnums, tape=case.tape)(*arrays), case.argnums)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        host = o.copy_to_host()
        assert host.shape == (N,) and np.all(np.isfinite(host))
        assert rel_err(host, r) <= 1e-12


def _kernel(g, n, k):
    """Value and k gradients of gradient object g at each index, for arity n."""
    if n == 1:
        def kernel(val, d0, x0):
            i = cuda.grid(1)
            if i < val.shape[0]:
                v, d = g(x0[i])
                val[i] = v
                d0[i] = d
    elif k == 1:
        def kernel(val, d0, x0, x1):
            i = cuda.grid(1)
            if i < val.shape[0]:
                v, d = g(x0[i], x1[i])
                val[i] = v
                d0[i] = d
    else:
        def kernel(val, d0, d1, x0, x1):
            i = cuda.grid(1)
            if i < val.shape[0]:
                v, d = g(x0[i], x1[i])
                val[i] = v
                d0[i] = d[0]
                d1[i] = d[1]
    return cuda.jit(kernel)


@pytest.mark.parametrize("case", CASES[::3], ids=IDS[::3])
def test_value_and_grad_inside_a_kernel_matches_the_cpu(case):
    arrays = case.make(N)
    ref = cpu_gradients(case, arrays)
    g = nrc.value_and_grad(case.f, case.argnums, tape=case.tape)
    outs = [np.zeros(N) for _ in range(len(ref) + 1)]
    _kernel(g, len(arrays), len(ref))[1, 32](*outs, *arrays)
    values = np.array([case.f(*(a[i].item() for a in arrays)) for i in range(N)])
    assert rel_err(outs[0], values) <= 1e-12
    for o, r in zip(outs[1:], ref):
        assert rel_err(o, r) <= 1e-12


def test_the_rules_ran_on_the_device():
    from cuda_zoo import rule_caller, rrule_caller
    x = np.linspace(-1.0, 1.0, 8) + 0.013
    # ste_round's rule says 1 where the derived gradient of floor would be 0
    np.testing.assert_allclose(nrc.map_grad(rule_caller)(x).copy_to_host(), 3.0 + 2.0 * x,
                               rtol=1e-12)
    # smooth_abs's rule scales its x-tangent by 2
    eps = np.full(8, 0.25)
    y = np.sqrt(x * x + eps)
    np.testing.assert_allclose(nrc.map_grad(rrule_caller)(x, eps).copy_to_host(),
                               2.0 * x / y * x + y, rtol=1e-12)


def test_device_arrays_in_device_arrays_out():
    from cuda_zoo import poly
    x = np.linspace(-1, 1, 16)
    out = nrc.map_grad(poly)(cuda.to_device(x))
    host = nrc.map_grad(poly)(x)
    assert hasattr(out, "copy_to_host") and hasattr(host, "copy_to_host")
    np.testing.assert_array_equal(out.copy_to_host(), host.copy_to_host())


def test_a_tape_overflow_raises_instead_of_returning_wrong_gradients():
    from cuda_zoo import spin              # n iterations, 2 saved values each
    x, n = np.linspace(-1, 1, 8), np.full(8, 6, dtype=np.int64)
    with pytest.raises(nr.DifferentiationError) as info:
        nrc.map_grad(spin, tape=4)(x, n)
    assert "spin" in str(info.value) and "tape=12" in str(info.value)
    # What a thread computes past the bound: NaN tangents and the entries it needed (the
    # device vjp that in-kernel gradient objects call too).
    from numba import float64, int64
    from numbarules.cuda import gradients as device_grad
    spec, _ = device_grad.prepare_gradient(nrc.grad(spin), (float64, int64))
    vjp = device_grad.device_vjp(spec, 4)
    out, need = np.zeros(8), np.zeros(8, dtype=np.int64)

    @cuda.jit
    def kernel(out, need, x, n):
        i = cuda.grid(1)
        if i < out.shape[0]:
            r = vjp(x[i], n[i], 1.0)
            out[i] = r[1]
            need[i] = r[3]

    kernel[1, 8](out, need, x, n)
    assert np.all(np.isnan(out)) and np.all(need == 12)
    ok = nrc.map_grad(spin, tape=12)(x, n).copy_to_host()
    np.testing.assert_allclose(ok, cpu_gradients(CASES[IDS.index("spin")], (x, n))[0],
                               rtol=1e-12)


def test_generic_functions_inside_kernels_with_arrays_and_scalars():
    @nr.generic
    def accumulate(v: nr.Vector, w: nr.Real):
        s = 0.0
        for i in range(v.shape[0]):
            s += w * v[i]
        return s

    @accumulate.method
    def accumulate(v: nr.Vector, w: nr.Integer):
        return float(w * v.shape[0])

    @nr.generic
    def fill(v: nr.Vector, value: nr.Real):
        for i in range(v.shape[0]):
            v[i] = value
        return v.shape[0]

    @cuda.jit
    def kernel(out, v, scratch):
        i = cuda.grid(1)
        if i == 0:
            out[0] = accumulate(v, 2.0)
            out[1] = accumulate(v, 3)
            fill(scratch, 4.5)

    out, v, scratch = np.zeros(2), np.arange(5.0), cuda.to_device(np.zeros(3))
    kernel[1, 4](out, v, scratch)
    assert out.tolist() == [20.0, 15.0]
    assert scratch.copy_to_host().tolist() == [4.5, 4.5, 4.5]


def test_map_grad_sees_a_new_method():
    @nr.generic
    def k(x: nr.Real):
        return 2.0 * x

    def f(x):
        return k(x) * x

    x = np.linspace(0.5, 1.5, 8)
    mg = nrc.map_grad(f)
    np.testing.assert_allclose(mg(x).copy_to_host(), 4.0 * x, rtol=1e-12)

    @k.method
    def k(x: nr.Float64):
        return x * x

    np.testing.assert_allclose(mg(x).copy_to_host(), 3.0 * x * x, rtol=1e-12)


def test_bad_arrays_are_refused_clearly():
    from cuda_zoo import two_args
    mg = nrc.map_grad(two_args, argnums=(0, 1))
    with pytest.raises(ValueError, match="equal lengths"):
        mg(np.ones(3), np.ones(4))
    with pytest.raises(TypeError, match="1-D"):
        mg(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(TypeError, match="no tangent"):
        nrc.map_grad(two_args, argnums=1)(np.ones(3), np.ones(3, dtype=np.int64))


def test_map_grad_sees_a_new_rule():
    @nr.generic
    def soft(x: nr.Float64):
        return math.log(1.0 + math.exp(x))

    def f(x):
        return 2.0 * soft(x)

    x = np.linspace(-1.0, 1.0, 8)
    mg = nrc.map_grad(f)
    np.testing.assert_allclose(mg(x).copy_to_host(), 2.0 / (1.0 + np.exp(-x)), rtol=1e-12)

    @nr.scalar_rule(soft, nr.Float64)
    def _(x):
        return (0.25,)           # not the derivative: shows the rule is now in use

    np.testing.assert_allclose(mg(x).copy_to_host(), np.full(8, 0.5), rtol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_device_driver_of_value_and_grad_matches_the_cpu(case):
    # Inside a simulated kernel a gradient object runs its CPU code (see the module docstring);
    # the device function that real device code calls instead is run here directly.
    from numbarules.cuda import gradients as device_grad
    arrays = case.make(N)
    ref = cpu_gradients(case, arrays)
    g = nrc.value_and_grad(case.f, case.argnums, tape=case.tape)
    eltypes = tuple(glue.element_type(a) for a in arrays)
    device_g = cuda.jit(device=True)(device_grad.driver(g, eltypes))
    outs = [np.zeros(N) for _ in range(len(ref) + 1)]
    _kernel(device_g, len(arrays), len(ref))[1, 32](*outs, *arrays)
    values = np.array([case.f(*(a[i].item() for a in arrays)) for i in range(N)])
    assert rel_err(outs[0], values) <= 1e-12
    for o, r in zip(outs[1:], ref):
        assert rel_err(o, r) <= 1e-12


def test_a_tape_overflow_inside_a_checkpointed_step_raises_too():
    from cuda_zoo import settle_checkpointed
    x, n = np.linspace(0.2, 2.0, 8), np.full(8, 5, dtype=np.int64)
    with pytest.raises(nr.UnsupportedSyntaxError, match="tape="):
        nrc.map_grad(settle_checkpointed)(x, n)
    with pytest.raises(nr.DifferentiationError) as info:
        nrc.map_grad(settle_checkpointed, tape=1)(x, n)     # the turns need 3 entries
    assert "settle_checkpointed" in str(info.value) and "tape=3" in str(info.value)
    got = nrc.map_grad(settle_checkpointed, tape=3)(x, n).copy_to_host()
    ref = [nr.grad(settle_checkpointed)(a, 5) for a in x]
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_non_differentiable_and_opt_out_on_the_device():
    from cuda_zoo import declared
    x = np.linspace(-0.5, 1.5, 8)
    np.testing.assert_allclose(nrc.map_grad(declared)(x).copy_to_host(),
                               np.clip(x, 0.0, 1.0) + 2.0 * x, rtol=1e-12)


def _sq_for_clear(x):
    return x * x + 1.0


def test_clear_cache_lets_go_of_what_the_device_tables_hold():
    """The device tables (device specializations, helpers, map_grad and tape gradients, device
    vjps) live on what they are about, as the CPU's do: nr.clear_cache(f) and nr.clear_cache()
    empty them, and a function given to map_grad is freed afterwards."""
    import gc
    import sys
    import weakref
    from numbarules import registry
    from numbarules.cuda import gradients as g_mod, methods
    m_mod = sys.modules["numbarules.cuda.map_grad"]     # the package exports the function

    @nr.generic
    def act(x: nr.Float64):
        return 2.0 * x

    def f(x):
        return act(x) * x

    x = np.linspace(0.1, 1.0, 4)
    np.testing.assert_allclose(nrc.map_grad(f)(x).copy_to_host(), 4.0 * x)
    np.testing.assert_allclose(nrc.map_grad(_sq_for_clear)(x).copy_to_host(), 2.0 * x)
    assert registry.peek(f, m_mod.MAPS)
    specs = list(registry.peek(f, "_nr_ad").values())
    assert any(registry.peek(s, g_mod.VJPS) for s in specs)
    nr.clear_cache(f)
    assert not registry.peek(f, m_mod.MAPS)
    assert not any(registry.peek(s, g_mod.VJPS) for s in specs)
    assert registry.peek(_sq_for_clear, m_mod.MAPS)     # others' entries stay
    np.testing.assert_allclose(nrc.map_grad(f)(x).copy_to_host(), 4.0 * x)   # and work again

    nr.clear_cache(act)
    assert not any(registry.peek(m, methods.SPECS) for m in act.methods)

    ref = weakref.ref(f)
    del f, specs
    nr.clear_cache()
    for owner in [_sq_for_clear, *act.methods]:
        for name in (methods.SPECS, methods.HELPER, g_mod.GRADIENTS, m_mod.MAPS):
            assert not registry.peek(owner, name), (owner, name)
    gc.collect()
    assert ref() is None


def swing(x, k):
    s = 0.0
    for i in range(5):
        s += math.sin(k * x + i) * x
    return s


def test_jvp_and_hvp_inside_a_kernel_match_the_cpu():
    jv, hv = nr.jvp(swing, (0, 1)), nr.hvp(swing, 0)

    @cuda.jit
    def kernel(y, dy, h, x, k):
        i = cuda.grid(1)
        if i < y.shape[0]:
            a, b = jv(x[i], k[i], (1.0, 0.5))
            y[i] = a
            dy[i] = b
            h[i] = hv(x[i], k[i], 1.0)

    x, k = np.linspace(-1.0, 1.0, 8), np.linspace(0.5, 2.0, 8)
    y, dy, h = np.empty(8), np.empty(8), np.empty(8)
    kernel[1, 8](y, dy, h, x, k)
    for i in range(8):
        ref = nr.jvp(swing, (0, 1))(x[i], k[i], (1.0, 0.5))
        assert rel_err(y[i], ref[0]) < 1e-12 and rel_err(dy[i], ref[1]) < 1e-12
        g = nr.grad(swing, 0)
        fd = (g(x[i] + 1e-6, k[i]) - g(x[i] - 1e-6, k[i])) / 2e-6
        assert rel_err(h[i], fd) < 1e-6
