"""Scalar rules for ``math`` and the numeric builtins (``abs``, ``min``, ``max``, ``pow``).

Where a derivative is cheapest from the result (exp, sqrt, tanh, ...) the rule takes it as a last
argument (``uses_result=True``). Where a function is not differentiable, or a formula would give
0 * inf, the rules follow JAX: ``abs`` and ``fabs`` take the slope +1 at 0, ties of ``min`` /
``max`` split the cotangent in halves, ``pow`` takes ``log(0)`` as 0 in the exponent's partial
and gives 0 for the base's partial where the exponent is 0.
"""

import math

import numpy as np

from ..ad import runtime
from ..rules import non_differentiable, scalar_rule


@scalar_rule(math.sin)
def _sin(x):
    return (math.cos(x),)


@scalar_rule(math.cos)
def _cos(x):
    return (-math.sin(x),)


@scalar_rule(math.tan, uses_result=True)
def _tan(x, y):
    return (1.0 + y * y,)


@scalar_rule(math.exp, uses_result=True)
def _exp(x, y):
    return (y,)


@scalar_rule(math.expm1, uses_result=True)
def _expm1(x, y):
    return (y + 1.0,)


@scalar_rule(math.log)
def _log(x):
    return (1.0 / x,)


@scalar_rule(math.log1p)
def _log1p(x):
    return (1.0 / (1.0 + x),)


@scalar_rule(math.log2)
def _log2(x):
    return (1.0 / (x * math.log(2.0)),)


@scalar_rule(math.log10)
def _log10(x):
    return (1.0 / (x * math.log(10.0)),)


@scalar_rule(math.sqrt, uses_result=True)
def _sqrt(x, y):
    return (0.5 / y,)


@scalar_rule(math.tanh, uses_result=True)
def _tanh(x, y):
    return (1.0 - y * y,)


@scalar_rule(math.sinh)
def _sinh(x):
    return (math.cosh(x),)


@scalar_rule(math.cosh)
def _cosh(x):
    return (math.sinh(x),)


@scalar_rule(math.atan)
def _atan(x):
    return (1.0 / (1.0 + x * x),)


@scalar_rule(math.asin)
def _asin(x):
    return (1.0 / math.sqrt(1.0 - x * x),)


@scalar_rule(math.acos)
def _acos(x):
    return (-1.0 / math.sqrt(1.0 - x * x),)


@scalar_rule(math.atan2)
def _atan2(y, x):
    r2 = x * x + y * y
    return (x / r2, -y / r2)


# At the origin x / r is 0 / 0: JAX's convention (hypot as max(|x|, |y|) * sqrt(1 + (min/max)**2),
# abs'(0) = 1, a tie of max split in halves) gives (0.5, 0.5), never nan. A nan there would poison
# every upstream adjoint even where hypot's input does not depend on them (0 * nan = nan).
@scalar_rule(math.hypot, uses_result=True)
def _hypot(x, y, r):
    if r == 0.0:
        return (0.5, 0.5)
    return (x / r, y / r)


# JAX's conventions where the formulas give 0 * inf: d/dx is 0 where y == 0 (x**0 is constant),
# d/dy takes log(x) as 0 where x == 0; a negative x gives nan for d/dy (log of a negative).
@scalar_rule(math.pow, uses_result=True)
def _pow(x, y, r):
    return (0.0 if y == 0.0 else y * x ** (y - 1.0), 0.0 if x == 0.0 else r * math.log(x))


@scalar_rule(pow, uses_result=True)
def _builtin_pow(x, y, r):
    return (0.0 if y == 0.0 else y * x ** (y - 1.0), 0.0 if x == 0.0 else r * math.log(x))


@scalar_rule(math.fabs)
def _fabs(x):
    return (1.0 if x >= 0.0 else -1.0,)


@scalar_rule(abs)
def _abs(x):
    return (1.0 if x >= 0.0 else -1.0,)


@scalar_rule(math.erf)
def _erf(x):
    return (2.0 / math.sqrt(math.pi) * math.exp(-x * x),)


# Ties split the cotangent in halves (JAX's convention for minimum / maximum): the gradient is
# then the same whichever argument order the user wrote.
@scalar_rule(min)
def _min(a, b):
    return (1.0, 0.0) if a < b else ((0.0, 1.0) if a > b else (0.5, 0.5))


@scalar_rule(max)
def _max(a, b):
    return (1.0, 0.0) if a > b else ((0.0, 1.0) if a < b else (0.5, 0.5))


# The error raised where a differentiated function returns None (kernels._no_value_errors):
# it carries no derivative.
non_differentiable(runtime.no_value)


# The partials of ``a ** b`` that the reverse and tangent kernels call (runtime._pow_da, _pow_db)
# have rules of their own, for second derivatives (nr.hvp differentiates a tangent kernel).
# Arithmetic and np.log only, so that they read the same on arrays.

@scalar_rule(runtime._pow_da)
def _pow_da_partials(a, b):
    # d/da [b a**(b-1)], d/db [b a**(b-1)]
    return (b * (b - 1.0) * a ** (b - 2.0), a ** (b - 1.0) * (1.0 + b * np.log(a)))


@scalar_rule(runtime._pow_db)
def _pow_db_partials(a, b):
    # d/da [a**b log a], d/db [a**b log a]
    log_a = np.log(a)
    return (a ** (b - 1.0) * (b * log_a + 1.0), a ** b * log_a * log_a)
