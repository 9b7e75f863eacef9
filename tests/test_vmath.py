"""numbarules.primitives.vmath: accuracy against exact values, edge cases, layouts, vectorization.

Measured on the points below (float64): tanh 1.08 ulp, exp 0.69 ulp max error against exact;
glibc's math.tanh / math.exp measure 1.96 / 0.50 ulp there, and differ from ours by at most
2 / 1 ulp.
"""

import functools
import math
import platform
from decimal import Decimal, localcontext

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba.core import types
from numba.core.errors import TypingError

from numbarules.primitives import vmath as vm

LN2 = math.log(2.0)
TINY = 2.0**-1074


# ---- exact references -------------------------------------------------------------------------


def _ctx(ctx):
    ctx.prec = 50
    ctx.Emin, ctx.Emax = -999999, 999999


def exact_exp(x):
    with localcontext() as ctx:
        _ctx(ctx)
        return Decimal(x).exp()


def exact_tanh(x):
    with localcontext() as ctx:
        _ctx(ctx)
        d = Decimal(x)
        if abs(d) < Decimal("1e-8"):
            # (e - 1) / (e + 1) would cancel all 50 digits away; the series error is < x**9.
            return d - d**3 / 3 + 2 * d**5 / 15 - 17 * d**7 / 315
        e = (2 * d).exp()
        return (e - 1) / (e + 1)


def ulp_at(v):
    """The spacing of float64s in the binade of the exact (Decimal) value v."""
    f = abs(float(v))
    if f == 0.0:
        return TINY
    if f > abs(v) and math.frexp(f)[0] == 0.5 and f > 2.0**-1022:
        return math.ulp(f) / 2  # v rounded up to a power of two: v lies in the binade below
    return math.ulp(f)


def ulp_error(y, v):
    return float(abs(Decimal(float(y)) - v) / Decimal(ulp_at(v)))


