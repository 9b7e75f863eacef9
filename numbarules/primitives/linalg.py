"""Rules for ``np.linalg`` in compiled code, written with the public nr.rrule.

Matrices only: Numba 0.68 compiles these functions for matrices, not for stacks of them.
Conventions follow JAX: ``det`` differentiates through singular matrices (the cofactor matrix,
which is ``det(A) inv(A)^T`` when ``det(A) != 0``); norms built from ``abs`` take ``abs'(0) = 1``
and split the cotangent equally among tied maxima (minima); the 2-norm of a zero vector and the
Frobenius norm of a zero matrix have NaN gradients (``sqrt'(0) * 0``). ``slogdet`` returns a
pair: its pullback gets a pair of cotangents, and the sign has a zero derivative (a singular
matrix makes its pullback raise, as ``inv`` does).
"""

import numpy as np

from numba.extending import register_jitable

from ..lattice import AbstractFloat, Matrix, Real, Vector
from ..rules import rrule


@register_jitable
def cofactors(A, d):
    """The cofactor matrix of square ``A`` with determinant ``d``: ``d * inv(A).T``, or, for a
    singular A, from its SVD ``A = U S Vh``: ``det(U) det(Vh) U diag(prod_{j != i} s_j) Vh``
    (still exact for rank n - 1, where it is the whole derivative of det)."""
    n = A.shape[0]
    if d != 0.0:
        return d * np.linalg.inv(A).T
    u, s, vh = np.linalg.svd(A)
    others = np.empty(n, s.dtype)
    for i in range(n):
        p = 1.0
        for j in range(n):
            if j != i:
                p *= s[j]
        others[i] = p
    sign = np.linalg.det(u) * np.linalg.det(vh)
    return (u * (others * sign)) @ vh


@register_jitable
def abs_sign(x):
    """d|x|/dx with abs'(0) = 1, as JAX."""
    return 1.0 if x >= 0 else -1.0


@register_jitable
def extreme_sums_adjoint(A, dy, rows, smallest):
    """The adjoint of ``max`` (``smallest``: ``min``) over the columns' (``rows``: the rows')
    sums of ``|A|``, the matrix norms of order 1 and inf (-1, -inf): ``dy * sign(A)`` on the
    extreme lines, split equally among tied ones."""
    m, n = A.shape
    count = n if not rows else m
    sums = np.zeros(count)
    for i in range(m):
        for j in range(n):
            sums[i if rows else j] += abs(A[i, j])
    best = sums.min() if smallest else sums.max()
    ties = 0
    for k in range(count):
        if sums[k] == best:
            ties += 1
    out = np.zeros(A.shape, A.dtype)
    if ties == 0:           # NaN sums
        return out
    share = dy / ties
    for i in range(m):
        for j in range(n):
            if sums[i if rows else j] == best:
                out[i, j] = share * abs_sign(A[i, j])
    return out


@register_jitable
def singular_adjoint(A, dy, last):
    """``dy * u v^T`` for the largest (``last``: smallest) singular value's vectors: the
    adjoint of the matrix 2-norm (-2-norm)."""
    u, s, vh = np.linalg.svd(A)
    k = min(A.shape[0], A.shape[1]) - 1 if last else 0
    out = np.empty(A.shape, A.dtype)
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            out[i, j] = dy * u[i, k] * vh[k, j]
    return out


@register_jitable
def matrix_norm_adjoint(A, ord, dy):
    """The adjoint of ``np.linalg.norm(A, ord)`` for a matrix, the orders Numba supports."""
    if ord == 2 or ord == -2:
        return singular_adjoint(A, dy, ord == -2)
    if ord == 1 or ord == -1:
        return extreme_sums_adjoint(A, dy, False, ord == -1)
    if ord == np.inf or ord == -np.inf:
        return extreme_sums_adjoint(A, dy, True, ord == -np.inf)
    raise ValueError("Invalid norm order for matrices.")


@register_jitable
def vector_norm_adjoint(x, ord, r, dy):
    """The adjoint of ``np.linalg.norm(x, ord)`` for a vector with norm ``r``."""
    n = x.shape[0]
    out = np.zeros(n, x.dtype)
    if ord == np.inf or ord == -np.inf:       # max (min) of |x|: ties split equally
        ties = 0
        for i in range(n):
            if abs(x[i]) == r:
                ties += 1
        for i in range(n):
            if abs(x[i]) == r:
                out[i] = dy / ties * abs_sign(x[i])
        return out
    if ord == 0:                              # a count of the nonzeros
        return out
    scale = dy / r ** (ord - 1.0)
    for i in range(n):
        out[i] = scale * abs_sign(x[i]) * abs(x[i]) ** (ord - 1.0)
    return out


