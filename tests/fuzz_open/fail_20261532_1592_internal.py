# internal: nr.grad: TypingError: Failed in nopython mode pipeline (step: nopython frontend)
# numbarules fuzz program: seed 20261532, index 1592
# features: scalar, return, views, recursion, structs, refusals
import math
import numba
import numpy as np
import numbarules as nr
from numbarules.fuzz.pool import Params, g_energy


def rec2(a, n):
    if n <= 0:
        return a
    return math.sin(rec2(a, n - 1)) + 0.3 * a


def f(v0, n0, x0, x1, p0, M0, v1):
    s = 0.0
    for i1 in range(2):
        s += (1.0 + x0 * x0) ** math.sin(v1[i1 + 1])
        if v1[2 - i1] < -0.09:
            return 0.11 * math.exp(math.cos(M0[i1 + 1, 2])) + s
    s += rec2(v1[1] + v1[-1], 2)
    s += g_energy(p0)
    w3 = v0.reshape((2, 2))
    s = math.tanh(s) + (v0[3] - p0.w[0])
    w4 = w3.T
    t5 = -(0.81 * x1)
    s = 0.5 * s + x0 + t5
    for i6 in range(3):
        w7 = v1[i6:i6 + 2]
        s += w7[0] * w7[1]
    return s + 0.24 * t5


if __name__ == '__main__':
    # numbarules fuzz: generate(20261532, 1592), point 0
    from numbarules.fuzz.pool import layout, Params, Pair, Nest, Nest2
    args = (layout(np.array([0.8639560622349554, -0.11943333499064979, 1.064371604410765, 0.9277542668708043]).reshape((4,)), 'C'), 4, -0.6476001901926532, -1.1508829515439327, Params(-0.6547330911127408, layout(np.array([-1.4328556166258002, 0.312524239978913]).reshape((2,)), 'C'), 3), layout(np.array([-0.03323127556945127, 0.41348507214314933, 1.409671485985823, 0.2032923323426754, -0.6347067263248352, -1.0001828961965487, 0.41966718552406856, -0.7516862188376568, -1.2466554746496197]).reshape((3, 3)), 'C'), layout(np.array([-0.463787713702946, -0.6675277489192721, -1.3249415731497436, 0.15080169418274458]).reshape((4,)), 'C'), )
    print('python:', f(*args))
    print('grad:', nr.grad(f, argnums=(0, 2, 3, 4, 5, 6))(*args))
    y, pb = nr.pullback(f, *args)
    print('pullback:', y, pb(1.0))
