"""The rule registry and the rule rule: derivative rules attach to methods, not functions.

Kinds of entry, each registered for a function ``f`` and a signature ``S`` of lattice types:

- ``rrule``: the user's ``(y, pullback)`` function (``nr.rrule``);
- ``frule``: the user's ``(y, dy)`` function of the arguments and their tangents (``nr.frule``),
  used by forward mode (``nr.jvp``); looked up by the same rule rule among frules alone
  (``lookup_frule``);
- ``scalar``: partial derivatives of a scalar function (``nr.scalar_rule``);
- ``opt_out``: differentiate the method where a rule would apply (``nr.opt_out``);
- ``non_differentiable``: zero tangents, the body is not entered (``nr.non_differentiable``).

**The rule rule** (``lookup``). For a call of ``f`` at concrete types ``T``, the entry used is the
most specific one whose signature ``S`` satisfies ``T <: S``, and, when ``f`` is a generic
function, only if ``f.which(T) is f.which(S)``: the call runs the very method the entry was
written for. Otherwise the method the call runs is differentiated from its source:

    T <: S   S most specific   which(T) is which(S)   ->  entry used
    no       -                 -                      ->  differentiate
    yes      no (a narrower S' wins)                  ->  S' decides
    yes      yes               no                     ->  differentiate which(T)
    yes      yes               yes                    ->  the entry (rule / opt-out / ...)

Registries are plain dicts owned by this module, written only through ``register``, which
validates, stores (an entry with an equal signature replaces the old one) and tells the cache,
which drops exactly the compiled code whose recorded decisions now come out differently.
"""

import inspect
from dataclasses import dataclass

from . import dispatch, numba_glue
from .dispatch import GenericFunction, applicable, more_specific
from .errors import DispatchError, RuleError
from .lattice import LatticeMeta, as_lattice, fmt_sig, source_location, typeof


@dataclass(frozen=True, eq=False)
class Rule:
    kind: str                  # rrule | frule | scalar | opt_out | non_differentiable
    function: object           # the function it is for
    signature: object          # tuple of lattice types; None: any arguments (scalar rules)
    impl: object = None        # the rule function, or the partials function
    uses_result: bool = False  # scalar rules: partials take the primal result last
    file: str = ""
    line: int = 0

    def __repr__(self):
        name = getattr(self.function, "__name__", repr(self.function))
        sig = "(...)" if self.signature is None else fmt_sig(self.signature)
        return f"{self.kind} for {name}{sig} at {self.file}:{self.line}"

    def _nr_fingerprint(self):
        sig = None if self.signature is None else fmt_sig(self.signature)
        return ("rule", self.kind, sig, self.function, self.impl, self.uses_result)


_RULES = {}      # function -> tuple of Rule (swapped whole, never mutated in place)


def register(rule):
    f = rule.function
    if isinstance(f, GenericFunction) and rule.signature is not None:
        try:
            f.resolve(rule.signature)
        except DispatchError as exc:
            raise RuleError(
                f"{rule.kind} for {f.__name__}{fmt_sig(rule.signature)} ({rule.file}:{rule.line}):"
                f" no single method of {f.__name__} accepts these types, so the rule could never "
                f"apply.\n{exc}") from None
    with numba_glue.LOCK:
        entries = tuple(r for r in _RULES.get(f, ()) if not (
            r.signature == rule.signature and _family(r) == _family(rule)))
        _RULES[f] = entries + (rule,)
        backend = dispatch.backend()
        if backend is not None:
            backend.rules_changed(f)
    return rule


def _family(rule):
    """Scalar rules, forward rules and the other kinds live side by side for one signature."""
    return rule.kind if rule.kind in ("scalar", "frule") else "rule"


def entries(f):
    """Every rule entry registered for ``f``."""
    try:
        return _RULES.get(f, ())
    except TypeError:   # an unhashable callable
        return ()


def lookup(f, sig):
    """The entry a call of ``f`` at lattice types ``sig`` uses (the rule rule), or None.
    Forward rules are not entries of this lookup (``lookup_frule``)."""
    try:
        entries = tuple(r for r in _RULES.get(f, ()) if r.kind != "frule")
    except TypeError:   # an unhashable callable
        return None
    return _most_specific(f, sig, entries)


def lookup_frule(f, sig):
    """The forward rule a call of ``f`` at ``sig`` uses in forward mode (the rule rule among
    ``nr.frule`` entries alone), or None."""
    try:
        entries = tuple(r for r in _RULES.get(f, ()) if r.kind == "frule")
    except TypeError:
        return None
    return _most_specific(f, sig, entries)


def _most_specific(f, sig, entries):
    found = [r for r in entries if r.signature is None or applicable(r.signature, sig)]
    if not found:
        return None
    typed = [r for r in found if r.signature is not None]
    if not typed:
        return found[-1]
    maximal = [r for r in typed if not any(more_specific(o.signature, r.signature) for o in typed)]
    if len({r.signature for r in maximal}) != 1:
        raise RuleError(
            f"the rules for {getattr(f, '__name__', f)}{fmt_sig(sig)} are ambiguous: "
            + "; ".join(repr(r) for r in maximal)
            + ". Add a rule (or nr.opt_out) for the intersection.")
    # At one signature an rrule / opt-out / non-differentiable entry outranks a scalar rule.
    rule = next((r for r in maximal if r.kind != "scalar"), maximal[0])
    if isinstance(f, GenericFunction):
        try:
            if f.resolve(sig) is not f.resolve(rule.signature):
                return None        # a more specific method runs: differentiate it instead
        except DispatchError:
            return None
    return rule


