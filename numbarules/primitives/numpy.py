"""Rules for NumPy in compiled code, written with the public nr.scalar_rule / nr.rrule.

Element-wise functions are scalar rules: their partials are computed element-wise on arrays as
on scalars, and the engine sums a contribution over the axes NumPy broadcast an argument along.
Reductions and products are rrules.
"""

import numpy as np

from ..lattice import AbstractFloat, Array, Integer, Vector
from ..rules import rrule, scalar_rule


@scalar_rule(np.exp, uses_result=True)
def _exp(x, y):
    return (y,)


@scalar_rule(np.expm1, uses_result=True)
def _expm1(x, y):
    return (y + 1.0,)


@scalar_rule(np.log)
def _log(x):
    return (1.0 / x,)


@scalar_rule(np.log1p)
def _log1p(x):
    return (1.0 / (1.0 + x),)


@scalar_rule(np.sin)
def _sin(x):
    return (np.cos(x),)


@scalar_rule(np.cos)
def _cos(x):
    return (-np.sin(x),)


@scalar_rule(np.tan, uses_result=True)
def _tan(x, y):
    return (1.0 + y * y,)


@scalar_rule(np.tanh, uses_result=True)
def _tanh(x, y):
    return (1.0 - y * y,)


@scalar_rule(np.sqrt, uses_result=True)
def _sqrt(x, y):
    return (0.5 / y,)


@scalar_rule(np.abs)
def _abs(x):
    return (np.sign(x),)


@scalar_rule(np.power, uses_result=True)
def _power(x, p, y):
    return (p * x ** (p - 1.0), y * np.log(x))


@scalar_rule(np.maximum)
def _maximum(a, b):
    return ((a >= b) * 1.0, (a < b) * 1.0)


@scalar_rule(np.minimum)
def _minimum(a, b):
    return ((a <= b) * 1.0, (a > b) * 1.0)


@scalar_rule(np.where)
def _where(c, a, b):
    return (0.0, c * 1.0, (c == 0) * 1.0)


@rrule(np.sum, Array[AbstractFloat])
def _sum(x):
    shape = x.shape

    def sum_pullback(dy):
        return (np.full(shape, dy),)
    return np.sum(x), sum_pullback


@rrule(np.mean, Array[AbstractFloat])
def _mean(x):
    shape = x.shape
    n = x.size

    def mean_pullback(dy):
        return (np.full(shape, dy / n),)
    return np.mean(x), mean_pullback


@rrule(np.sum, Array[AbstractFloat, 2], Integer)
def _sum_axis(x, axis):
    m, n = x.shape

    def sum_axis_pullback(dy):
        dx = np.empty((m, n))
        for i in range(m):
            for j in range(n):
                dx[i, j] = dy[j] if axis == 0 else dy[i]
        return (dx, None)
    return np.sum(x, axis), sum_axis_pullback


@rrule(np.outer, Vector[AbstractFloat], Vector[AbstractFloat])
def _outer(a, b):
    def outer_pullback(dy):
        return (dy @ b, dy.T @ a)
    return np.outer(a, b), outer_pullback
