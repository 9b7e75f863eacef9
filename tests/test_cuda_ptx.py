"""CUDA code generation for compute capability 9.0 with no GPU and no driver (DESIGN, "CUDA",
level 2): every device kernel the CUDA tests use compiles to PTX through NVVM."""

import math

import numpy as np
import pytest

import numbarules as nr

cuda = pytest.importorskip("numba.cuda")   # a skip only where numba-cuda is not installed
import numbarules.cuda as nrc                               # noqa: E402
from numba.cuda import types                                # noqa: E402
from numbarules.cuda import glue                            # noqa: E402

from cuda_zoo import CASES, IDS, act                        # noqa: E402

CC = (9, 0)


@pytest.fixture(scope="module", autouse=True)
def sm90():
    if glue.SIMULATOR:
        pytest.fail("the PTX tests must run without NUMBA_ENABLE_CUDASIM")
    undo = glue.set_compute_capability_for_compiles(CC)
    yield
    undo()


def ptx_of(kernel, argtypes):
    py_func = getattr(kernel, "py_func", kernel)
    ptx, _ = cuda.compile_ptx(py_func, tuple(argtypes), cc=CC)
    assert ".target sm_90" in ptx
    return ptx


def element_types(case):
    return tuple(glue.element_type(a) for a in case.make(2))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_map_grad_kernel_compiles_to_ptx(case):
    eltypes = element_types(case)
    mg = nrc.map_grad(case.f, case.argnums, tape=case.tape)
    kernel = mg.kernel_for(*eltypes)
    nums = (case.argnums,) if isinstance(case.argnums, int) else case.argnums
    outs = tuple(types.Array(eltypes[i], 1, "C") for i in nums)     # tangents: the arrays' type
    ptx = ptx_of(kernel, outs + (types.int64[::1],) + tuple(types.Array(t, 1, "C") for t in eltypes))
    assert ".entry" in ptx
    assert "malloc" not in ptx        # device code allocates nothing on the heap
    source = nrc.code(case.f, *(a[0].item() for a in case.make(2)), argnums=case.argnums,
                      tape=case.tape)
    assert "# line " in source                 # readable: comments point at the user's lines
    if case.tape:
        assert "_cuda.local.array(" in source    # loop tapes of a compile-time capacity


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_in_kernel_grad_compiles_to_ptx(case):
    g = nrc.value_and_grad(case.f, case.argnums, tape=case.tape)
    n = len(element_types(case))
    kernel = _value_and_grad_kernel(g, n, case.argnums)
    eltypes = element_types(case)
    nout = 1 if isinstance(case.argnums, int) else len(case.argnums)
    ptx = ptx_of(kernel, (types.float64[::1],) * (nout + 1)
                 + tuple(types.Array(t, 1, "C") for t in eltypes))
    assert "malloc" not in ptx


def _value_and_grad_kernel(g, n, argnums):
    """A kernel writing value and gradient(s) of g at each index (arities 1 and 2)."""
    one = isinstance(argnums, int)
    if n == 1:
        def kernel(val, d0, x0):
            i = cuda.grid(1)
            if i < val.shape[0]:
                v, d = g(x0[i])
                val[i] = v
                d0[i] = d
        return kernel
    if one:
        def kernel(val, d0, x0, x1):
            i = cuda.grid(1)
            if i < val.shape[0]:
                v, d = g(x0[i], x1[i])
                val[i] = v
                d0[i] = d
        return kernel

    def kernel(val, d0, d1, x0, x1):
        i = cuda.grid(1)
        if i < val.shape[0]:
            v, d = g(x0[i], x1[i])
            val[i] = v
            d0[i] = d[0]
            d1[i] = d[1]
    return kernel


# --- generic functions in device code ----------------------------------------------------------

def _hex(x):
    """How PTX writes a float64 constant."""
    return "0d" + np.float64(x).view(np.uint64).item().to_bytes(8, "big").hex().upper()


def fresh_family():
    @nr.generic
    def scale(x: nr.Real):
        return x * 3.25

    @scale.method
    def scale(x: nr.Integer):
        return float(x) * 0.375

    @nr.generic
    def total(v: nr.Vector):
        s = 0.0
        for i in range(v.shape[0]):
            s += scale(v[i])
        return s

    return scale, total


