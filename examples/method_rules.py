"""Rules for methods, not collections of methods: the discussion numbarules answers, end to end.

In Zygote + ChainRules an rrule for my_sum(::AbstractMatrix) swallows every method it covers,
including the more specific my_sum(::Diagonal). In numbarules a rule attaches to the method it
was written for. Run: python examples/method_rules.py
"""
import numpy as np

import numbarules as nr


@nr.struct
class Diagonal(nr.AbstractMatrix):
    diag: nr.Vector[nr.Float64]


def vsum(v):
    s = 0.0
    for i in range(v.shape[0]):
        s += v[i]
    return s


@nr.generic
def my_sum(x: nr.AbstractMatrix):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            s += x[i, j]
    return s


@my_sum.method
def my_sum(x: Diagonal):                 # noqa: F811 - a second method
    return vsum(x.diag)


A = np.arange(6.0).reshape(2, 3)
D = Diagonal(np.array([1.0, 2.0, 3.0]))
g = nr.grad(my_sum)
print("before any rule:", g(A).tolist(), g(D))


@nr.rrule(my_sum)                        # added after the first gradient: picked up
def _(x: nr.AbstractMatrix):
    y = my_sum(x)
    m, n = x.shape

    def my_sum_pullback(dy):             # compiled with Numba, reads the rule's locals
        return (np.full((m, n), dy),)
    return y, my_sum_pullback


print("rule for A:", nr.rule_for(my_sum, A))
print("rule for D:", nr.rule_for(my_sum, D), "(the Diagonal method is differentiated)")
print("gradients:", g(A).tolist(), g(D))
nr.testing.check_rrule(my_sum, A)        # finite differences, tangent kinds, and that it ran


def loss(A, D):
    return my_sum(A) * my_sum(D)


print(nr.explain(loss, A, D))
nr.opt_out(my_sum, nr.Matrix[nr.Float64])
print("after nr.opt_out(my_sum, Matrix[Float64]):", nr.rule_for(my_sum, A))


@my_sum.method
def my_sum(x: nr.Matrix[nr.Float32]):    # noqa: F811 - a new, more specific method
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i, i]
    return s


A32 = A.astype(np.float32)
print("a new Matrix[Float32] method stops the rule there:", nr.rule_for(my_sum, A32),
      g(A32).tolist())