def libm_exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def within_ulps(actual, expected, n):
    """Elementwise: equal (infinities, signed zeros and NaNs included), or within n spacings."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    with np.errstate(invalid="ignore"):
        close = np.abs(actual - expected) <= n * np.spacing(np.abs(expected))
    return same | close


# ---- points -----------------------------------------------------------------------------------


def _near(centres, rel, rng, per):
    c = np.repeat(np.asarray(centres, dtype=np.float64), per)
    return c * (1.0 + rng.uniform(-rel, rel, c.size))


@functools.cache
def tanh_points():
    rng = np.random.default_rng(20240601)
    # tanh reduces y = 2|x|: k steps at |x| = (j + 1/2) ln2 / 2.
    steps = [(j + 0.5) * LN2 / 2 for j in range(32)]
    pos = np.concatenate(
        [
            np.geomspace(1e-300, 1e-5, 150),
            rng.uniform(0.0, 0.35, 1500),
            _near(steps, 1e-12, rng, 4),
            _near(steps, 1e-5, rng, 8),
            rng.uniform(0.35, 5.0, 1500),
            rng.uniform(5.0, 22.0, 400),
        ]
    )
    return np.concatenate([pos, -pos[::5]])


@functools.cache
def exp_points():
    rng = np.random.default_rng(20240602)
    steps = [(j + 0.5) * LN2 for j in [*range(-1075, 1024, 5), *range(-8, 8)]]
    tiny = np.geomspace(1e-300, 1e-5, 100)
    return np.concatenate(
        [
            tiny,
            -tiny,
            rng.uniform(-0.35, 0.35, 1000),
            _near(steps, 1e-13, rng, 2),
            rng.uniform(-20.0, 20.0, 1000),
            rng.uniform(-708.0, 709.0, 1000),
            rng.uniform(705.0, 709.78, 200),  # up to the overflow threshold 709.7827
            rng.uniform(-745.13, -708.4, 600),  # subnormal results
        ]
    )


@functools.cache
def errors(name):
    """(x, ours, ours' ulp errors, libm's ulp errors), against exact values."""
    f, exact, libm, pts = {
        "tanh": (vm.tanh, exact_tanh, math.tanh, tanh_points()),
        "exp": (vm.exp, exact_exp, libm_exp, exp_points()),
    }[name]
    ours = f(pts)
    ref = [exact(float(x)) for x in pts]
    ours_err = np.array([ulp_error(y, v) for y, v in zip(ours, ref)])
    libm_err = np.array([ulp_error(libm(float(x)), v) for x, v in zip(pts, ref)])
    return pts, ours, ours_err, libm_err


# ---- accuracy ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, bound", [("tanh", 1.5), ("exp", 1.0)])
def test_accuracy_against_exact_and_libm(name, bound):
    pts, ours, ours_err, libm_err = errors(name)
    worst = int(np.argmax(ours_err))
    msg = f"{name}: max {ours_err.max():.3f} ulp at x={pts[worst]!r}; libm max {libm_err.max():.3f}"
    assert ours_err.max() <= bound, msg
    # No worse than glibc's own worst case on the same points.
    assert ours_err.max() <= libm_err.max() + 0.25, msg
    libm = np.array([math.tanh(x) if name == "tanh" else libm_exp(x) for x in pts])
    assert within_ulps(ours, libm, 2).all()


def test_exp_subnormal_results_to_one_subnormal_ulp():
    pts, ours, ours_err, _ = errors("exp")
    sub = (ours > 0) & (ours < 2.0**-1022)
    assert sub.sum() > 500
    # ulp_at is 2**-1074 there: the error is in units of the smallest subnormal.
    assert ours_err[sub].max() <= 1.0


def test_tanh_is_odd():
    x = tanh_points()
    assert np.array_equal(vm.tanh(-x), -vm.tanh(x))


def test_vector_body_and_remainder_agree():
    # The vectorized loop and its scalar remainder must compute the same values.
    for f, pts in ((vm.tanh, tanh_points()), (vm.exp, exp_points())):
        some = pts[::37]
        one_by_one = np.array([f(np.array([x]))[0] for x in some])
        assert np.array_equal(f(some), one_by_one)


finite = dict(allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize("name, lo, hi, libm, exact, bound", [
    ("tanh", -40.0, 40.0, math.tanh, exact_tanh, 1.5),
    ("exp", -746.0, 709.78, math.exp, exact_exp, 1.0),
])
@given(data=st.data())
def test_property_against_libm_and_exact(name, lo, hi, libm, exact, bound, data):
    xs = data.draw(st.lists(st.floats(lo, hi, **finite), min_size=1, max_size=40))
    y = getattr(vm, name)(np.array(xs))
    assert within_ulps(y, [libm(v) for v in xs], 3).all()
    assert max(ulp_error(a, exact(v)) for a, v in zip(y, xs)) <= bound


# ---- edge cases -------------------------------------------------------------------------------


def test_tanh_special_values():
    inf, nan = math.inf, math.nan
    sub = [TINY, -TINY, 1e-310, -2.2e-308]
    x = np.array([0.0, -0.0, inf, -inf, nan, 22.0, -22.0, 22.5, 1e300, -1e300] + sub)
    y = vm.tanh(x)
    assert y[0] == 0.0 and not np.signbit(y[0])
    assert y[1] == 0.0 and np.signbit(y[1])
    assert y[2] == 1.0 and y[3] == -1.0
    assert np.isnan(y[4])
    assert list(y[5:10]) == [1.0, -1.0, 1.0, 1.0, -1.0]
    assert np.array_equal(y[10:], x[10:])  # tanh(x) rounds to x below ~1e-8


def test_exp_special_values():
    inf, nan = math.inf, math.nan
    max_finite = math.log(np.finfo(np.float64).max)  # 709.782712893384
    # 2**-1075 = exp(-1075 ln2): just above it rounds up to the smallest subnormal.
    half_tiny = -1075 * LN2
    x = np.array(
        [0.0, -0.0, -inf, inf, nan, 1e-300, -1e-300, max_finite, np.nextafter(max_finite, inf),
         800.0, half_tiny + 1e-12, half_tiny - 1e-12, -746.0, -1e4]
    )
    y = vm.exp(x)
    assert y[0] == 1.0 and y[1] == 1.0
    assert y[2] == 0.0 and y[3] == inf and np.isnan(y[4])
    assert y[5] == 1.0 and y[6] == 1.0
    assert y[7] == math.exp(max_finite) and y[8] == inf and y[9] == inf
    assert y[10] == TINY
    assert list(y[11:]) == [0.0, 0.0, 0.0]


def test_scalar_helpers_from_python():
    assert vm.tanh1(0.5) == vm.tanh(np.array([0.5]))[0]
    assert vm.exp1(-3.25) == vm.exp(np.array([-3.25]))[0]


def test_rejects_non_float_arrays():
    with pytest.raises(TypingError, match="float32 or float64 array"):
        vm.tanh(np.arange(3))
    with pytest.raises(TypingError, match="float32 or float64 array"):
        vm.exp(1.0)


# ---- float32 ----------------------------------------------------------------------------------


def test_float32():
    rng = np.random.default_rng(3)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 89.0, -104.0]
    for f, npf, x in (
        (vm.tanh, np.tanh, rng.normal(size=2000) * 4),
        (vm.exp, np.exp, rng.uniform(-104.0, 89.0, 2000)),  # float32 over- and underflow
    ):
        x = np.concatenate([x, specials]).astype(np.float32)
        y = f(x)
        assert y.dtype == np.float32
        with np.errstate(over="ignore"):
            expected = npf(x.astype(np.float64)).astype(np.float32)
        assert within_ulps(y, expected, 1).all()


# ---- shapes and layouts -----------------------------------------------------------------------


@pytest.mark.parametrize("f", [vm.tanh, vm.exp], ids=["tanh", "exp"])
def test_shapes(f):
    for shape in [(), (7,), (3, 4), (2, 3, 4), (0,), (3, 0, 2)]:
        x = np.linspace(-3.0, 3.0, max(1, math.prod(shape)))[: math.prod(shape)].reshape(shape)
        y = f(x)
        assert y.shape == shape and y.dtype == np.float64 and y.flags.c_contiguous
        assert np.array_equal(y.ravel(), f(x.ravel()))


@pytest.mark.parametrize("f", [vm.tanh, vm.exp], ids=["tanh", "exp"])
def test_layouts_match_contiguous(f):
    base = np.random.default_rng(4).normal(size=(6, 7, 5)) * 3
    readonly = base.copy()
    readonly.setflags(write=False)
    for x in (
        np.asfortranarray(base),
        np.asfortranarray(base[0]),
        base.transpose(2, 0, 1),
        base[::2, 1::3, ::-1],
        base.ravel()[::3],
        readonly,
    ):
        y = f(x)
        assert y.flags.c_contiguous and y.shape == x.shape
        assert np.array_equal(y, f(np.ascontiguousarray(x)))
    assert np.array_equal(base, readonly)  # no input was written


# ---- use from compiled code and vectorization -------------------------------------------------


@numba.njit
def _from_njit(a):
    return vm.tanh(a) + vm.exp(a)


@numba.njit(error_model="numpy")
def _scalar_loop(a):
    out = np.empty_like(a)
    for i in range(a.size):
        out[i] = vm.tanh1(a[i]) + vm.exp1(a[i])
    return out


def test_callable_from_njit():
    x = np.linspace(-5.0, 5.0, 101)
    expected = vm.tanh(x) + vm.exp(x)
    assert np.array_equal(_from_njit(x), expected)
    assert np.array_equal(_from_njit(x.reshape(1, 101, 1)).ravel(), expected)
    assert np.array_equal(_scalar_loop(x), expected)


def _vector_registers(dispatcher, x):
    dispatcher(x)
    asm = dispatcher.inspect_asm((numba.typeof(x),))
    return asm.count("zmm") + asm.count("ymm")


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"),
    reason="counts x86 AVX2/AVX-512 registers (ymm/zmm) in the assembly; this is not x86-64",
)
def test_loops_are_vectorized(optimised):
    # A scalar loop uses a handful of ymm/zmm at most (prologue copies); a vectorized one,
    # with the whole of tanh1 inlined, hundreds.
    x = np.zeros(16)
    assert numba.typeof(x) == types.Array(types.float64, 1, "C")
    # compiled here, at LLVM level 3, by dispatchers of their own: the library's may have been
    # loaded from Numba's disk cache (cache=True), and code loaded from it has no assembly to
    # inspect; the suite compiles the rest at level 0 (tests/conftest.py)
    fresh = [numba.njit(error_model="numpy")(f.py_func) for f in (vm.tanh, vm.exp, _scalar_loop)]
    for f in fresh:
        assert _vector_registers(f, x) > 50, f"{f.py_func.__name__} did not vectorize"


# ---- Numba's disk cache -------------------------------------------------------------------------

def test_the_array_functions_load_from_numbas_cache_in_a_later_process(tmp_path):
    """tanh and exp are library code, the same in every process: the second process loads them
    from Numba's cache instead of compiling them (about a second each)."""
    import os
    import subprocess
    import sys
    child = ("import numpy as np\n"
             "from numbarules.primitives import vmath\n"
             "x = np.linspace(-3, 3, 7)\n"
             "assert np.allclose(vmath.tanh(x), np.tanh(x)) and np.allclose(vmath.exp(x.T), np.exp(x))\n"
             "print(vmath.tanh.stats.cache_hits.total() + vmath.exp.stats.cache_hits.total())\n")
    def hits(opt):
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), NUMBA_OPT=str(opt))
        return int(subprocess.run([sys.executable, "-c", child], env=env, check=True,
                                  capture_output=True, text=True).stdout)
    # code compiled at NUMBA_OPT=0 (a fuzz worker) is not kept: an optimised process would
    # load it (Numba's key leaves the level out)
    assert [hits(0), hits(3), hits(3), hits(0)] == [0, 0, 2, 0]