def test_generic_functions_dispatch_at_compile_time_in_kernels():
    scale, total = fresh_family()

    def kernel(out, x):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = scale(x[i]) + scale(i) + total(x)

    ptx = ptx_of(kernel, (types.float64[::1], types.float64[::1]))
    assert _hex(3.25) in ptx                  # scale(::Real) for the float64 element
    assert _hex(0.375) in ptx                 # scale(::Integer) for the thread index


def total_kernel():
    """A fresh family and a kernel writing total(x) at each index, with its signature."""
    scale, total = fresh_family()

    def kernel(out, x):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = total(x)

    return scale, total, kernel, (types.float64[::1], types.float64[::1])


def test_device_specializations_live_on_their_methods_and_clear_cache_drops_them():
    from numbarules import registry
    from numbarules.cuda import methods
    scale, total, kernel, sig = total_kernel()
    ptx_of(kernel, sig)
    held = [m for m in scale.methods + total.methods if registry.peek(m, methods.SPECS)]
    assert len(held) == 2, held             # total(::Vector) and scale(::Real), nothing global
    nr.clear_cache(scale)
    assert not any(registry.peek(m, methods.SPECS) for m in scale.methods)
    assert _hex(3.25) in ptx_of(kernel, sig)     # and they compile again


def test_a_new_method_is_seen_by_the_next_device_compile():
    scale, _, kernel, sig = total_kernel()
    assert _hex(3.25) in ptx_of(kernel, sig)

    @scale.method
    def scale(x: nr.Float64):                 # more specific than Real for float64 elements
        return x * 5.5

    # total's device specialization linked the old decision: it was dropped with it.
    ptx = ptx_of(kernel, sig)
    assert _hex(5.5) in ptx and _hex(3.25) not in ptx


def test_map_grad_kernel_is_rebuilt_when_a_method_changes():
    scale, _ = fresh_family()

    def f(x):
        return scale(x) * x

    mg = nrc.map_grad(f)
    k1 = mg.kernel_for(types.float64)
    assert mg.kernel_for(types.float64) is k1         # cached while nothing changes
    before = nrc.code(f, 1.0)

    @scale.method
    def scale(x: nr.Float64):
        return x * 5.5

    k2 = mg.kernel_for(types.float64)
    assert k2 is not k1
    assert nrc.code(f, 1.0) != before         # generated against the new method's kernels
    sig = (types.float64[::1], types.int64[::1], types.float64[::1])
    assert _hex(5.5) in ptx_of(k2, sig) and _hex(3.25) not in ptx_of(k2, sig)


def test_no_method_in_device_code_is_reported():
    scale, _ = fresh_family()

    def kernel(out, x):
        out[0] = scale(x)                     # an array: scale has no method for it

    with pytest.raises(nr.NoMethodError) as info:
        ptx_of(kernel, (types.float64[::1], types.float64[::1]))
    assert "scale" in str(info.value)


def test_a_method_the_device_cannot_compile_is_reported_with_its_location():
    @nr.generic
    def bad(x: nr.Float64):
        return np.empty(3)[0] + x            # allocation: not device code

    def kernel(out, x):
        out[0] = bad(x[0])

    with pytest.raises(nr.CompilationError) as info:
        ptx_of(kernel, (types.float64[::1], types.float64[::1]))
    text = str(info.value)
    assert "could not be compiled for the device" in text and "test_cuda_ptx.py" in text
    assert "bad(x::Float64)" in text


# --- gradients that the device refuses ---------------------------------------------------------

def looped(x, n):
    y = x
    for i in range(n):
        y = math.sin(y) + x
    return y


def test_a_loop_that_needs_a_tape_is_refused_without_a_bound():
    with pytest.raises(nr.UnsupportedSyntaxError) as info:
        nrc.map_grad(looped).kernel_for(types.float64, types.int64)
    text = str(info.value)
    assert "looped" in text and "test_cuda_ptx.py" in text and "tape=" in text
    line = looped.__code__.co_firstlineno + 3          # y = math.sin(y) + x, saved each time
    assert f"line {line}" in text and "y = math.sin(y) + x" in text


def test_the_same_loop_with_a_bound_compiles():
    kernel = nrc.map_grad(looped, tape=8).kernel_for(types.float64, types.int64)
    ptx_of(kernel, (types.float64[::1], types.int64[::1], types.float64[::1], types.int64[::1]))


