"""Forward rules (``nr.frule``) for NumPy functions whose reverse rules have no forward form.

Forward mode uses, per call: an frule, else a scalar rule (element-wise functions, on arrays
too), else a reverse rule's pullback when the result is a float. What is left needs a rule
here: functions with an array result that have only reverse rules. Linear functions push the
tangent through themselves (``np.cumsum(dx)``); the reductions with a float result get one
too, because a pass over the tangent is cheaper than a pullback that builds an array.

Each rule takes the arguments, then one tangent per argument (None for integers).
"""

import numpy as np

from ..lattice import AbstractFloat, Any, Array, Integer, Matrix, Vector
from ..rules import frule
from .arrays import blocks, join, new_axis
from ..ad import forward_runtime

forward_runtime._register_reverse_rules()


# --- linear functions: the tangent goes through the function itself ------------------------

@frule(np.sum, Array[AbstractFloat])
def _sum(x, dx):
    return np.sum(x), np.sum(dx)


@frule(np.sum, Array[AbstractFloat], Integer)
def _sum_axis(x, axis, dx, daxis):
    return np.sum(x, axis), np.sum(dx, axis)


@frule(np.sum, Array[AbstractFloat], Any)
def _sum_axes(x, axes, dx, daxes):
    return np.sum(x, axes), np.sum(dx, axes)


@frule(np.mean, Array[AbstractFloat])
def _mean(x, dx):
    return np.mean(x), np.mean(dx)


@frule(np.mean, Array[AbstractFloat], Integer)
def _mean_axis(x, axis, dx, daxis):
    return np.mean(x, axis), np.mean(dx, axis)


@frule(np.cumsum, Array[AbstractFloat])
def _cumsum(x, dx):
    return np.cumsum(x), np.cumsum(dx)


@frule(np.cumsum, Array[AbstractFloat], Integer)
def _cumsum_axis(x, axis, dx, daxis):
    return np.cumsum(x, axis), np.cumsum(dx, axis)


@frule(np.trace, Matrix[AbstractFloat])
def _trace(x, dx):
    return np.trace(x), np.trace(dx)


@frule(np.diag, Array[AbstractFloat])
def _diag(x, dx):
    return np.diag(x), np.diag(dx)


@frule(np.diag, Array[AbstractFloat], Integer)
def _diag_k(x, k, dx, dk):
    return np.diag(x, k), np.diag(dx, k)


@frule(np.tril, Array[AbstractFloat])
def _tril(x, dx):
    return np.tril(x), np.tril(dx)


@frule(np.tril, Array[AbstractFloat], Integer)
def _tril_k(x, k, dx, dk):
    return np.tril(x, k), np.tril(dx, k)


@frule(np.triu, Array[AbstractFloat])
def _triu(x, dx):
    return np.triu(x), np.triu(dx)


@frule(np.triu, Array[AbstractFloat], Integer)
def _triu_k(x, k, dx, dk):
    return np.triu(x, k), np.triu(dx, k)


@frule(np.fliplr, Array[AbstractFloat])
def _fliplr(x, dx):
    return np.fliplr(x), np.fliplr(dx)


@frule(np.flipud, Array[AbstractFloat])
def _flipud(x, dx):
    return np.flipud(x), np.flipud(dx)


@frule(np.atleast_1d, Array[AbstractFloat])
def _atleast_1d(x, dx):
    return np.atleast_1d(x), np.atleast_1d(dx)


@frule(np.atleast_2d, Array[AbstractFloat])
def _atleast_2d(x, dx):
    return np.atleast_2d(x), np.atleast_2d(dx)


@frule(np.atleast_3d, Array[AbstractFloat])
def _atleast_3d(x, dx):
    return np.atleast_3d(x), np.atleast_3d(dx)


@frule(np.expand_dims, Array[AbstractFloat], Integer)
def _expand_dims(x, axis, dx, daxis):
    return np.expand_dims(x, axis), np.expand_dims(dx, axis)


@frule(new_axis, Array[AbstractFloat], Integer)
def _new_axis(x, axis, dx, daxis):
    return new_axis(x, axis), new_axis(dx, axis)


@frule(join, Array[AbstractFloat], Array[AbstractFloat], Integer)
def _join(a, b, axis, da, db, daxis):
    return join(a, b, axis), join(da, db, axis)


# --- products --------------------------------------------------------------------------------

@frule(np.outer, Vector[AbstractFloat], Vector[AbstractFloat])
def _outer(a, b, da, db):
    return np.outer(a, b), np.outer(da, b) + np.outer(a, db)


@frule(np.linalg.inv, Matrix[AbstractFloat])
def _inv(a, da):
    y = np.linalg.inv(a)
    return y, -(y @ (da @ y))


@frule(np.linalg.solve, Matrix[AbstractFloat], Array[AbstractFloat])
def _solve(a, b, da, db):
    x = np.linalg.solve(a, b)
    return x, np.linalg.solve(a, db - da @ x)


