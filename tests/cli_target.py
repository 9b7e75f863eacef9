"""A small model for the `numbarules explain` command-line test."""
import numpy as np

import numbarules as nr


@nr.struct
class Diagonal(nr.AbstractMatrix):
    diag: nr.Vector[nr.Float64]


@nr.generic
def my_sum(x: nr.AbstractMatrix):
    return np.sum(x)


@my_sum.method
def my_sum(x: Diagonal):
    s = 0.0
    for i in range(x.diag.shape[0]):
        s += x.diag[i]
    return s


def loss(A, D):
    return my_sum(A) * my_sum(D)