# Numba's 2-norm of a vector with a negative stride (x[::-1]) is wrong (Numba 0.68.1: it
# returns |x[0]|; BLAS nrm2 with a negative increment): computed on a contiguous copy instead.
@rrule(np.linalg.norm, Vector[AbstractFloat])
def _norm(x):
    r = np.linalg.norm(np.ascontiguousarray(x))

    def norm_pullback(dy):
        return (x * (dy / r),)
    return r, norm_pullback


@rrule(np.linalg.norm, Matrix[AbstractFloat])
def _norm_frobenius(A):
    r = np.linalg.norm(A)

    def norm_frobenius_pullback(dy):
        return (A * (dy / r),)
    return r, norm_frobenius_pullback


@rrule(np.linalg.norm, Vector[AbstractFloat], Real)
def _norm_vector_ord(x, ord):
    r = np.linalg.norm(np.ascontiguousarray(x), ord)

    def norm_vector_ord_pullback(dy):
        return (vector_norm_adjoint(x, ord, r, dy), None)
    return r, norm_vector_ord_pullback


@rrule(np.linalg.norm, Matrix[AbstractFloat], Real)
def _norm_matrix_ord(A, ord):
    r = np.linalg.norm(A, ord)

    def norm_matrix_ord_pullback(dy):
        return (matrix_norm_adjoint(A, ord, dy), None)
    return r, norm_matrix_ord_pullback


@rrule(np.linalg.det, Matrix[AbstractFloat])
def _det(A):
    d = np.linalg.det(A)

    def det_pullback(dy):
        return (dy * cofactors(A, d),)
    return d, det_pullback


@rrule(np.linalg.slogdet, Matrix[AbstractFloat])
def _slogdet(A):
    def slogdet_pullback(dy):
        # dy = (d sign, d logabsdet); the sign is piecewise constant
        return (dy[1] * np.linalg.inv(A).T,)
    return np.linalg.slogdet(A), slogdet_pullback


@rrule(np.linalg.inv, Matrix[AbstractFloat])
def _inv(A):
    Y = np.linalg.inv(A)

    def inv_pullback(dY):
        Yt = np.ascontiguousarray(Y.T)
        return (-(Yt @ np.ascontiguousarray(dY) @ Yt),)
    return Y, inv_pullback


@rrule(np.linalg.pinv, Matrix[AbstractFloat])
def _pinv(A):
    P = np.linalg.pinv(A)

    def pinv_pullback(dP):
        # The derivative of the pseudo-inverse at constant rank (Golub and Pereyra), transposed:
        # -P^T G P^T + (I - A P) G^T P P^T + P^T P G^T (I - P A), with G = dP.
        G = np.ascontiguousarray(dP)
        Pt = np.ascontiguousarray(P.T)
        Gt = np.ascontiguousarray(G.T)
        left = Gt @ (P @ Pt)            # G^T P P^T,  (m, n)
        right = (Pt @ P) @ Gt           # P^T P G^T,  (m, n)
        dA = left - A @ (P @ left) + right - (right @ P) @ A - Pt @ G @ Pt
        return (dA,)
    return P, pinv_pullback


@rrule(np.linalg.solve, Matrix[AbstractFloat], Vector[AbstractFloat])
def _solve_vector(A, b):
    x = np.linalg.solve(A, b)

    def solve_vector_pullback(dx):
        db = np.linalg.solve(np.ascontiguousarray(A.T), np.ascontiguousarray(dx))
        return (-np.outer(db, x), db)
    return x, solve_vector_pullback


@rrule(np.linalg.solve, Matrix[AbstractFloat], Matrix[AbstractFloat])
def _solve_matrix(A, B):
    X = np.linalg.solve(A, B)

    def solve_matrix_pullback(dX):
        dB = np.linalg.solve(np.ascontiguousarray(A.T), np.ascontiguousarray(dX))
        return (-(dB @ np.ascontiguousarray(X.T)), dB)
    return X, solve_matrix_pullback
