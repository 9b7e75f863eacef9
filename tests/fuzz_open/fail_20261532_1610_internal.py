# internal: nr.grad: AssertionError: 
# numbarules fuzz program: seed 20261532, index 1610
# features: return, numpy, calls, recursion, swaps, layouts
import math
import numba
import numpy as np
import numbarules as nr
from numbarules.fuzz.pool import g_energy, p_rownorm, p_rpow


def h4(a0, a1):
    b5 = (a0 - a1) + (a1 - a0)
    return a0 + a1 + b5


def f(v1, x0, M0, v0, n0):
    s = 0.0
    for i1 in range(2):
        s -= v0[i1]
        if M0[i1 % 3, i1] >= -0.34:
            return 0.72 * g_energy(v1) + s
    y2 = np.dot(M0, M0.T)
    y3 = np.tanh(M0) * M0
    s += np.prod(np.tanh(y3)) * y2[1, 2] * v1[2]
    s += h4(s + v0[1], v0[2] + v0[0])
    for i6 in range(3):
        s += v1[1] * (y2[i6, i6] - y2[i6, 2 - i6])
    t7 = M0[0, 0] * s
    t8 = v1[0] * n0 * 0.14
    for i9 in range(3):
        x0, t7 = t7, x0
        x0 = x0 * 0.82 + s
    s += p_rpow((0.5 * math.atan(t8 + v0[0])), 0)
    for i10 in range(3):
        t8, t7 = t7, t8
        t8 = t8 * 0.82 + y3[0, 0] + v0[1]
    return s + 0.12 * t7 + 0.32 * t8 + 0.12 * y2[1, 1] + 0.31 * y3[1, 0]


if __name__ == '__main__':
    # numbarules fuzz: generate(20261532, 1610), point 0
    from numbarules.fuzz.pool import layout, Params, Pair, Nest, Nest2
    args = (layout(np.array([1.1862044650955852, 1.3094900885736127, -1.0138000695084641]).reshape((3,)), 'S'), -1.4132580414832643, layout(np.array([-0.9830532043403017, 0.8147975708397208, -0.39126763950468657, -0.5843120844198694, -0.7689298889368561, 0.7493159731676178, -1.3787692279662402, 0.5026515108851739, -0.613639314954899]).reshape((3, 3)), 'T'), layout(np.array([0.9438896869678342, 1.1513097688489329, 0.3142803932007108]).reshape((3,)), 'S'), 0, )
    print('python:', f(*args))
    print('grad:', nr.grad(f, argnums=(0, 1, 2, 3))(*args))
    y, pb = nr.pullback(f, *args)
    print('pullback:', y, pb(1.0))
