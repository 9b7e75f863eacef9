"""Resolution, specificity, ambiguity, method tables and their error messages (no compiling)."""
import numpy as np
import pytest

import numbarules as nr


class AbstractOperator(nr.AbstractMatrix):
    pass


@nr.struct
class Diagonal(AbstractOperator):
    diag: nr.Vector[nr.Float64]


def make_my_sum():
    @nr.generic
    def my_sum(x: nr.AbstractMatrix):
        return 0.0

    @my_sum.method
    def my_sum(x: Diagonal):
        return 1.0
    return my_sum


def test_most_specific_method_wins():
    f = make_my_sum()
    A, D = np.ones((2, 2)), Diagonal(np.ones(2))
    assert f.which(A).signature == (nr.AbstractMatrix,)
    assert f.which(D).signature == (Diagonal,)
    assert nr.which(f, D) is f.which(D)
    assert f.which(nr.Matrix[nr.Float64]) is f.which(A)
    assert f.which(Diagonal) is f.which(D)
    assert f.which(AbstractOperator).signature == (nr.AbstractMatrix,)


def test_method_returns_the_function_and_replaces_equal_signatures():
    f = make_my_sum()
    assert isinstance(f, nr.GenericFunction)
    first = f.which(Diagonal)

    def replacement(x: Diagonal):
        return 2.0
    assert f.method(replacement) is f
    assert len(f.methods) == 2
    assert f.which(Diagonal) is not first and f.which(Diagonal).func is replacement
    assert all(isinstance(m, nr.Method) for m in f.methods)


def test_explicit_types():
    f = make_my_sum()

    @f.method(nr.Matrix[nr.Float64])
    def anything(x):
        return 3.0
    assert anything is f
    assert f.which(np.ones((2, 2))).signature == (nr.Matrix[nr.Float64],)
    assert f.which(np.ones((2, 2), dtype=np.int64)).signature == (nr.AbstractMatrix,)


def test_specificity_by_position_and_arity():
    @nr.generic
    def f(x: nr.Real, y: nr.Real):
        return 1

    @f.method
    def f(x: nr.Float64, y: nr.Real):
        return 2

    @f.method
    def f(x: nr.Float64, y: nr.Float64):
        return 3

    @f.method
    def f(x: nr.Real):
        return 4

    assert f.which(1.0, 1.0).signature == (nr.Float64, nr.Float64)
    assert f.which(1.0, 1).signature == (nr.Float64, nr.Real)
    assert f.which(1, 1.0).signature == (nr.Real, nr.Real)
    assert f.which(1).signature == (nr.Real,)


def test_ambiguity_names_candidates_and_a_fix():
    @nr.generic
    def g(x: nr.Real, y: nr.Float64):
        return 1

    @g.method
    def g(x: nr.Float64, y: nr.Real):
        return 2

    with pytest.raises(nr.AmbiguityError) as info:
        g.which(1.0, 2.0)
    err = info.value
    assert isinstance(err, TypeError)
    msg = str(err)
    assert "g(::Float64, ::Float64) is ambiguous" in msg
    assert "g(x::Real, y::Float64)" in msg and "g(x::Float64, y::Real)" in msg
    assert "def g(a0: Float64, a1: Float64)" in msg
    assert err.suggestion == (nr.Float64, nr.Float64)
    assert len(err.candidates) == 2
    assert g.which(1, 2.0).signature == (nr.Real, nr.Float64)

    @g.method
    def g(x: nr.Float64, y: nr.Float64):
        return 3
    assert g.which(1.0, 2.0).signature == (nr.Float64, nr.Float64)


def test_ambiguity_between_array_bounds():
    @nr.generic
    def h(x: nr.Array[nr.Real]):
        return 1

    @h.method
    def h(x: nr.AbstractMatrix):
        return 2

    with pytest.raises(nr.AmbiguityError) as info:
        h.which(np.ones((2, 2)))
    assert info.value.suggestion == (nr.Matrix[nr.Real],)
    assert h.which(np.ones(2)).signature == (nr.Array[nr.Real],)


def test_no_method_error_lists_candidates():
    f = make_my_sum()
    with pytest.raises(nr.NoMethodError) as info:
        f.which(np.ones(3))
    err = info.value
    assert isinstance(err, TypeError)
    msg = str(err)
    assert "no method of my_sum matches the call my_sum(::Vector[Float64])" in msg
    assert "my_sum(x::AbstractMatrix) at" in msg and "test_dispatch.py" in msg
    assert "@my_sum.method" in msg
    assert err.argtypes == (nr.Vector[nr.Float64],)
    with pytest.raises(nr.NoMethodError, match="Closest candidates"):
        f.which(1.0, 2.0)


def test_bad_method_declarations_name_function_parameter_and_line():
    with pytest.raises(nr.SignatureError) as info:
        @nr.generic
        def f(x: "not a type at all"):
            return x
    err = info.value
    assert err.parameter == "x" and err.file.endswith("test_dispatch.py") and err.line > 0
    assert "parameter 'x' of test_bad_method_declarations_name_function_parameter_and_line" \
           ".<locals>.f" in str(err)

    with pytest.raises(nr.SignatureError, match=r"parameter 'y' of .*: .*list"):
        @nr.generic
        def f2(x: float, y: list):
            return x

    with pytest.raises(nr.SignatureError, match="has a default value"):
        @nr.generic
        def f3(x: float = 1.0):
            return x

    with pytest.raises(nr.SignatureError, match="variadic positional"):
        @nr.generic
        def f4(*xs):
            return 1

    g = make_my_sum()
    with pytest.raises(nr.SignatureError, match="2 types given for 1 parameters"):
        @g.method(nr.Float64, nr.Float64)
        def g(x):
            return x
    with pytest.raises(nr.SignatureError, match="is not a numbarules type"):
        @g.method("float64")
        def g(x):
            return x


def test_string_annotations_resolve_in_the_function_globals():
    @nr.generic
    def f(x: "nr.Float64"):
        return x
    assert f.methods[0].signature == (nr.Float64,)


def test_unannotated_means_any():
    @nr.generic
    def f(x):
        return 1
    assert f.methods[0].signature == (nr.Any,)
    assert f.which((1, 2)) is f.methods[0]
    assert "generic function" in repr(f) and "1 method" in repr(f)