def rule_for(f, *args):
    """The rule (an ``nr.rrule`` or ``nr.scalar_rule`` entry) ``f(*args)`` would use, or None.

    Each arg may be a value or a lattice type. Opt-outs and non-differentiable declarations
    return None here (no rule is used); ``nr.explain`` shows them.
    """
    sig = tuple(a if isinstance(a, LatticeMeta) else typeof(a) for a in args)
    rule = lookup(f, sig)
    return rule if rule is not None and rule.kind in ("rrule", "scalar") else None


def _signature(f, impl, types, what):
    file, line = source_location(impl) if impl is not None else ("<none>", 0)
    if types:
        try:
            return tuple(as_lattice(t) for t in types), file, line
        except TypeError as exc:
            raise RuleError(f"{what} for {getattr(f, '__name__', f)} ({file}:{line}): {exc}") from None
    if impl is None:
        return None, file, line
    params = list(inspect.signature(impl).parameters.values())
    sig = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise RuleError(f"{what} {impl.__qualname__} ({file}:{line}): parameter '{p.name}' "
                            f"must be plain positional")
        try:
            sig.append(as_lattice(p.annotation))
        except TypeError as exc:
            raise RuleError(f"{what} {impl.__qualname__} ({file}:{line}): parameter "
                            f"'{p.name}': {exc}") from None
    return tuple(sig), file, line


def rrule(f, *types):
    """Decorate ``rule(*args) -> (y, pullback)``: a reverse rule for the method ``f(*types)``.

    ``pullback(dy)`` returns one tangent per positional argument (None for none). It may read
    any local of the rule: numbarules compiles it with Numba (closure-converted), it is not run
    as a Python closure. Types come from ``types`` or the rule's annotations.

    >>> @nr.rrule(my_sum)
    ... def _(x: nr.AbstractMatrix):
    ...     y = my_sum(x)
    ...     m, n = x.shape
    ...     def my_sum_pullback(dy):
    ...         return (np.full((m, n), dy),)
    ...     return y, my_sum_pullback
    """
    def decorate(impl):
        if not inspect.isfunction(impl):
            raise RuleError(f"nr.rrule({getattr(f, '__name__', f)}) decorates a Python function")
        sig, file, line = _signature(f, impl, types, "rrule")
        register(Rule("rrule", f, sig, impl, False, file, line))
        return impl
    return decorate


def frule(f, *types):
    """Decorate ``rule(*args, *tangents) -> (y, dy)``: a forward rule (pushforward) for the method
    ``f(*types)``, used by ``nr.jvp`` and the forward mode (ChainRules' ``frule``).

    The rule takes the primal arguments, then one tangent per argument (a zero of the
    argument's kind for an argument that is not differentiated, None for integers and
    booleans), and returns the value and its tangent. It is compiled with Numba. Types come from
    ``types`` or the annotations of the primal parameters.

    >>> @nr.frule(my_sum)
    ... def _(x: nr.AbstractMatrix, dx):
    ...     return my_sum(x), np.sum(dx)
    """
    def decorate(impl):
        if not inspect.isfunction(impl):
            raise RuleError(f"nr.frule({getattr(f, '__name__', f)}) decorates a Python function")
        params = list(inspect.signature(impl).parameters.values())
        if len(params) % 2:
            raise RuleError(f"frule {impl.__qualname__}: it takes the arguments, then one tangent "
                            f"per argument (an even number of parameters), not {len(params)}")
        if types:
            sig, file, line = _signature(f, impl, types, "frule")
        else:
            half = params[:len(params) // 2]
            proxy = inspect.Signature(half)
            stub = lambda *a: None    # noqa: E731 - carries the primal half's annotations
            stub.__signature__ = proxy
            stub.__qualname__ = impl.__qualname__
            sig, _, _ = _signature(f, stub, (), "frule")
            file, line = source_location(impl)
        register(Rule("frule", f, sig, impl, False, file, line))
        return impl
    return decorate


def scalar_rule(f, *types, uses_result=False):
    """Decorate ``partials(*args) -> tuple`` of the partial derivatives of scalar function ``f``.

    With ``uses_result=True`` the partials function takes the primal result as one more, last
    argument (``exp``'s derivative is its result). Without ``types`` it covers every call of
    ``f``; with them, the calls whose types match (the rule rule applies).

    >>> @nr.scalar_rule(math.sin)
    ... def _(x):
    ...     return (math.cos(x),)
    """
    def register_partials(partials):
        if not callable(partials):
            raise RuleError(f"scalar_rule({f!r}) decorates a function returning the partials")
        sig, file, line = _signature(f, None, types, "scalar_rule")
        file, line = source_location(partials)
        register(Rule("scalar", f, sig, partials, uses_result, file, line))
        return partials
    return register_partials


def opt_out(f, *types):
    """Where a rule would apply to calls of ``f`` at ``types``, differentiate the method instead."""
    caller = inspect.stack()[1]
    sig = tuple(as_lattice(t) for t in types)
    return register(Rule("opt_out", f, sig, None, False, caller.filename, caller.lineno))


def non_differentiable(f, *types):
    """Calls of ``f`` at ``types`` get zero tangents; its body is not differentiated."""
    caller = inspect.stack()[1]
    sig = tuple(as_lattice(t) for t in types) if types else None
    return register(Rule("non_differentiable", f, sig, None, False, caller.filename,
                         caller.lineno))
