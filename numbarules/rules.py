"""The rule registry: derivative rules attached to functions (scalar rules so far).

``scalar_rule(f)`` registers ``partials(*args) -> tuple`` of the partial derivatives of a scalar
function ``f``; the pullback multiplies each by the incoming cotangent. With
``uses_result=True`` the partials function takes the primal result as one more, last argument
(``exp``'s derivative is its result: no second ``exp``). The built-in rules for ``math`` are
registered with this very function (numbarules/primitives/scalar.py).

Registries are plain dicts owned by this module and written only through ``register_*`` /
the decorators here.
"""

from dataclasses import dataclass

from .errors import RuleError


@dataclass(frozen=True)
class ScalarRule:
    function: object
    partials: object
    uses_result: bool


_SCALAR = {}


def scalar_rule(f, *types, uses_result=False):
    """Decorate ``partials(*args) -> tuple`` of the partial derivatives of scalar function ``f``.

    >>> @nr.scalar_rule(math.sin)
    ... def _(x):
    ...     return (math.cos(x),)
    """
    def register(partials):
        if not callable(partials):
            raise RuleError(f"scalar_rule({f!r}) decorates a function returning the partials")
        _SCALAR[f] = ScalarRule(f, partials, uses_result)
        return partials
    return register


def scalar_rule_for(f):
    """The scalar rule registered for ``f``, or None."""
    try:
        return _SCALAR.get(f)
    except TypeError:   # unhashable callable
        return None
