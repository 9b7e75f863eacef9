"""One-pass pullback loops of NumPy's element-wise functions on float arrays.

Where an element-wise function's partials would make several array temporaries, the rrules of
its float arrays (``numpy_elementwise.py``) pull back with one loop over the scalar partials
function: ``unary_adjoint`` (``unary_adjoint_result`` for partials that read the result) for a
unary function, ``binary_adjoint`` for a binary one under NumPy's broadcasting, the tangent of an
operand that was broadcast summed over the axes it was repeated along.
"""

import numpy as np

from numba.extending import register_jitable


@register_jitable
def unary_adjoint(dy, x, partials):
    """``dy * partials(x)[0]`` element by element in one pass, in x's dtype and shape."""
    if dy.shape != x.shape:
        raise ValueError("element-wise pullback: the tangent's shape differs from the argument's")
    a, b = np.ascontiguousarray(dy).ravel(), np.ascontiguousarray(x).ravel()
    out = np.empty(x.shape, x.dtype)
    o = out.reshape(out.size)
    for i in range(o.size):
        o[i] = a[i] * partials(b[i])[0]
    return out


@register_jitable
def unary_adjoint_result(dy, x, y, partials):
    """``dy * partials(x, y)[0]`` (partials that read the result ``y``), in one pass."""
    if dy.shape != x.shape or y.shape != x.shape:
        raise ValueError("element-wise pullback: the tangent's shape differs from the argument's")
    a, b = np.ascontiguousarray(dy).ravel(), np.ascontiguousarray(x).ravel()
    c = np.ascontiguousarray(y).ravel()
    out = np.empty(x.shape, x.dtype)
    o = out.reshape(out.size)
    for i in range(o.size):
        o[i] = a[i] * partials(b[i], c[i])[0]
    return out


@register_jitable
def broadcast_strides(shape, out_shape):
    """Strides, in elements of a C-ordered array of ``shape``, for walking ``out_shape`` it is
    broadcast to: 0 along the axes it is repeated along (and the axes it lacks)."""
    nd, k = len(out_shape), len(shape)
    stride = np.zeros(nd, np.int64)
    s = 1
    for j in range(k - 1, -1, -1):
        if shape[j] != 1:
            stride[nd - k + j] = s
        s *= shape[j]
    return stride


@register_jitable
def binary_adjoint(dy, a, b, y, partials):
    """The flat tangents (in a's and b's dtypes) of ``y = f(a, b)`` (NumPy broadcasting) for
    cotangent ``dy``: ``dy * partials(a, b, y)``, summed where an operand was broadcast."""
    shape = dy.shape
    g = np.ascontiguousarray(dy).ravel()
    av, bv = np.ascontiguousarray(a).ravel(), np.ascontiguousarray(b).ravel()
    yv = np.ascontiguousarray(y).ravel()
    if a.shape == shape and b.shape == shape:
        da, db = np.empty(av.size, a.dtype), np.empty(bv.size, b.dtype)
        for i in range(g.size):
            pa, pb = partials(av[i], bv[i], yv[i])
            da[i] = g[i] * pa
            db[i] = g[i] * pb
        return da, db
    nd = len(shape)
    sa, sb = broadcast_strides(a.shape, shape), broadcast_strides(b.shape, shape)
    da, db = np.zeros(av.size, a.dtype), np.zeros(bv.size, b.dtype)
    index = np.zeros(nd, np.int64)
    ia = 0
    ib = 0
    for i in range(g.size):
        pa, pb = partials(av[ia], bv[ib], yv[i])
        da[ia] += g[i] * pa
        db[ib] += g[i] * pb
        k = nd - 1              # the next multi-index, the last axis fastest
        while k >= 0:
            index[k] += 1
            ia += sa[k]
            ib += sb[k]
            if index[k] < shape[k]:
                break
            ia -= sa[k] * shape[k]
            ib -= sb[k] * shape[k]
            index[k] = 0
            k -= 1
    return da, db
