# wrong: v1[0]: pullback gives nan, finite differences 7362.817216100153
# numbarules fuzz program: seed 20261531, index 1233
# features: zeros, loops, numpy, viewcalls, nested_structs, tuple_loop, timeloops
import math
import numba
import numpy as np
import numbarules as nr
from numbarules.fuzz.pool import Nest2, p_mid, r_pairdot


def f(v1, v0, t0, x0, N1, n0):
    s = 0.0
    t5 = 0.3 * (0.0 ** math.exp(math.sin(s)))
    u1 = v0 * 1.0
    for it3 in range(1):
        for i4 in range(5):
            w2 = u1 * u1[i4]
            s += np.sum(w2) * 0.29
        u1 = u1 * t5
    s += np.sum(u1 * u1) * 0.42 + u1[0]
    s += v1 @ v1 * t5
    y7 = 0.0 / (2.0 + math.sin(x0)) * v1
    s += np.linalg.norm(y7) * s
    s += 0.0 ** (2.0 + math.sin(r_pairdot(N1.q, y7[0]))) * N1.q.a * N1.v[0] + N1.q.b
    t8 = n0 * 0.42
    w9 = p_mid(v0)
    for i10 in range(4, -1, -1):
        for i11 in range(2, 1):
            for i12 in range(1, -1, -1):
                s += t0[i12] * 0.0 ** (1.5 + math.tanh(x0))
                s += y7[i12 % 5] + v1[i11 + 4]
        for i13 in range(1, -1, -1):
            s += t0[i13] * 1.34 * y7[i10 % 5]
            s += t8
    for i14 in range(len(t0)):
        s += t0[i14] * (2.0 + math.sin(N1.v[i14 + 1])) ** 1.0
        k15 = 0
        while k15 < 3:
            k15 += 1
            for i16 in range(2):
                s += t0[i16] * s + t0[i14]
                s -= t0[i16] - v1[(k15 - 1)] * t0[1] + y7[3]
    return s + 0.38 * t8 + 0.11 * t5 + 0.18 * y7[0]


if __name__ == '__main__':
    # numbarules fuzz: generate(20261531, 1233), point 0
    from numbarules.fuzz.pool import layout, Params, Pair, Nest, Nest2
    args = (layout(np.array([1.4081672076489586, -1.1225670510505488, -1.0893210423332784, -1.405280656190802, -0.42426933412184287]).reshape((5,)), 'C'), layout(np.array([1.14627175513639, -0.6743803277232907, -0.5916709564214256, 1.1077335938581294, -1.143167970302207]).reshape((5,)), 'C'), (0.9761906397993507, 1.2592472921544813, ), 0.841261047010287, Nest2(Pair(0.39412761025138865, 1.0692424745081404), layout(np.array([-1.0054599595804852, 1.4956692797300302, -0.6014990545298952, 1.4983251680963652]).reshape((4,)), 'C')), 4, )
    print('python:', f(*args))
    print('grad:', nr.grad(f, argnums=(1, 4))(*args))
    y, pb = nr.pullback(f, *args)
    print('pullback:', y, pb(1.0))