def test_array_arguments_are_refused_in_device_gradients():
    def norm2(v):
        s = 0.0
        for i in range(v.shape[0]):
            s += v[i] * v[i]
        return s

    g = nr.grad(norm2)

    def kernel(out, v):
        out[0] = g(v)[0]

    with pytest.raises(nr.UnsupportedSyntaxError) as info:
        ptx_of(kernel, (types.float64[::1], types.float64[::1]))
    assert "per-thread scalar code" in str(info.value) and "norm2" in str(info.value)


def test_an_argument_with_no_tangent_is_refused_by_name_in_device_gradients():
    # the device door shares the CPU's argument check (kernels.gradient_spec): a complex
    # argument has no tangent, and its gradient is refused with the CPU's error, naming the
    # function and the argument
    def mag(z, s):
        return s * z.real

    g = nr.grad(mag, argnums=(0, 1))

    def kernel(out, z, s):
        out[0] = g(z[0], s)[1]

    with pytest.raises(nr.DifferentiationError) as info:
        ptx_of(kernel, (types.float64[::1], types.complex128[::1], types.float64))
    assert "mag" in str(info.value) and "argument 0" in str(info.value)


def test_plain_nr_grad_objects_are_callable_in_kernels():
    g = nr.grad(two_args_local, argnums=(0, 1))

    def kernel(dx, dy, x, y):
        i = cuda.grid(1)
        if i < dx.shape[0]:
            a, b = g(x[i], y[i])
            dx[i] = a
            dy[i] = b

    ptx_of(kernel, (types.float64[::1],) * 4)


def two_args_local(x, y):
    return x * y + math.exp(x - y)


# --- the GPU benchmark --------------------------------------------------------------------------

def _perf_module(name):
    import sys
    from pathlib import Path
    folder = str(Path(__file__).resolve().parent.parent / "perf")
    sys.path.insert(0, folder)
    try:
        return __import__(name)
    finally:
        sys.path.remove(folder)


