"""Rules for NumPy's shape functions, joins and ``np.outer`` in compiled code (nr.rrule).

Shape functions move, keep or zero elements by position (``expand_dims``, ``atleast_*d``,
``flipud`` / ``fliplr``, ``diag``, ``triu`` / ``tril``; ``trace`` sums a diagonal), so their
pullbacks take the cotangent back to the same positions. ``np.concatenate`` and ``np.stack``
arrive here as ``arrays.join`` and ``arrays.new_axis``, the two-array forms the frontend rewrites
them into.
"""

import numpy as np

from numba.extending import register_jitable

from ..lattice import AbstractFloat, Array, Integer, Matrix, Vector
from ..rules import rrule
from .arrays import blocks, join, new_axis


# --- helpers: the diagonals of np.diag and np.trace ----------------------------------------------

@register_jitable
def diagonal_start(shape, k):
    """(row, column, length) of the ``k``-th diagonal of a matrix of ``shape``."""
    r, c = (0, k) if k >= 0 else (-k, 0)
    return r, c, max(0, min(shape[0] - r, shape[1] - c))


@register_jitable
def diagonal_put(values, shape, k, dtype):
    """A zero matrix of ``shape`` with ``values`` on its ``k``-th diagonal (the adjoint of
    ``np.diag(A, k)``)."""
    out = np.zeros(shape, dtype)
    r, c, n = diagonal_start(shape, k)
    for i in range(n):
        out[r + i, c + i] = values[i]
    return out


@register_jitable
def diagonal_fill(value, shape, k, dtype):
    """A zero matrix of ``shape`` with ``value`` along its ``k``-th diagonal (``np.trace``'s
    adjoint)."""
    out = np.zeros(shape, dtype)
    r, c, n = diagonal_start(shape, k)
    for i in range(n):
        out[r + i, c + i] = value
    return out


# --- products --------------------------------------------------------------------------------

@rrule(join, Array[AbstractFloat], Array[AbstractFloat], Integer)
def _concatenate(a, b, axis):
    sa, sb = a.shape, b.shape

    def concatenate_pullback(dy):
        before, n, after = blocks(dy.shape, axis)
        d3 = np.ascontiguousarray(dy).reshape((before, n, after))
        na = blocks(sa, axis)[1]
        da = np.ascontiguousarray(d3[:, :na, :]).reshape(sa)
        db = np.ascontiguousarray(d3[:, na:, :]).reshape(sb)
        return (da.astype(a.dtype), db.astype(b.dtype), None)
    return join(a, b, axis), concatenate_pullback


@rrule(np.outer, Vector[AbstractFloat], Vector[AbstractFloat])
def _outer(a, b):
    def outer_pullback(dy):
        return (dy @ b, dy.T @ a)
    return np.outer(a, b), outer_pullback


# --- shape functions -------------------------------------------------------------------------

@rrule(new_axis, Array[AbstractFloat], Integer)
def _new_axis(x, axis):
    shape = x.shape

    def new_axis_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape), None)
    return new_axis(x, axis), new_axis_pullback


@rrule(np.expand_dims, Array[AbstractFloat], Integer)
def _expand_dims(x, axis):
    shape = x.shape

    def expand_dims_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape), None)
    return np.expand_dims(x, axis), expand_dims_pullback


@rrule(np.atleast_1d, Array[AbstractFloat])
def _atleast_1d(x):
    shape = x.shape

    def atleast_1d_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape),)
    return np.atleast_1d(x), atleast_1d_pullback


@rrule(np.atleast_2d, Array[AbstractFloat])
def _atleast_2d(x):
    shape = x.shape

    def atleast_2d_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape),)
    return np.atleast_2d(x), atleast_2d_pullback


@rrule(np.atleast_3d, Array[AbstractFloat])
def _atleast_3d(x):
    shape = x.shape

    def atleast_3d_pullback(dy):
        return (np.ascontiguousarray(dy).reshape(shape),)
    return np.atleast_3d(x), atleast_3d_pullback


