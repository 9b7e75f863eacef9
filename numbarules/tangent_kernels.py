"""Forward-mode specializations: the tangent kernel per (method or function, types, mask).

``specialize(target, argtypes, mask)`` reads the target's source, normalises and types it as the
reverse mode does (``kernels``), finds the active variables, plans each active call and writes
the tangent kernel (``ad/pushforward.py``), compiled as a dispatcher the cache owns. Every choice
made about a call (which method, which forward rule, which reverse rule) is recorded on the
specialization's engine node, so a method or rule added later drops exactly the tangent kernels
that relied on the old answer, as for the reverse kernels.

How a call is differentiated in forward mode, for a call of ``f`` at types ``T``:

1. an ``nr.frule`` the rule rule picks among forward rules: it gives the value and tangent;
2. a non-differentiable declaration: a zero tangent;
3. a scalar rule (or a reverse rule where a scalar rule of ``f`` also applies: NumPy's
   element-wise functions on arrays): the partials times the tangents;
4. a reverse rule (``nr.rrule``) with a float result: its pullback at 1.0 dotted with the
   tangents (exactly what the rule says; one reverse sweep of the rule). A reverse rule of an
   array result is refused by name: its tangent would need one pullback per element; write an
   ``nr.frule`` for it;
5. otherwise the method (or function) the call runs, differentiated from its source: the call
   becomes a call of its own tangent kernel.
"""

import functools
import math
import re

import numpy as np

from . import (cache, compile_flags, function_values, kernels, methods, numba_glue, probes,
               registry, rules, targets)
from .ad import dataflow, forward_runtime, frontend, ir, partials, pushforward
from .ad.kinds import holds_arrays, is_array, is_float, is_real_scalar
from .dispatch import GenericFunction, Method
from .errors import DifferentiationError, DispatchError, RuleError, UnsupportedSyntaxError
from .lattice import from_numba
from .structs import isstruct

_LIVE = registry.Alive()
# nr.clear_cache empties these with its own: tangent kernels on their targets, the jvp and hvp
# objects on their functions
cache.clear_with_the_engine("_nr_jvp", "_nr_jvps", "_nr_hvps")
_NONDIFF = {int, bool, len, round, math.floor, math.ceil, math.trunc}


class TangentSpec:
    """One forward-mode specialization: its IR, types and compiled tangent kernel."""

    def __init__(self, key, target, func, name):
        self.key, self.target, self.func, self.name = key, target, func, name
        self.alive, self.ready, self.node = True, False, None
        self.flags = compile_flags.DEFAULT
        self.waiters = cache.Waiters()      # callers to give our kernel once built

    def __repr__(self):
        return f"<tangent kernel {self.name}>"

    def drop(self):
        self.alive = False
        specs = registry.peek(self.target, "_nr_jvp") or {}
        if specs.get(self.key) is self:
            del specs[self.key]
        _LIVE.discard(self)


def specialize(target, argtypes, mask, entry_of=None, tangent_only=False, for_reverse=False):
    """The (cached) tangent kernel of a Method or function at ``argtypes``; ``mask``: which
    arguments have tangents. ``entry_of``: build the kernel of a call of that function instead
    (``nr.jvp(f)``'s entry: a rule of ``f`` itself applies there).

    ``for_reverse`` (implied by ``tangent_only``, the kernels ``nr.hvp`` differentiates): the
    reverse mode will differentiate the kernel, and it refuses a tuple holding arrays bound in a
    loop; so a call whose result holds arrays is written as the primal call and a call of the
    callee's tangent-only kernel (the callee's primal runs twice) rather than one call returning
    the pair."""
    # under Numba's compiler lock (reentrant), as every compile: a thread must not find
    # another's specialization half built (threads of the CUDA simulator call nr.jvp at once)
    with numba_glue.LOCK:
        return _specialize(target, argtypes, mask, entry_of, tangent_only, for_reverse)


def _specialize(target, argtypes, mask, entry_of, tangent_only, for_reverse):
    for_reverse = bool(for_reverse or tangent_only)
    key = (tuple(argtypes), tuple(mask), entry_of is not None, bool(tangent_only), for_reverse)
    specs = registry.table(target, "_nr_jvp")
    spec = specs.get(key)
    if spec is not None and spec.alive:
        return spec
    if entry_of is not None:
        func = entry_of
    else:
        func = target.func if isinstance(target, Method) else target
    name = kernels._fresh_name(re.sub(r"\W", "_", getattr(func, "__name__", "f")))
    spec = specs[key] = TangentSpec(key, target, func, name)
    spec.for_reverse = for_reverse
    _LIVE.add(spec)
    try:
        _build(spec, tuple(argtypes), tuple(mask), entry_of, tangent_only)
    except BaseException:
        spec.drop()
        spec.waiters.failed()
        raise
    return spec


