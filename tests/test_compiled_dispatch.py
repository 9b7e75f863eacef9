"""Compile-time dispatch: from Python, methods, nr.jit, plain @numba.njit, and as an argument."""
import numba
import numpy as np
import pytest

import numbarules as nr


@nr.struct
class Diagonal(nr.AbstractMatrix):
    diag: nr.Vector[nr.Float64]


def vsum(v):                       # plain Python: compiled alongside the method that calls it
    s = 0.0
    for i in range(v.shape[0]):
        s += v[i]
    return s


@nr.generic
def my_sum(x: nr.AbstractMatrix):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            s += x[i, j]
    return s


@my_sum.method
def my_sum(x: Diagonal):
    return vsum(x.diag)


@nr.generic
def scale(x: nr.Real, y: nr.Real):
    return x * y


@scale.method
def scale(x: nr.Float64, y: nr.Int64):
    return x * y + 1000.0


@numba.njit
def plain_caller(x):
    return my_sum(x) + 1.0


@numba.njit
def plain_outer(x):
    return plain_caller(x) * 2.0


@nr.jit
def apply_to(f, x):
    return f(x)


@nr.jit
def make_and_sum(d):
    return my_sum(Diagonal(d))


A = np.arange(6.0).reshape(2, 3)
D = Diagonal(np.array([1.0, 2.0, 3.0]))


def test_python_calls_pick_the_method():
    assert my_sum(A) == 15.0
    assert my_sum(D) == 6.0
    assert my_sum(np.asfortranarray(A)) == 15.0
    assert my_sum(A[:, ::2]) == 0.0 + 2.0 + 3.0 + 5.0
    assert my_sum(np.arange(4).reshape(2, 2)) == 6


def test_numeric_arguments_dispatch_on_every_position():
    assert scale(2.0, 3) == 1006.0
    assert scale(2.0, 3.0) == 6.0
    assert scale(2, 3) == 6
    assert scale(np.float32(2.0), 3) == 6.0


def test_plain_njit_callers_nested():
    assert plain_caller(A) == 16.0
    assert plain_outer(D) == 14.0


def test_structs_built_in_compiled_code_dispatch():
    assert make_and_sum(np.array([1.0, 2.0])) == 3.0


def test_generic_function_as_an_argument():
    assert apply_to(my_sum, A) == 15.0
    assert apply_to(my_sum, D) == 6.0


def test_methods_calling_generic_functions_and_several_arities():
    @nr.generic
    def norm1(x: nr.AbstractMatrix):
        return my_sum(x)

    @norm1.method
    def norm1(x: nr.AbstractMatrix, p: nr.Real):
        return my_sum(x) * p

    assert norm1(A) == 15.0
    assert norm1(A, 2.0) == 30.0
    assert norm1(D, 2) == 12.0
    with pytest.raises(nr.NoMethodError):
        norm1(A, 1.0, 2.0)


def test_no_method_from_python():
    with pytest.raises(nr.NoMethodError, match=r"my_sum\(::Float64\)"):
        my_sum(1.0)


def test_no_method_inside_compiled_code_names_the_call_site():
    @nr.jit
    def caller(x):
        return my_sum(x)
    with pytest.raises(nr.NoMethodError) as info:
        caller(1.0)
    msg = str(info.value)
    assert "no method of my_sum matches the call my_sum(::Float64)" in msg
    assert "test_compiled_dispatch.py" in msg and "Called from" in msg


def test_method_body_that_does_not_compile():
    @nr.generic
    def broken(x: nr.Float64):
        return x.no_such_attribute

    with pytest.raises(nr.CompilationError) as info:
        broken(1.0)
    err = info.value
    msg = str(err)
    assert "method broken(x::Float64) defined at" in msg
    assert "test_compiled_dispatch.py" in msg and "no_such_attribute" in msg
    assert err.file.endswith("test_compiled_dispatch.py") and err.line > 0

    @nr.jit
    def calls_broken(x):
        return broken(x) + 1.0
    with pytest.raises(nr.CompilationError, match=r"method broken\(x::Float64\)"):
        calls_broken(1.0)


def test_nr_jit_body_that_does_not_compile():
    @nr.jit
    def bad(x):
        return x.nope
    with pytest.raises(nr.CompilationError, match=r"(?s)nr.jit function .*bad defined at .*nope"):
        bad(1.0)


def test_nr_jit_rejects_numba_disk_cache():
    with pytest.raises(ValueError, match="cache=True"):
        nr.jit(cache=True)(lambda x: x)


def test_call_overhead_path_is_numbas_dispatcher():
    # f(x) jumps straight into a compiled dispatcher: its class's __call__ is the trampoline.
    my_sum(A)
    assert type(my_sum).__call__ is my_sum._nr_trampoline
    assert isinstance(my_sum, nr.GenericFunction)


@nr.generic
def power(x: nr.Float64, n: nr.Int64):
    if n == 0:
        return 1.0
    return x * power(x, n - 1)


@nr.generic
def is_even(n: nr.Int64):
    if n == 0:
        return True
    return is_odd(n - 1)


@nr.generic
def is_odd(n: nr.Int64):
    if n == 0:
        return False
    return is_even(n - 1)


def test_recursion_through_generic_functions():
    assert power(2.0, 10) == 1024.0
    assert is_even(10) and is_odd(7) and not is_even(7)

    @nr.jit
    def poly(x):
        return power(x, 3) + power(x, 2)
    assert poly(2.0) == 12.0


def test_a_failed_compile_is_not_remembered_once_the_method_is_fixed():
    @nr.generic
    def fragile(x: nr.Float64):
        return x.no_such_attribute

    @nr.jit
    def calls_fragile(x):
        return fragile(x) * 2.0
    for call in (fragile, calls_fragile):
        with pytest.raises(nr.CompilationError):
            call(1.0)

    @fragile.method
    def fragile(x: nr.Float64):       # replaces the broken body
        return x + 1.0
    assert fragile(1.0) == 2.0
    assert calls_fragile(1.0) == 4.0


def concatenate(a, b):          # the same name as the NumPy function it calls, on purpose
    return np.concatenate((a, b))


def test_helper_named_like_the_numpy_function_it_calls():
    # Attribute names (np.concatenate) are not global references to the helper itself.
    @nr.jit
    def total(a, b):
        return concatenate(a, b).sum()
    assert total(np.ones(2), np.ones(3)) == 5.0
