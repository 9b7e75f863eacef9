"""Derivative rules for Python's math functions and builtins, written with the public rule API."""

from . import scalar  # noqa: F401 - registers the rules
