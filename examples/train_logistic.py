"""Logistic regression trained by gradient descent inside one compiled loop.

The loss is plain Python (loops, a branch for numerical stability, math functions);
nr.grad(loss) is called from inside a @numba.njit training loop, so no step returns to Python.
Run: python examples/train_logistic.py
"""
import math

import numba
import numpy as np

import numbarules as nr


def loss(w, X, y):
    n, d = X.shape
    s = 0.0
    for i in range(n):
        z = 0.0
        for j in range(d):
            z += X[i, j] * w[j]
        m = -y[i] * z                      # log(1 + exp(m)), without overflow
        if m > 0.0:
            s += m + math.log1p(math.exp(-m))
        else:
            s += math.log1p(math.exp(m))
    return s / n


grad_loss = nr.grad(loss)


@numba.njit
def train(w, X, y, steps, lr):
    for _ in range(steps):
        w = w - lr * grad_loss(w, X, y)
    return w


def main():
    rng = np.random.default_rng(0)
    n, d = 400, 5
    w_true = rng.normal(size=d)
    X = rng.normal(size=(n, d))
    y = np.where(X @ w_true + 0.3 * rng.normal(size=n) > 0.0, 1.0, -1.0)
    w0 = np.zeros(d)
    nr.testing.check_grad(loss, w0 + 0.1, X[:20], y[:20])
    w = train(w0, X, y, 500, 0.5)
    accuracy = np.mean(np.sign(X @ w) == y)
    print(f"loss {loss(w0, X, y):.4f} -> {loss(w, X, y):.4f}, training accuracy {accuracy:.3f}")
    print(f"cosine(w, w_true) = {w @ w_true / np.linalg.norm(w) / np.linalg.norm(w_true):.3f}")
    return accuracy


if __name__ == "__main__":
    main()
