"""Derivative rules for math, the numeric builtins and NumPy, written with the public rule API."""

from . import arrays, linalg  # noqa: F401 - registers the rules and forwards
from . import numpy_elementwise, numpy_reductions, numpy_shapes, scalar  # noqa: F401 - the same
from . import forward_rules  # noqa: F401 - nr.frule entries for nr.jvp
