import numpy as np
import numba
import pytest
from hypothesis import given, strategies as st

import numbarules as nr
from numbarules import lattice

BUILTIN = [nr.Any, nr.Number, nr.Real, nr.AbstractFloat, nr.Integer, nr.Signed, nr.Float64,
           nr.Float32, nr.Int64, nr.Int32, nr.Bool, nr.AbstractArray, nr.AbstractVector,
           nr.AbstractMatrix, nr.Array, nr.Vector, nr.Matrix]
ELEMENTS = [nr.Any, nr.Number, nr.Real, nr.AbstractFloat, nr.Integer, nr.Signed, nr.Float64,
            nr.Float32, nr.Int64, nr.Int32, nr.Bool]


class AbstractOperator(nr.AbstractMatrix):
    pass


class AbstractBand(AbstractOperator):
    pass


@st.composite
def lattice_types(draw):
    kind = draw(st.sampled_from(["builtin", "array", "user"]))
    if kind == "builtin":
        return draw(st.sampled_from(BUILTIN))
    if kind == "user":
        return draw(st.sampled_from([AbstractOperator, AbstractBand]))
    el = draw(st.sampled_from(ELEMENTS))
    nd = draw(st.sampled_from([None, 0, 1, 2, 3]))
    return nr.Array[el] if nd is None else nr.Array[el, nd]


def test_declared_relations():
    assert nr.issubtype(nr.Real, nr.Number)
    assert nr.issubtype(nr.AbstractFloat, nr.Real)
    assert nr.issubtype(nr.Integer, nr.Real)
    assert nr.issubtype(nr.Signed, nr.Integer)
    for t in (nr.Float64, nr.Float32):
        assert nr.issubtype(t, nr.AbstractFloat)
    for t in (nr.Int64, nr.Int32):
        assert nr.issubtype(t, nr.Signed)
    assert nr.issubtype(nr.Bool, nr.Integer) and not nr.issubtype(nr.Bool, nr.Signed)
    assert nr.issubtype(nr.AbstractVector, nr.AbstractArray)
    assert nr.issubtype(nr.AbstractMatrix, nr.AbstractArray)
    assert nr.issubtype(nr.Vector[nr.Float64], nr.AbstractVector)
    assert nr.issubtype(nr.Matrix[nr.Float64], nr.AbstractMatrix)
    assert not nr.issubtype(nr.Matrix[nr.Float64], nr.AbstractVector)
    assert not nr.issubtype(nr.Array[nr.Float64, 3], nr.AbstractMatrix)
    assert nr.issubtype(nr.Array[nr.Float64, 3], nr.AbstractArray)
    assert not nr.issubtype(nr.Float64, nr.Integer)
    assert not nr.issubtype(nr.Number, nr.Real)
    for t in BUILTIN:
        assert nr.issubtype(t, nr.Any)


def test_array_parameters_are_bounds():
    assert nr.Vector[nr.Float64] is nr.Array[nr.Float64, 1]
    assert nr.Matrix[nr.Float64] is nr.Array[nr.Float64, 2]
    assert nr.issubtype(nr.Matrix[nr.Float64], nr.Matrix[nr.Real])
    assert nr.issubtype(nr.Matrix[nr.Int64], nr.Matrix[nr.Real])
    assert not nr.issubtype(nr.Matrix[nr.Real], nr.Matrix[nr.Float64])
    assert nr.issubtype(nr.Matrix[nr.Float64], nr.Matrix)
    assert nr.issubtype(nr.Matrix[nr.Float64], nr.Array)
    assert nr.issubtype(nr.Array[nr.Float64, 3], nr.Array[nr.Real])
    assert not nr.issubtype(nr.Array[nr.Float64, 3], nr.Array[nr.Real, 2])
    assert nr.Matrix[nr.Real] is not nr.Matrix[nr.Float64]


def test_annotation_aliases():
    assert lattice.as_lattice(float) is nr.Float64
    assert lattice.as_lattice(int) is nr.Int64
    assert lattice.as_lattice(bool) is nr.Bool
    assert lattice.as_lattice(np.float32) is nr.Float32
    assert lattice.as_lattice(np.int32) is nr.Int32
    assert nr.issubtype(float, nr.Real)
    assert nr.Vector[float] is nr.Vector[nr.Float64]


def test_bad_annotation_and_parameters():
    with pytest.raises(TypeError, match="is not a numbarules"):
        lattice.as_lattice("hello")
    with pytest.raises(TypeError, match="takes no type parameters"):
        nr.Float64[1]
    with pytest.raises(TypeError, match="rank"):
        nr.Array[nr.Float64, -1]
    with pytest.raises(TypeError, match="one parameter"):
        nr.Vector[nr.Float64, 1]


def test_typeof_values():
    assert nr.typeof(1.5) is nr.Float64
    assert nr.typeof(3) is nr.Int64
    assert nr.typeof(True) is nr.Bool
    assert nr.typeof(np.float32(1)) is nr.Float32
    assert nr.typeof(np.int32(1)) is nr.Int32
    assert nr.typeof(np.ones((2, 2))) == nr.Array[nr.Float64, 2]
    assert nr.typeof(np.ones(3, dtype=np.float32)) is nr.Vector[nr.Float32]
    assert nr.typeof(np.asfortranarray(np.ones((2, 3)))) is nr.Matrix[nr.Float64]
    assert nr.typeof(np.ones((4, 4))[::2, ::2]) is nr.Matrix[nr.Float64]
    ro = np.ones(3)
    ro.flags.writeable = False
    assert nr.typeof(ro) is nr.Vector[nr.Float64]
    tup = nr.typeof((1.0, 2.0))
    assert nr.issubtype(tup, nr.Any) and not nr.issubtype(tup, nr.Number)


def test_numba_types_map_to_one_lattice_type():
    f64 = numba.types.float64
    for layout in "CFA":
        for ro in (False, True):
            t = numba.types.Array(f64, 2, layout, readonly=ro)
            assert lattice.from_numba(t) is nr.Matrix[nr.Float64]
    assert lattice.from_numba(numba.types.literal(3)) is nr.Int64
    assert lattice.from_numba(numba.types.boolean) is nr.Bool
    assert lattice.from_numba(numba.types.int32) is nr.Int32


def test_user_abstract_types():
    assert nr.issubtype(AbstractBand, AbstractOperator)
    assert nr.issubtype(AbstractBand, nr.AbstractMatrix)
    assert not nr.issubtype(AbstractOperator, AbstractBand)
    assert not nr.issubtype(nr.Matrix[nr.Float64], AbstractOperator)
    assert repr(AbstractOperator) == "AbstractOperator"


def test_concrete_types_are_final():
    with pytest.raises(TypeError, match="concrete lattice types are final"):
        class MyFloat(nr.Float64):
            pass


@given(lattice_types())
def test_reflexive(a):
    assert nr.issubtype(a, a)


@given(lattice_types(), lattice_types(), lattice_types())
def test_transitive(a, b, c):
    if nr.issubtype(a, b) and nr.issubtype(b, c):
        assert nr.issubtype(a, c)


@given(lattice_types(), lattice_types())
def test_antisymmetric(a, b):
    if nr.issubtype(a, b) and nr.issubtype(b, a):
        assert a is b


@given(lattice_types(), lattice_types())
def test_meet_is_a_common_subtype(a, b):
    m = lattice.meet(a, b)
    if m is not None:
        assert nr.issubtype(m, a) and nr.issubtype(m, b)
