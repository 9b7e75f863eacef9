# refused: nr.grad: UnsupportedSyntaxError: the array '_t65' (array(float64, 1d, F), not C-contiguous) first bound inside a loop or a branch and rebound
# numbarules fuzz program: seed 20261531, index 817
# features: branches, return, rows, numpy, timeloops, layouts
import math
import numba
import numpy as np
import numbarules as nr


def f(v1, M0, x0, v0):
    s = 0.0
    if 0.42 > v0[1]:
        return s + s + s + x0 + s
    if M0[2, 0] < x0:
        t1 = 1.39 * math.tanh(s) * s + v0[4]
        t2 = math.tanh(v0[0])
    elif x0 > 0.48:
        s = s * 0.6 - (x0 - M0[3, 1])
        s = 0.5 * s + 1.03 * v1[1] + v0[0] * M0[2, 1]
    s += v0 @ v0 * v1[3]
    s += np.dot(v1, v0) * s
    s += v0 @ v0 * x0 * -0.46
    t3 = s - M0[0, 2] - math.tanh(v1[4])
    w4 = M0[:, 0]
    h5 = np.zeros((4, 3))
    for i6 in range(4):
        h5[i6, :] = M0[i6, :]
        h5[i6, 0] += x0
    if -0.18 > -0.2:
        return v1[3] + 0.29 * t3 + s
    t11 = 0.3 * (M0[3, 0])
    u7 = w4 * 1.0
    for it9 in range(3):
        y13 = u7[it9:] * t11
        s += np.sum(y13 * y13) * 0.2
        u7 = u7 * 1.05
    s += np.sum(u7 * u7) * 0.48 + u7[0]
    return s + 0.43 * t3 + 0.39 * t11 + 0.11 * h5[2, 1]


if __name__ == '__main__':
    # numbarules fuzz: generate(20261531, 817), point 0
    from numbarules.fuzz.pool import layout, Params, Pair, Nest, Nest2
    args = (layout(np.array([0.27346464272462256, -1.4424061472426035, -0.438288456001553, -1.3585622090063114, 0.012795427380769109]).reshape((5,)), 'R'), layout(np.array([1.4186581783235122, 0.47245035834959914, -0.7591128424255457, -0.5152074806700769, 0.5745345910265467, -1.2040346995374742, -1.1261948277994023, 0.36354028208261746, -0.43483920361449746, -0.6521558508270939, 1.026446346703156, -0.7326914713922222]).reshape((4, 3)), 'F'), -0.1622196348960787, layout(np.array([-0.5124762344309355, -0.31834027850719515, 0.7558146888998185, 1.1774154208308274, 0.47508372247438224]).reshape((5,)), 'C'), )
    print('python:', f(*args))
    print('grad:', nr.grad(f, argnums=(0, 1, 2, 3))(*args))
    y, pb = nr.pullback(f, *args)
    print('pullback:', y, pb(1.0))