@rrule(np.flipud, Array[AbstractFloat])
def _flipud(x):
    def flipud_pullback(dy):
        return (np.flipud(dy),)
    return np.flipud(x), flipud_pullback


@rrule(np.fliplr, Array[AbstractFloat])
def _fliplr(x):
    def fliplr_pullback(dy):
        return (np.fliplr(dy),)
    return np.fliplr(x), fliplr_pullback


@rrule(np.diag, Vector[AbstractFloat])
def _diag_vector(v):
    def diag_vector_pullback(dy):
        return (np.diag(dy),)
    return np.diag(v), diag_vector_pullback


@rrule(np.diag, Vector[AbstractFloat], Integer)
def _diag_vector_k(v, k):
    def diag_vector_k_pullback(dy):
        return (np.diag(dy, k), None)
    return np.diag(v, k), diag_vector_k_pullback


@rrule(np.diag, Matrix[AbstractFloat])
def _diag_matrix(A):
    shape = A.shape

    def diag_matrix_pullback(dy):
        return (diagonal_put(dy, shape, 0, A.dtype),)
    return np.diag(A), diag_matrix_pullback


@rrule(np.diag, Matrix[AbstractFloat], Integer)
def _diag_matrix_k(A, k):
    shape = A.shape

    def diag_matrix_k_pullback(dy):
        return (diagonal_put(dy, shape, k, A.dtype), None)
    return np.diag(A, k), diag_matrix_k_pullback


@rrule(np.trace, Matrix[AbstractFloat])
def _trace(A):
    shape = A.shape

    def trace_pullback(dy):
        return (diagonal_fill(dy, shape, 0, A.dtype),)
    return np.trace(A), trace_pullback


@rrule(np.trace, Matrix[AbstractFloat], Integer)
def _trace_offset(A, k):
    shape = A.shape

    def trace_offset_pullback(dy):
        return (diagonal_fill(dy, shape, k, A.dtype), None)
    return np.trace(A, k), trace_offset_pullback


# np.triu / np.tril keep or zero each element by its position: the same mask on the cotangent.
# A vector is broadcast to a square matrix first (its rows), so its adjoint sums the rows.

@rrule(np.triu, Array[AbstractFloat])
def _triu(x):
    def triu_pullback(dy):
        return (np.triu(dy),)
    return np.triu(x), triu_pullback


@rrule(np.triu, Array[AbstractFloat], Integer)
def _triu_k(x, k):
    def triu_k_pullback(dy):
        return (np.triu(dy, k), None)
    return np.triu(x, k), triu_k_pullback


@rrule(np.tril, Array[AbstractFloat])
def _tril(x):
    def tril_pullback(dy):
        return (np.tril(dy),)
    return np.tril(x), tril_pullback


@rrule(np.tril, Array[AbstractFloat], Integer)
def _tril_k(x, k):
    def tril_k_pullback(dy):
        return (np.tril(dy, k), None)
    return np.tril(x, k), tril_k_pullback


@rrule(np.triu, Vector[AbstractFloat])
def _triu_vector(x):
    def triu_vector_pullback(dy):
        return (np.sum(np.triu(dy), 0),)
    return np.triu(x), triu_vector_pullback


@rrule(np.triu, Vector[AbstractFloat], Integer)
def _triu_vector_k(x, k):
    def triu_vector_k_pullback(dy):
        return (np.sum(np.triu(dy, k), 0), None)
    return np.triu(x, k), triu_vector_k_pullback


@rrule(np.tril, Vector[AbstractFloat])
def _tril_vector(x):
    def tril_vector_pullback(dy):
        return (np.sum(np.tril(dy), 0),)
    return np.tril(x), tril_vector_pullback


@rrule(np.tril, Vector[AbstractFloat], Integer)
def _tril_vector_k(x, k):
    def tril_vector_k_pullback(dy):
        return (np.sum(np.tril(dy, k), 0), None)
    return np.tril(x, k), tril_vector_k_pullback
