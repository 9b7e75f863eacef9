"""``np.mean``, ``np.prod``, ``np.max`` and ``np.min`` as the code numbarules compiles sees them.

Stand-ins under NumPy's own names, so that Numba's messages about a call of one read like its
messages about NumPy's function ("No implementation of function max"). ``arrays.py`` makes each
a trampoline to the axis form numbarules adds (an array and an integer axis) or to Numba's own
implementation of NumPy's function, and ``arrays.NUMPY`` is NumPy with these four in place.
Only compiled code calls them; called from Python they are NumPy's functions.
"""

import numpy as np


def mean(a, axis=None):
    return np.mean(a, axis=axis)


def prod(a, axis=None):
    return np.prod(a, axis=axis)


def max(a, axis=None):      # noqa: A001 - NumPy's name, on purpose
    return np.max(a, axis=axis)


def min(a, axis=None):      # noqa: A001 - NumPy's name, on purpose
    return np.min(a, axis=axis)
