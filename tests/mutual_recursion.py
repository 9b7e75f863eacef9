"""Two functions calling each other, ``up`` and ``down``, and a helper ``bend`` that ``up`` alone
calls: for tests of rules added after a first derivative. Each test writes its own copy of the
module (conftest's ``make_module``), so that the rule one test gives ``bend`` stays there."""

import math

SOURCE = '''
import math


def bend(x):
    return math.sin(x)


def up(x, n):
    if n <= 0:
        return x * x
    return down(bend(x) * 1.5, n - 1) + 0.25 * x


def down(x, n):
    if n <= 0:
        return math.exp(0.3 * x)
    return up(x * x * 0.5, n - 1)


def loss(x):
    return down(x, 3)
'''


def loss_derivative(x, scale=1.0):
    """d loss / dx with the derivative of ``bend`` taken ``scale`` times: loss(x) = up(u, 2) =
    down(z, 1) + u / 4 = (z * z / 2) ** 2 + u / 4, with u = x * x / 2 and z = 1.5 * bend(u)."""
    u = x * x / 2
    z = 1.5 * math.sin(u)
    return z ** 3 * 1.5 * scale * math.cos(u) * x + x / 4
