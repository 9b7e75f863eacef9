"""Scalar rules for ``math`` and the numeric builtins (``abs``, ``min``, ``max``, ``pow``).

Where a derivative is cheapest from the result (exp, sqrt, tanh, ...) the rule takes it as a last
argument (``uses_result=True``). Ties of ``min``/``max`` and the kink of ``abs`` at 0 send the
whole cotangent to the first argument, as Julia's ChainRules does.
"""

import math

from ..rules import scalar_rule


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


@scalar_rule(math.hypot, uses_result=True)
def _hypot(x, y, r):
    return (x / r, y / r)


@scalar_rule(math.pow, uses_result=True)
def _pow(x, y, r):
    return (y * x ** (y - 1.0), r * math.log(x) if x > 0.0 else 0.0)


@scalar_rule(pow, uses_result=True)
def _builtin_pow(x, y, r):
    return (y * x ** (y - 1.0), r * math.log(x) if x > 0.0 else 0.0)


@scalar_rule(math.fabs)
def _fabs(x):
    return (1.0 if x >= 0.0 else -1.0,)


@scalar_rule(abs)
def _abs(x):
    return (1.0 if x >= 0.0 else -1.0,)


@scalar_rule(math.erf)
def _erf(x):
    return (2.0 / math.sqrt(math.pi) * math.exp(-x * x),)


@scalar_rule(min)
def _min(a, b):
    return (1.0, 0.0) if a <= b else (0.0, 1.0)


@scalar_rule(max)
def _max(a, b):
    return (1.0, 0.0) if a >= b else (0.0, 1.0)
