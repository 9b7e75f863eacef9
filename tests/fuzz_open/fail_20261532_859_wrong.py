# wrong: x0: pullback gives -1.3738131022981024, finite differences -1.2524823213583913
# numbarules fuzz program: seed 20261532, index 859
# features: scalar, zeros, branches, loopflow, tuple_loop, swaps
import math
import numba
import numpy as np
import numbarules as nr


def f(v0, t0, v1, x0):
    s = 0.0
    a1 = v1.copy()
    b2 = np.zeros(4)
    for i3 in range(1):
        for i4 in range(4):
            b2[i4] = 0.5 * a1[i4] + t0[0]
        a1, b2 = b2, a1
    s += np.sum(a1) + b2[0]
    if True:
        for i5 in range(2, v0.shape[0]):
            s += -math.atan(x0)
            x0 = t0[0]
        t6 = t0[1]
    for i7 in range(2):
        s += t0[i7] * math.cosh(math.cos(v0[1]))
        s += v1[i7]
    t8 = s + s
    s += s
    for i9 in range(1):
        acc11 = 0.61 * t0[i9]
        for j10 in range(2):
            acc11 = acc11 * 0.35 + v0[j10] * math.sinh((0.5 * math.atan(t0[1])))
        s += acc11 * math.atan(v1[i9 + 3])
    t14 = math.tanh(t8)
    for i12 in range(3):
        for j13 in range(1):
            t14 = math.tanh(t14 + v1[j13] * t0[j13])
        s += t14 * t14
    s += 0.0 ** (2.0 + math.sin(t0[1])) * math.log1p((2.0 + math.sin(v1[0])))
    return s + 0.31 * t8


if __name__ == '__main__':
    # numbarules fuzz: generate(20261532, 859), point 0
    from numbarules.fuzz.pool import layout, Params, Pair, Nest, Nest2
    args = (layout(np.array([-0.9156791371754898, -1.041187745171382, 1.0516132707447903, 0.18591197869436904]).reshape((4,)), 'C'), (-0.45031007244018895, 0.3299663279673408, ), layout(np.array([0.1528476698893968, 0.2941546721566721, -0.4874862347227029, -0.2503399137502944]).reshape((4,)), 'C'), -0.5650620189591313, )
    print('python:', f(*args))
    print('grad:', nr.grad(f, argnums=(0, 1, 2, 3))(*args))
    y, pb = nr.pullback(f, *args)
    print('pullback:', y, pb(1.0))