def _entry_ir(f, n):
    """``def <name>(a0, ..): _y = f(a0, ..); return _y``: the IR of a call of ``f`` itself."""
    params = tuple(f"a{i}" for i in range(n))
    name = re.sub(r"\W", "_", getattr(f, "__name__", "f"))
    call = ir.Call(f, "_f", tuple(ir.Name(p) for p in params))
    body = (ir.Assign("_y", call, 0), ir.Return(ir.Name("_y"), 0))
    return ir.Function(name, params, body, "<nr.jvp>", 0)


def _build(spec, argtypes, mask, entry_of, tangent_only=False):
    if entry_of is not None:
        fn = _entry_ir(entry_of, len(argtypes))
        ns = targets.namespace({"_f": entry_of})
        spec.func = entry_of
    else:
        fn, refs = frontend.normalize(spec.func, function_values.known(spec.func, argtypes))
        ns = targets.namespace(refs)
    types, rtype = kernels._typed(spec, fn, ns, argtypes)
    if numba_glue.is_optional_type(rtype):
        fn = kernels._no_value_errors(spec, fn, rtype, ns)
        types, rtype = kernels._typed(spec, fn, ns, argtypes)
    spec.fn = fn
    types.update(dict(zip(fn.params, argtypes)))
    types.update(kernels._global_operand_types(fn, ns, types))
    spec.types, spec.return_type = types, rtype
    stmts = list(ir.walk(fn.body))
    # the kernel writes into the tangent of an argument it writes into: nr.jvp then passes a copy
    spec.writes_arguments = any(kind in ("argument", "part")
                                for kind, *_ in probes._array_writes(fn, types))
    view_of = dataflow.views(fn, types)
    alias = dataflow._alias_classes(stmts, types, view_of)
    active = dataflow._activity(fn, stmts, types, mask, alias)
    decisions, callees = [], []
    calls = {}
    for s in stmts:
        if isinstance(s, ir.Assign) and isinstance(s.expr, ir.Call) and s.target in active:
            calls[id(s.expr)] = _classify(spec, s, types, ns, active, decisions, callees)
    emitter = pushforward._Emitter(fn, types, active, calls)
    source = emitter.kernel(spec.name, mask, tangent_only)
    if emitter.uses_math:
        ns["math"] = math
    ns.update(emitter.tangent_classes)
    ns.update(forward_runtime.HELPERS)
    typed_decisions, typed_callees = cache.relied_on(spec.typing_calls)
    spec.node = cache.engine_node(f"jvp {spec.name}", decisions + typed_decisions,
                                  callees + typed_callees, spec.drop)
    spec.source = source
    targets.exec_source(source, ns, f"jvp:{spec.name}", origin=fn if entry_of is None else None)
    label = getattr(spec.func, "__qualname__", spec.name)
    # the Python function: the reverse mode differentiates it for second derivatives (higher.py)
    spec.py_func = ns[f"jvp_{spec.name}"]
    spec.py_func._nr_depends = (spec.node,)
    ns[f"jvp_{spec.name}"] = cache.owned(ns[f"jvp_{spec.name}"], f"{label} (jvp)",
                                         depends=(spec.node,))
    spec.ns = ns
    spec.jvp = ns[f"jvp_{spec.name}"]
    spec.ready = True
    # mutual recursion: a callee built inside this build calls this kernel; it gets the kernel
    # now (Numba resolves the name when it compiles, at the first call)
    spec.waiters.built(spec.node)


def _give(ns, name, callee):
    ns[name] = callee.jvp


def _refuse(spec, s, what, hint):
    return UnsupportedSyntaxError(f"{what}\n{dataflow.where(spec.fn, s.line)}\nHint: {hint}")