def _run_without_gpu(script, *args):
    """Run perf/``script``: without a GPU it must say so and exit 0 (on a GPU: its table)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(root / "perf" / script), *args],
                          env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_benchmark_kernel_compiles_and_the_script_exits_cleanly_without_a_gpu():
    bench_cuda = _perf_module("bench_cuda")
    mg = nrc.map_grad(bench_cuda.oscillator, argnums=(0, 1))
    kernel = mg.kernel_for(types.float64, types.float64)
    ptx_of(kernel, (types.float64[::1],) * 2 + (types.int64[::1],) + (types.float64[::1],) * 2)
    out = _run_without_gpu("bench_cuda.py", "--n", "1000")
    assert ("bench_cuda: skipped" in out and "GPU" in out) or "numbarules map_grad" in out


def test_the_checkpoint_benchmark_compiles_and_exits_cleanly_without_a_gpu():
    bench = _perf_module("bench_cuda_checkpoint")
    for f, tape in ((bench.pendulum, 64), (bench.pendulum_16, 0), (bench.pendulum_64, 0)):
        kernel = nrc.map_grad(f, argnums=(0, 1), tape=tape).kernel_for(
            types.float64, types.float64, types.int64)
        ptx_of(kernel, (types.float64[::1],) * 2 + (types.int64[::1],)
               + (types.float64[::1],) * 2 + (types.int64[::1],))
    out = _run_without_gpu("bench_cuda_checkpoint.py", "--n", "1000")
    assert ("skipped" in out and "GPU" in out) or "checkpointed" in out


# --- more of what device code supports -----------------------------------------------------------

@nr.struct
class Point:
    x: nr.Float64
    y: nr.Float64


@nr.generic
def size(p: Point):
    return math.sqrt(p.x * p.x + p.y * p.y)


@size.method
def size(p: nr.Real):
    return abs(p)


def test_structs_built_and_dispatched_on_in_device_code():
    def kernel(out, a, b):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = size(Point(a[i], b[i])) + size(a[i])

    ptx = ptx_of(kernel, (types.float64[::1],) * 3)
    assert "sqrt" in ptx


def test_float32_gradients_and_gradients_in_device_functions():
    def f32(x):
        return size(x) * np.float32(2.0) + math.sin(x)

    mg = nrc.map_grad(f32)
    kernel = mg.kernel_for(types.float32)
    ptx_of(kernel, (types.float32[::1], types.int64[::1], types.float32[::1]))
    g = nr.grad(f32)

    @cuda.jit(device=True)
    def helper(x):
        return g(x) + size(x)

    def kernel2(out, x):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = helper(x[i])

    ptx_of(kernel2, (types.float32[::1], types.float32[::1]))
    assert "_np.float32(d_x)" in nrc.code(f32, np.float32(1.0))    # float32 tangents


def test_recursion_is_refused_in_device_code():
    @nr.generic
    def fact(n: nr.Integer):
        if n <= 1:
            return 1
        return n * fact(n - 1)

    def kernel(out):
        out[0] = fact(5)

    with pytest.raises(nr.UnsupportedSyntaxError, match="recursion"):
        ptx_of(kernel, (types.int64[::1],))


def test_loops_of_constant_length_get_a_tape_sized_at_compile_time():
    from cuda_zoo import recurrence          # range(6), two saved values per iteration
    source = nrc.code(recurrence, 0.5)
    assert "_cuda.local.array(12, _np.float64)" in source
    kernel = nrc.map_grad(recurrence).kernel_for(types.float64)
    ptx_of(kernel, (types.float64[::1], types.int64[::1], types.float64[::1]))


def test_a_checkpointed_loop_keeps_one_step_of_tape_whatever_its_length():
    from cuda_zoo import ode_checkpointed    # x saved once a step, snapshots=3
    source = nrc.code(ode_checkpointed, 0.5, 1000)
    assert "_cuda.local.array(1, _np.float64)" in source            # one step's tape
    assert source.count("_cuda.local.array(4, _np.float64)") == 2   # slots 0..3 of x and v
    assert "_rv_next(" in source
    kernel = nrc.map_grad(ode_checkpointed).kernel_for(types.float64, types.int64)
    ptx_of(kernel, (types.float64[::1], types.int64[::1], types.float64[::1], types.int64[::1]))


def _ode_plain(x, n):
    v = 0.0
    for t in range(n):
        a = -math.sin(x) - 0.25 * v
        v = v + 0.1 * a
        x = x + 0.1 * v
    return 0.5 * v * v + (1.0 - math.cos(x))


def _ode_slots(x, n, k):
    v = 0.0
    for t in nr.checkpointed(range(n), snapshots=k):
        v = v - 0.1 * math.sin(x)
        x = x + 0.1 * v
    return x


def test_checkpointing_is_what_frees_a_device_loop_from_tape_and_its_slots_are_constant():
    with pytest.raises(nr.UnsupportedSyntaxError, match="tape="):
        nrc.code(_ode_plain, 0.5, 1000)     # the same loop unmarked needs a bound
    with pytest.raises(nr.UnsupportedSyntaxError) as info:
        nrc.code(_ode_slots, 0.5, 10, 4)
    text = str(info.value)
    assert "snapshots=k" in text and "test_cuda_ptx.py" in text and "snapshots=16" in text


def test_a_gradient_object_in_a_new_kernel_compile_sees_a_new_method():
    scale, _ = fresh_family()

    def f(x):
        return scale(x) * x

    g = nr.grad(f)

    def kernel(out, x):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = g(x[i])

    sig = (types.float64[::1], types.float64[::1])
    assert _hex(3.25) in ptx_of(kernel, sig)

    @scale.method
    def scale(x: nr.Float64):
        return x * 5.5

    ptx = ptx_of(kernel, sig)
    assert _hex(5.5) in ptx and _hex(3.25) not in ptx


def test_map_grad_and_gradient_objects_are_reused():
    assert nrc.map_grad(two_args_local, argnums=(0, 1)) is nrc.map_grad(two_args_local, (0, 1))
    assert nrc.grad(two_args_local) is nr.grad(two_args_local)          # no tape: nr.grad's
    assert nrc.grad(two_args_local, tape=8) is nrc.grad(two_args_local, tape=8)
    assert nrc.grad(two_args_local, tape=8) is not nrc.grad(two_args_local, tape=16)


def test_bad_options_are_refused_clearly():
    with pytest.raises(TypeError, match="tape must be a non-negative int"):
        nrc.map_grad(two_args_local, tape=-1)
    with pytest.raises(TypeError, match="tape must be a non-negative int"):
        nrc.grad(two_args_local, tape=2.5)
    with pytest.raises(TypeError, match="differentiates a function"):
        nrc.map_grad(3.0)


def test_njit_and_nr_jit_functions_calling_generic_functions_in_kernels():
    import numba
    scale, _ = fresh_family()

    @nr.jit
    def j(x):
        return scale(x) + 1.0

    @numba.njit
    def k(x):
        return scale(x) + 2.0

    def kernel(out, x):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = j(x[i]) + k(x[i])

    assert _hex(3.25) in ptx_of(kernel, (types.float64[::1], types.float64[::1]))


def test_non_differentiable_and_opt_out_compile_for_the_device():
    from cuda_zoo import declared
    kernel = nrc.map_grad(declared).kernel_for(types.float64)
    ptx = ptx_of(kernel, (types.float64[::1], types.int64[::1], types.float64[::1]))
    assert _hex(100.0) not in ptx            # the opted-out rule's partial is not used


# --- forward mode and second derivatives in kernels ---------------------------------------------

def swing(x, k):
    """A loop of any length (forward mode keeps no tape), a scalar rule, a generic call."""
    s = 0.0
    for i in range(5):
        s += math.sin(k * x + i) * x + act(x) * k
    return s


def test_jvp_hvp_and_grad_of_grad_objects_compile_in_kernels():
    jv = nr.jvp(swing, (0, 1))
    jv0 = nr.jvp(swing, 1)
    hv = nr.hvp(swing, 0)
    hv2 = nr.hvp(swing, (0, 1))
    gg = nr.grad(nr.grad(wobble))

    def kernel(out, x, k):
        i = cuda.grid(1)
        if i < out.shape[0]:
            y, dy = jv(x[i], k[i], (1.0, 0.5))
            y1, dy1 = jv0(x[i], k[i], 1.0)
            h0, h1 = hv2(x[i], k[i], (1.0, -1.0))
            out[i] = y + dy + dy1 + hv(x[i], k[i], 1.0) + h0 + h1 + gg(x[i])

    ptx = ptx_of(kernel, (types.float64[::1],) * 3)
    assert "malloc" not in ptx
    assert "sin" in ptx or "__nv_sin" in ptx


def wobble(x):
    return math.sin(x) * x ** 3


def test_device_forward_mode_refuses_arrays_and_wrong_tangents_by_name():
    jv = nr.jvp(swing, (0, 1))

    def kernel(out, x, k):
        i = cuda.grid(1)
        if i < out.shape[0]:
            y, dy = jv(x[i], k[i], 1.0)          # argnums is a tuple: a tuple of tangents
            out[i] = dy

    with pytest.raises(Exception, match=r"jvp\(swing\): argnums is \(0, 1\), so the last "
                       r"argument must be a tuple of 2 tangents"):
        ptx_of(kernel, (types.float64[::1],) * 3)
    jvec = nr.jvp(lambda v: v[0] * v[1])

    def kernel2(out, x):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = jvec(x, x)[1]

    with pytest.raises(Exception, match=r"argument 0 is array.*per-thread scalar code"):
        ptx_of(kernel2, (types.float64[::1],) * 2)


def test_a_device_jvp_sees_a_new_method():
    @nr.generic
    def gain(x: nr.Real):
        return x * 3.25

    def f(x):
        return gain(x) * x

    jv = nr.jvp(f)

    def kernel(out, x):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = jv(x[i], 1.0)[1]

    assert _hex(3.25) in ptx_of(kernel, (types.float64[::1],) * 2)

    @gain.method
    def gain(x: nr.Float64):
        return x * 7.625
    ptx = ptx_of(kernel, (types.float64[::1],) * 2)
    assert _hex(7.625) in ptx and _hex(3.25) not in ptx


@nr.generic
def soft_clip(x: nr.Float64):
    return x / (1.0 + abs(x))


@nr.frule(soft_clip)
def _soft_clip_frule(x: nr.Float64, dx):
    d = 1.0 + abs(x)
    return x / d, dx * 2.5 / (d * d)      # a marked slope: the PTX must hold the rule's 2.5


def test_a_device_jvp_uses_the_forward_rule():
    jv = nr.jvp(lambda x: soft_clip(x) * 3.0)

    def kernel(out, x):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = jv(x[i], 1.0)[1]

    assert _hex(2.5) in ptx_of(kernel, (types.float64[::1],) * 2)
