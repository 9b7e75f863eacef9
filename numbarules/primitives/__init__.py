"""Derivative rules for math, the numeric builtins and NumPy, written with the public rule API."""

from . import arrays, linalg, numpy, scalar  # noqa: F401 - registers the rules and forwards
