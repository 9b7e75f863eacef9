import numba
import numpy as np
import pytest

import numbarules as nr


@nr.struct
class Diagonal(nr.AbstractMatrix):
    diag: nr.Vector[nr.Float64]


@nr.struct
class Particle:
    pos: nr.Vector[nr.Float64]
    mass: float
    index: int


def make_other_diagonal():
    @nr.struct
    class Diagonal(nr.AbstractMatrix):     # same name, same field: must never be confused
        diag: nr.Vector[nr.Float64]
    return Diagonal


OtherDiagonal = make_other_diagonal()


@numba.njit
def identity(x):
    return x


@numba.njit
def build_positional(d):
    return Diagonal(d)


@numba.njit
def build_keyword(d):
    return Diagonal(diag=d)


@numba.njit
def particle_energy(p):
    return 0.5 * p.mass * (p.pos ** 2).sum() + p.index


def test_python_construction_and_fields():
    d = np.array([1.0, 2.0])
    a, b = Diagonal(d), Diagonal(diag=d)
    assert a.diag is d and b.diag is d
    assert nr.typeof(a) is Diagonal
    assert nr.issubtype(Diagonal, nr.AbstractMatrix)
    assert nr.issubtype(Particle, nr.Any) and not nr.issubtype(Particle, nr.AbstractArray)
    assert repr(Particle(np.zeros(1), 1.0, 2)).startswith("Particle(pos=array([0.]), mass=1.0")


def test_immutable():
    a = Diagonal(np.ones(2))
    with pytest.raises(AttributeError):
        a.diag = np.zeros(2)
    with pytest.raises(AttributeError):
        a.other = 1


def test_field_types_are_checked():
    with pytest.raises(TypeError, match=r"Diagonal.diag must be Vector\[Float64\], got Float64"):
        Diagonal(1.0)
    with pytest.raises(TypeError, match=r"Particle.index must be Int64"):
        Particle(np.zeros(2), 1.0, 2.5)


def test_bad_declarations():
    with pytest.raises(nr.SignatureError, match="has a default value"):
        @nr.struct
        class P:
            x: float = 0.0
    with pytest.raises(TypeError, match="concrete lattice types are final"):
        @nr.struct
        class Q(Diagonal):
            y: float
    with pytest.raises(nr.SignatureError, match="not an abstract lattice type"):
        @nr.struct
        class S(dict):
            y: float
    with pytest.raises(nr.SignatureError, match="parameter 'x'"):
        @nr.struct
        class R:
            x: "list"


def test_njit_build_read_return():
    d = np.array([1.0, 2.0, 3.0])
    for build in (build_positional, build_keyword):
        out = build(d)
        assert type(out) is Diagonal
        np.testing.assert_array_equal(out.diag, d)
    assert particle_energy(Particle(np.array([1.0, 2.0]), 2.0, 3)) == pytest.approx(8.0)


def test_same_name_classes_stay_apart_in_compiled_code():
    a = Diagonal(np.ones(2))
    b = OtherDiagonal(np.ones(2))
    assert OtherDiagonal is not Diagonal and repr(OtherDiagonal) == "Diagonal"
    assert type(identity(a)) is Diagonal
    assert type(identity(b)) is OtherDiagonal
    assert type(identity(a)) is Diagonal
    assert len(identity.signatures) == 2


def test_tangent_types():
    T = nr.Tangent[Particle]
    assert nr.Tangent[Particle] is T
    assert T._fields == ("pos", "mass", "index")
    t = T(pos=np.ones(2), mass=1.0, index=None)
    assert t.index is None and repr(t).startswith("Tangent[Particle](pos=")
    assert nr.issubtype(T, nr.Tangent) and not nr.issubtype(T, Particle)
    with pytest.raises(TypeError, match="takes a @nr.struct class"):
        nr.Tangent[nr.Float64]


@numba.njit
def make_tangent(d):
    return nr.Tangent[Diagonal](diag=d)


def test_tangent_in_compiled_code():
    out = make_tangent(np.ones(2))
    assert type(out) is nr.Tangent[Diagonal]
