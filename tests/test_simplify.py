"""numbarules.ad.simplify: dead declarations in generated kernels are dropped, live ones kept."""
import numpy as np

import numbarules as nr
from numbarules.ad.simplify import drop_dead_inits


def test_a_declaration_overwritten_before_any_read_is_dropped():
    src = ("def k(x, _dout):\n"
           "    _d2 = 0.0\n"
           "    _d5 = 0.0\n"
           "    # line 3: a comment stays\n"
           "    _d5 = _dout\n"
           "    _d2 = _d5 * x\n"
           "    return _d2\n")
    assert drop_dead_inits(src) == ("def k(x, _dout):\n"
                                    "    # line 3: a comment stays\n"
                                    "    _d5 = _dout\n"
                                    "    _d2 = _d5 * x\n"
                                    "    return _d2\n")


def test_declarations_that_may_be_read_are_kept():
    src = ("def k(x, n):\n"
           "    a = 0.0\n"             # read by the loop before (or without) being set
           "    b = 0.0\n"             # set only in a branch
           "    c = 0\n"               # its next mention reads it
           "    d = 0.0\n"             # reassigned from itself
           "    for i in range(n):\n"
           "        a = a + x[i]\n"
           "    if n > 2:\n"
           "        b = x[0]\n"
           "    c += 1\n"
           "    d = d + 1.0\n"
           "    return a + b + c + d\n")
    assert drop_dead_inits(src) == src


def test_an_unused_declaration_is_dropped_and_other_statements_are_not():
    src = ("def k(x):\n"
           "    u = 0.0\n"
           "    t = _np.float32(0.0)\n"      # not a constant: left alone
           "    t = x[0]\n"
           "    return t\n")
    assert drop_dead_inits(src) == ("def k(x):\n"
                                    "    t = _np.float32(0.0)\n"
                                    "    t = x[0]\n"
                                    "    return t\n")


def _rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def _branchy(x, n):
    t = 0.0
    if n > 1:
        t = x[0] * x[1]
    return t * t + x[0]


def test_generated_kernels_have_no_dead_declarations_and_stay_right():
    x = np.linspace(0.2, 1.1, 5)
    for f, args, argnums in ((_rosenbrock, (x,), 0), (_branchy, (x, 3), 0),
                             (_branchy, (x, 0), 0)):
        for kind in ("forward", "pullback", "vjp"):
            src = nr.code(f, *args, kind=kind)
            assert drop_dead_inits(src) == src, src
        nr.testing.check_grad(f, *args, argnums=(argnums,))