def _classify(spec, s, types, ns, active, decisions, callees):
    call = s.expr
    f = call.func
    if f is float:
        return pushforward.TangentCall("identity")
    if f in _NONDIFF:
        return pushforward.TangentCall("nondiff")
    if f in kernels._ALLOCS:
        return pushforward.TangentCall("alloc")
    if f is np.full:
        return pushforward.TangentCall("full")
    if isstruct(f):
        if call.kwargs:
            raise _refuse(spec, s, f"building the struct {f.__name__} by keyword in forward mode",
                          "pass its fields by position.")
        return pushforward.TangentCall("struct")
    argtypes = tuple(types[a.id] if isinstance(a, ir.Name) else numba_glue.typeof_value(a.value)
                     for a in call.args)
    arg_mask = tuple(isinstance(a, ir.Name) and a.id in active for a in call.args)
    sig = tuple(from_numba(a) for a in argtypes)
    try:
        frule = rules.lookup_frule(f, sig)
        rule = rules.lookup(f, sig)
        method = f.resolve(sig) if isinstance(f, GenericFunction) else None
    except (DispatchError, RuleError) as exc:
        raise kernels._at(spec, s, exc) from None
    decisions += [(f, sig, "frule", frule, argtypes), (f, sig, "rule", rule, argtypes)]
    if method is not None:
        decisions.append((f, sig, "method", method, argtypes))
    plain = not call.kwargs
    if frule is not None:
        if not plain:
            raise _refuse(spec, s, f"a call by keyword of {f.__name__}, which has a forward rule",
                          "pass its arguments by position.")
        name = _free_name(ns, f"_frule_{getattr(f, '__name__', 'f')}", methods.helper(frule.impl))
        return pushforward.TangentCall("frule", name)
    if rule is not None and rule.kind == "non_differentiable":
        return pushforward.TangentCall("nondiff")
    scalar = rule if rule is not None and rule.kind == "scalar" else None
    if rule is not None and rule.kind == "rrule":
        # NumPy's element-wise functions have rrules for arrays (a faster pullback) beside
        # their scalar rule, which serves arrays element-wise in forward mode
        scalar = rules._most_specific(f, sig, tuple(r for r in rules.entries(f)
                                                     if r.kind == "scalar"))
    if scalar is not None:
        inline = None
        if all(is_real_scalar(t) for t in argtypes) and ns.get("math", math) is math:
            inline = partials.inline_form(scalar.impl)
        if inline is not None:
            return pushforward.TangentCall("scalar", with_result=scalar.uses_result,
                                           inline=inline)
        disp = methods.partials(scalar.impl)
        name = _free_name(ns, f"_partials_{getattr(f, '__name__', 'f')}", disp)
        return pushforward.TangentCall("scalar", name, with_result=scalar.uses_result)
    if rule is not None and rule.kind == "rrule":
        if not is_float(types.get(s.target)) or not plain:
            raise DifferentiationError(
                f"no forward rule for {rule!r}, and its result is {types.get(s.target)}: forward "
                f"mode (nr.jvp) can use a reverse rule only for a float result (its pullback at "
                f"1.0)\n{dataflow.where(spec.fn, s.line)}\n"
                f"Hint: give it a forward rule with nr.frule (the value and its tangent from the "
                f"arguments and their tangents).")
        rspec = kernels.specialize(rule, argtypes, arg_mask)
        if rspec.node is not None:
            callees.append(rspec.node)
        name = _free_name(ns, f"_vjp_{rspec.name}", rspec.vjp)
        # a second derivative differentiates this vjp in reverse mode: the rule's forward and
        # its pullback's body (the user's code), like ChainRules' rrule under Zygote
        return pushforward.TangentCall("pullback", name,
                                       tangents=tuple(rspec.tangent_kinds))
    if not plain:
        raise _refuse(spec, s, f"a call by keyword of {getattr(f, '__name__', f)} in forward mode",
                      "pass its arguments by position.")
    target = method if method is not None else targets.source_of(f)
    result = types.get(s.target)
    split = spec.for_reverse and (is_array(result) or holds_arrays(result))
    kind = "split" if split else "derived"
    callee = specialize(target, argtypes, arg_mask, tangent_only=split,
                        for_reverse=spec.for_reverse)
    if callee.node is not None:
        callees.append(callee.node)
    if callee is spec:
        # self-recursion: the kernel calls itself by its name in its own namespace
        _warm_generated_module()
        return pushforward.TangentCall(kind, f"jvp_{spec.name}", mask=arg_mask)
    name = f"jvp_{callee.name}"
    if not callee.ready:
        # A call back into a specialization still being built (under the compiler lock, by
        # this thread: mutual recursion, or a recursive call with other tangents). Bound, and
        # linked for backedges, when that one is built (TangentSpec.waiters).
        _warm_generated_module()
        callee.waiters.add(spec, functools.partial(_give, ns, name, callee))
        return pushforward.TangentCall(kind, name, mask=arg_mask)
    ns[name] = callee.jvp
    if spec.fn.file == "<nr.jvp>" and arg_mask == spec.key[1]:
        # nr.jvp(f)'s entry, a call of f with the same tangents: higher.py differentiates the
        # callee's kernel directly (one level of calls less in the reverse)
        spec.inner = callee
    return pushforward.TangentCall(kind, name, mask=arg_mask)


def _free_name(ns, base, value):
    """``base`` (numbered when taken by another value) bound to ``value`` in ``ns``."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", base)
    name, k = base, 1
    while ns.get(name, value) is not value:
        k += 1
        name = f"{base}_{k}"
    ns[name] = value
    return name


_WARM = []


def _warm_generated_module():
    """Compile one function of the generated-code module before a recursive kernel: the first
    function of that module a process compiles, if recursive, aborts at its call to itself
    ("unresolved symbol"); once any function of the module was compiled, recursion resolves
    (docs/numba-internals.md)."""
    if _WARM:
        return
    import numba
    ns = {"__name__": cache.GENERATED}
    exec("def _nr_warm(x):\n    return x + 1.0\n", ns)  # noqa: S102 - our own source
    numba.njit(ns["_nr_warm"])(1.0)
    _WARM.append(True)