@frule(np.linalg.det, Matrix[AbstractFloat])
def _det(a, da):
    y = np.linalg.det(a)
    # d det = det * trace(A^-1 dA) = trace(adj(A) dA); solved, not inverted, for accuracy
    return y, y * np.trace(np.linalg.solve(a, da))


@frule(np.linalg.slogdet, Matrix[AbstractFloat])
def _slogdet(a, da):
    sign, logdet = np.linalg.slogdet(a)
    return (sign, logdet), (0.0, np.trace(np.linalg.solve(a, da)))


@frule(np.prod, Array[AbstractFloat], Integer)
def _prod_axis(x, axis, dx, daxis):
    y = np.prod(x, axis)
    return y, _running_product_tangent(x, dx, axis).reshape(y.shape)


def _running_product_tangent(x, dx, axis):
    """The tangent of the product along ``axis``, carried along the running product
    (d(p x) = dp x + p dx): exact where an element is zero, no division."""
    before, n, after = blocks(x.shape, axis)
    x3 = np.ascontiguousarray(x).reshape((before, n, after))
    d3 = np.ascontiguousarray(dx).reshape((before, n, after))
    out = np.empty((before, after), x.dtype)
    for p in range(before):
        for q in range(after):
            running = 1.0
            tangent = 0.0
            for k in range(n):
                tangent = tangent * x3[p, k, q] + running * d3[p, k, q]
                running *= x3[p, k, q]
            out[p, q] = tangent
    return out


# Float results: a pass over the tangent (cheaper than the reverse rule's pullback at 1.0), and
# a body the reverse mode differentiates again for nr.hvp.

@frule(np.linalg.norm, Vector[AbstractFloat])
def _norm(x, dx):
    # as a sum of squares: Numba's nrm2 of a negative stride is wrong (linalg.py), and
    # np.ascontiguousarray has no rule for the reverse mode to differentiate this again
    r = np.sqrt(np.sum(x * x))
    return r, np.sum(x * dx) / r


@frule(np.linalg.norm, Matrix[AbstractFloat])
def _norm_frobenius(a, da):
    r = np.linalg.norm(a)
    return r, np.sum(a * da) / r


@frule(np.var, Array[AbstractFloat])
def _var(x, dx):
    return np.var(x), 2.0 * np.mean((x - np.mean(x)) * dx)


@frule(np.std, Array[AbstractFloat])
def _std(x, dx):
    y = np.std(x)
    return y, np.mean((x - np.mean(x)) * dx) / y


@frule(np.prod, Array[AbstractFloat])
def _prod(x, dx):
    xf = x.ravel()
    df = dx.ravel()
    running = 1.0
    tangent = 0.0
    for k in range(xf.shape[0]):       # d(p x) = dp x + p dx: exact where an element is 0
        tangent = tangent * xf[k] + running * df[k]
        running = running * xf[k]
    return np.prod(x), tangent


# --- max and min: JAX's convention, the tangent averaged over the tied positions ------------

@frule(np.max, Array[AbstractFloat])
def _max(x, dx):
    y = np.max(x)
    return y, _chosen(x, y, dx)


@frule(np.min, Array[AbstractFloat])
def _min(x, dx):
    y = np.min(x)
    return y, _chosen(x, y, dx)


@frule(np.max, Array[AbstractFloat], Integer)
def _max_axis(x, axis, dx, daxis):
    y = np.max(x, axis)
    return y, _chosen_along(x, y, dx, axis)


@frule(np.min, Array[AbstractFloat], Integer)
def _min_axis(x, axis, dx, daxis):
    y = np.min(x, axis)
    return y, _chosen_along(x, y, dx, axis)


def _chosen(x, y, dx):
    """The mean of ``dx`` over the positions where ``x`` equals the result ``y`` (its NaNs when
    ``y`` is NaN), as the reverse rule splits the cotangent among them."""
    s = 0.0
    n = 0
    xf = x.ravel()
    df = dx.ravel()
    for i in range(xf.size):
        if xf[i] == y or (y != y and xf[i] != xf[i]):
            s += df[i]
            n += 1
    return s / n


def _chosen_along(x, y, dx, axis):
    """``_chosen`` for each slice along ``axis``."""
    before, n, after = blocks(x.shape, axis)
    x3 = np.ascontiguousarray(x).reshape((before, n, after))
    d3 = np.ascontiguousarray(dx).reshape((before, n, after))
    y2 = np.ascontiguousarray(y).reshape((before, after))
    total = np.zeros((before, after), x.dtype)
    count = np.zeros((before, after), x.dtype)
    for p in range(before):
        for k in range(n):
            for q in range(after):
                v, m = x3[p, k, q], y2[p, q]
                if v == m or (m != m and v != v):
                    total[p, q] += d3[p, k, q]
                    count[p, q] += 1.0
    return (total / count).reshape(y.shape)

