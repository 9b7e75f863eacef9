"""AD specializations: forward, pullback and vjp kernels per (method or function, types, mask).

``specialize(target, argtypes, mask)`` reads the target's source, normalises it, types it with
Numba, plans the reverse pass, generates the three kernels and compiles them (lazily) as
dispatchers the cache owns. Every choice the generator makes about a call (which method of a
generic function, which rule) is recorded on the specialization's engine node, so a new method
or rule that changes one of them drops exactly the kernels generated from it, and everything
compiled against them.
"""

import dataclasses
import functools
import math
import re
import threading

import numpy as np

from . import (cache, compile_flags, entries, function_values, methods, numba_glue, probes,
               profile, registry, rules, targets)
from .ad import (adjoints, analysis, closures, codegen, dataflow, fastmath, frontend, ir, kinds,
                 partials, runtime)
from .dispatch import GenericFunction, Method
from .errors import (CompilationError, DifferentiationError, DispatchError, RuleError,
                     UnsupportedSyntaxError)
from .structs import Tangent, isstruct

_ALLOCS = {np.zeros, np.ones, np.empty, np.zeros_like, np.ones_like, np.empty_like}
# A specialization is held by its target (the function, method or rule: numbarules.registry),
# in its table "_nr_ad": (argtypes, mask, flags) -> Spec; _LIVE enumerates them.
_LIVE = registry.Alive()
# Kernel names: the function's name, then _2, _3, ... for its next specializations in this
# process, so that ``nr.code`` in a fresh process shows the same names every time.
_names = set()
_names_lock = threading.Lock()
_BUILD = threading.local()   # .stack: specializations being built in this thread, outermost first


def _fresh_name(base):
    """``base``, or ``base_2``, ``base_3``, ... if taken: unique in the process (callers' kernels
    name their callees' in one namespace), deterministic for a given order of specializations."""
    with _names_lock:
        name, k = base, 1
        while name in _names:
            k += 1
            name = f"{base}_{k}"
        _names.add(name)
        return name


def _building():
    stack = getattr(_BUILD, "stack", None)
    if stack is None:
        stack = _BUILD.stack = []
    return stack


class Spec:
    """One AD specialization: its IR, types, plan, sources and compiled kernels."""

    def __init__(self, key, target, func, name):
        self.key = key
        self.target = target
        self.func = func
        self.name = name
        self.alive = True
        self.ready = False
        self.waiters = cache.Waiters()      # callers to give our kernels once built
        self.node = None
        self.calls = []             # what each differentiated call resolved to (nr.explain)
        self.entry_drivers = {}     # (argnums, with_value) -> (dispatcher, node): Python entries

    def __repr__(self):
        return f"<AD specialization {self.name}>"

    def drop(self):
        self.alive = False
        specs = registry.peek(self.target, "_nr_ad") or {}
        if specs.get(self.key) is self:
            del specs[self.key]
        _LIVE.discard(self)


def specialize(target, argtypes, mask, flags=compile_flags.DEFAULT):
    """The (cached) AD specialization of a Method or function at ``argtypes``. ``flags``
    (compile_flags.Flags): how its kernels and its callees' are compiled (bounds checks,
    fastmath)."""
    key = (tuple(argtypes), tuple(mask), flags)
    specs = registry.table(target, "_nr_ad")
    spec = specs.get(key)
    if spec is not None and spec.alive:
        return spec
    if isinstance(target, rules.Rule):
        func = target.impl if target.kind == "rrule" else target.function
    else:
        func = target.func if isinstance(target, Method) else target
    name = _fresh_name(re.sub(r"\W", "_", getattr(func, "__name__", "rule")))
    spec = specs[key] = Spec(key, target, func, name)
    _LIVE.add(spec)
    spec.flags = flags
    # Known before the build, so a recursive call inside it can read them.
    spec.tangent_kinds = tuple(None if numba_glue.is_none_type(t) else t
                               for t in tangent_types(argtypes, mask))
    spec.argtypes = tuple(argtypes)
    what = repr(target) if isinstance(target, rules.Rule) else getattr(func, "__qualname__", name)
    building = _building()
    building.append(spec)
    try:
        with profile.session(), profile.kernel(f"AD transform of {what}",
                                               profile.readable_signature(argtypes)):
            if isinstance(target, rules.Rule):
                _build_rule(spec, argtypes, mask)
            else:
                _build(spec, argtypes, mask)
    except BaseException:
        spec.drop()
        spec.waiters.failed()
        raise
    finally:
        building.pop()
    return spec


def _build(spec, argtypes, mask):
    with profile.phase(profile.NORMALISE):
        known = function_values.known(spec.func, argtypes)
        fn, refs = frontend.normalize(spec.func, known)
        ns = targets.namespace(refs)
        # the pullback reads a function parameter by name (codegen: never a residual)
        ns.update(known)
    with profile.phase(profile.TYPE_PRIMAL):
        types, rtype = _typed(spec, fn, ns, argtypes)
        if numba_glue.is_optional_type(rtype):
            fn = _no_value_errors(spec, fn, rtype, ns)
            types, rtype = _typed(spec, fn, ns, argtypes)
    types.update(dict(zip(fn.params, argtypes)))
    types.update(_global_operand_types(fn, ns, types))
    if spec.flags.fastmath:
        fn = fastmath.rewrite(fn, types)
        ns.update(fastmath.names())
    spec.fn = fn
    spec.types, spec.return_type = types, rtype
    decisions, callees = [], []

    def classify(call, arg_mask, stmt):
        return _classify(spec, call, arg_mask, stmt, types, ns, decisions, callees)

    with probes.probe_decisions() as probed:
        probes.refuse_argument_writes(fn, types)
        probes.refuse_writes_through_returned_views(spec, fn, types)
        with profile.phase(profile.ANALYSE):
            spec.plan = analysis.plan(fn, types, mask, classify)
    with profile.phase(profile.GENERATE):
        spec.kernels = codegen.generate(fn, types, spec.plan, spec.name, mask)
    # The primal's types rely on every call it makes, differentiated or not: a method added
    # later that turns an int result into a float (or a float into an array) changes them.
    typed_decisions, typed_callees = cache.relied_on(spec.typing_calls)
    # generated functions (higher.py: a directional derivative) name the engine nodes of the
    # code they were generated from: dropping one drops these kernels too
    callees += list(getattr(spec.func, "_nr_depends", ()))
    spec.node = cache.engine_node(f"AD {spec.name}", decisions + probed + typed_decisions,
                                  callees + typed_callees, spec.drop)
    if spec.kernels.whole is not None and not getattr(spec, "recursive", False):
        # One kernel for forward and reverse (see codegen.whole_vjp). Recursive functions keep
        # the vjp that calls the two kernels: Numba types their recursion through it.
        spec.kernels = dataclasses.replace(spec.kernels, vjp=spec.kernels.whole)
    _unlink_calls_outside_loops(spec, ns)
    k = spec.kernels
    ns.update(k.tangent_classes or {})
    spec.source = "\n".join((k.forward, k.pullback, k.vjp))
    targets.exec_source(spec.source, ns, f"kernels:{spec.name}", origin=fn)
    spec.ns = ns
    label = spec.func.__qualname__
    # Declaring the tangents' type lets Numba type (mutually) recursive vjps without inferring
    # the pullback's return type through the recursion.
    local_types = {} if k.fused or k.vjp is k.whole else {
        "vjp": {"_d": numba_glue.tuple_type(tangent_types(argtypes, mask))}}
    # The forward keeps the primal's error semantics (ZeroDivisionError where it would raise);
    # the pullback divides by values the forward already divided by, so it skips the checks.
    # (a prange loop's chunks run in parallel only in the driver Python calls, api.Gradient:
    # compiled callers, maybe inside their own parallel loop, run this vjp with prange as range)
    options = {"fwd": {}, "bwd": {"error_model": "numpy"}, "vjp": {}}
    for kind in ("fwd", "bwd", "vjp"):
        fname = f"{kind}_{spec.name}"
        ns[fname] = cache.owned(ns[fname], f"{label} ({kind})",
                                options=spec.flags.options(options[kind]),
                                depends=(spec.node,), local_types=local_types.get(kind),
                                persist=("ad", kind, spec.target, tuple(mask), spec.flags),
                                python=kind != "vjp")
    spec.fwd, spec.bwd, spec.vjp = (ns[f"{kind}_{spec.name}"] for kind in ("fwd", "bwd", "vjp"))
    spec.tangent_kinds = tuple(None if numba_glue.is_none_type(t) else t
                               for t in tangent_types(argtypes, mask))
    # Whether a rule somewhere below gives a value the primal would compute differently: then
    # callers take this function's value from its forward kernel, not from the primal.
    spec.uses_rules = any(
        isinstance(c["target"], rules.Rule) and c["target"].kind == "rrule"
        or getattr(c["callee"], "uses_rules", False) for c in spec.calls)
    spec.ready = True
    spec.waiters.built(spec.node)


def _unlink_calls_outside_loops(spec, ns):
    """Calls that run once per call of the kernel (outside every loop) jump to the callee's code
    instead of linking it (entries.Unlinked): linked code is optimised and compiled to machine code
    again in every kernel that links it, and a new rule deep in a call graph then recompiled
    every caller's copy of everything below. Calls inside loops stay linked, for inlining.
    Recursive functions keep linked calls (Numba types their recursion through them)."""
    if getattr(spec, "recursive", False):
        return
    inside, outside = set(), set()
    for s in ir.walk(spec.fn.body):
        e = getattr(s, "expr", None)
        if not isinstance(e, ir.Call):
            continue
        names = {e.fname}
        cp = spec.plan.calls.get(id(e))
        if cp is not None and cp.kind == "derived":
            names |= {f"fwd_{cp.name}", f"bwd_{cp.name}", f"vjp_{cp.name}"}
        (inside if id(s) in spec.plan.in_loop else outside).update(names)
    for name in outside - inside:
        value = ns.get(name)
        if isinstance(value, GenericFunction):
            ns[name] = entries.Unlinked(value, methods.resolve_call)
        elif name.startswith(("fwd_", "bwd_", "vjp_")) and numba_glue.is_dispatcher(value):
            ns[name] = entries.Unlinked.of_dispatcher(value)


def _typed(spec, fn, ns, argtypes):
    """Numba's types of the normalised primal of ``fn`` (every variable, and the result)."""
    spec.primal_source = ir.function_source(fn, f"primal_{spec.name}")
    primal = targets.exec_source(spec.primal_source, ns, f"primal:{spec.name}")[f"primal_{spec.name}"]
    numba_glue.pending_errors().clear()
    try:
        # the flags of the gradient's one kernel (api.Gradient._driver: python=False)
        spec.typing_calls = []
        return numba_glue.infer_types(primal, argtypes, cache.jit_options(
            spec.flags.options(), python=False),
            calls=spec.typing_calls)
    except numba_glue.NumbaError as exc:
        text = numba_glue.error_text(exc)
        line = _user_line(spec.primal_source, text) or fn.firstline
        pending = numba_glue.pending_errors()
        if pending:                 # our own error, raised while Numba typed a call
            err = pending.pop(0)
            pending.clear()
            err.args = (f"{err.args[0]}\n{dataflow.where(fn, line)}",) + tuple(err.args[1:])
            raise err from None
        reason = text.split("\n\nFile ")[0].strip()
        raise CompilationError(
            f"{spec.func.__qualname__} could not be typed for "
            f"{tuple(str(a) for a in argtypes)}:\n{dataflow.where(fn, line)}\n{reason}",
            function=spec.func, argtypes=argtypes, file=fn.file, line=line) from None


def _user_line(primal_source, error_text):
    """The user's line of the last statement of the generated primal that Numba's error names."""
    found = re.findall(r'File "<numbarules primal:[^"]*>", line (\d+)', error_text)
    return ir.user_line(primal_source, int(found[-1])) if found else None


def _no_value_errors(spec, fn, rtype, ns):
    """``fn`` with each ``return None`` (explicit, or falling off the end) turned into an error
    raised when that path runs, for a function that otherwise returns a float: its gradient has
    no value there, and a silent 0.0 would be a wrong answer. Other types are refused."""
    sites = [s for s in ir.walk(fn.body) if isinstance(s, ir.Assign) and s.target == "_rv"
             and s.expr == ir.Atom(ir.Const(None))]
    line = sites[0].line if sites else fn.firstline
    if not kinds.is_float(rtype.type):
        raise UnsupportedSyntaxError(
            f"a function that returns None on some path and {rtype.type} on others\n"
            f'  File "{fn.file}", line {line}, in {fn.name}\n'
            f"Hint: return a value on every path (falling off the end returns None).")
    ns["_nr_no_value"] = runtime.no_value
    sites = {id(s) for s in sites}

    def replace(s):
        message = (f"{spec.func.__qualname__} returned None ({fn.file}, line {s.line}); "
                   f"a differentiated function must return a number on every path")
        return dataclasses.replace(s, expr=ir.Call(runtime.no_value, "_nr_no_value",
                                                   (ir.Const(message), ir.Const(True))))
    return dataclasses.replace(fn, body=ir.map_statements(
        fn.body, lambda s: replace(s) if id(s) in sites else s))


def _global_operand_types(fn, ns, types):
    """Types of the globals and closure values the IR reads as operands (an array from an
    enclosing scope passed to np.concatenate): Numba freezes them as constants, and the analyses
    look every operand's type up by name."""
    out = {}
    for s in ir.walk(fn.body):
        exprs = [s.expr] if isinstance(s, ir.Assign) else []
        atoms = [a for e in exprs for a in e.atoms()]
        if isinstance(s, ir.Store):
            atoms += [s.value, *ir.index_atoms(s.index)]
        for a in atoms:
            if isinstance(a, ir.Name) and a.id not in types and a.id in ns:
                try:
                    out[a.id] = numba_glue.typeof_value(ns[a.id])
                except ValueError:
                    pass
    return out


def _build_rule(spec, argtypes, mask):
    """Kernels of a rule entry: the user's rrule closure-converted, or generated for a scalar
    rule or a non-differentiable declaration (called directly, e.g. nr.grad(f) on f itself)."""
    rule = spec.target
    if rule.kind == "rrule":
        conv = closures.convert(rule.impl, spec.name)
        ns = targets.namespace(conv.refs)
        fwd_src, bwd_src = conv.forward, conv.pullback
    else:
        ns = targets.namespace({"_f": rule.function})
        fwd_src, bwd_src = _generated_rule(rule, spec.name, argtypes, ns)
    spec.primal_source = fwd_src
    targets.exec_source(fwd_src + bwd_src, ns, f"rule:{spec.name}")
    with profile.phase(profile.CHECK_RULE):
        spec.return_type, spec.tangent_kinds, spec.residual_type = _check_rule_types(
            rule, spec.name, ns, argtypes)
    params = ", ".join(f"a{i}" for i in range(len(argtypes)))
    outs = "".join(f"_d[{k}], " for k in range(len(argtypes)))
    messages = {}
    checks = [line for k, (a, t) in enumerate(zip(argtypes, spec.tangent_kinds))
              for line in adjoints.shape_checks(f"_d[{k}]", f"a{k}", a, t, repr(rule),
                                               f"tangent {k}", messages)] \
        if rule.kind == "rrule" else []
    ns.update(messages)
    # (the cotangent is not called _dout: a second derivative differentiates this function,
    # and the reverse kernel's own seed parameter has that name)
    vjp_src = (f"def vjp_{spec.name}({params}{', ' if params else ''}_cot):\n"
               f"    _y, _res = fwd_{spec.name}({params})\n"
               f"    _d = bwd_{spec.name}(_res, _cot)\n"
               + "".join(f"    {line}\n" for line in checks) +
               f"    return (_y, {outs})\n")
    targets.exec_source(vjp_src, ns, f"rule-vjp:{spec.name}")
    spec.kernels = codegen.Kernels(fwd_src, bwd_src, vjp_src, (), (), False)
    spec.source = fwd_src + bwd_src + vjp_src
    spec.node = cache.engine_node(f"rule {spec.name}", (), (), spec.drop)
    label = f"{rule!r}"
    for kind in ("fwd", "bwd", "vjp"):
        fname = f"{kind}_{spec.name}"
        ns[fname] = cache.owned(ns[fname], f"{label} ({kind})", depends=(spec.node,),
                                options=spec.flags.options(),
                                persist=("rule", kind, rule, tuple(mask), spec.flags),
                                python=kind != "vjp")
    spec.fwd, spec.bwd, spec.vjp = (ns[f"{kind}_{spec.name}"] for kind in ("fwd", "bwd", "vjp"))
    spec.uses_rules = rule.kind == "rrule"
    spec.ready = True
    spec.waiters.built(spec.node)


def _generated_rule(rule, name, argtypes, ns):
    n = len(argtypes)
    params = ", ".join(f"a{i}" for i in range(n))
    tup = lambda xs: "(" + "".join(x + ", " for x in xs) + ")"   # noqa: E731
    fwd = f"def fwd_{name}({params}):\n    return _f({params}), {tup(f'a{i}' for i in range(n))}\n"
    lines = [f"def bwd_{name}(_res, _dout):", f"    {params}{',' if n == 1 else ''} = _res"]
    if rule.kind == "scalar":
        ns["_partials"] = methods.partials(rule.impl)
        extra = f", _f({params})" if rule.uses_result else ""
        lines.append(f"    _p = _partials({params}{extra})")
        grads = [f"_dout * _p[{i}]" if kinds.is_float(t) else "None"
                 for i, t in enumerate(argtypes)]
    else:
        grads = [("0.0" if kinds.is_float(t) else f"_zeros_like(a{i})"
                  if kinds.is_float_array(t) else "None") for i, t in enumerate(argtypes)]
    lines.append(f"    return {tup(grads)}")
    return fwd, "\n".join(lines) + "\n"


def _check_rule_types(rule, name, ns, argtypes):
    """Type the rule's kernels; RuleError unless the pullback returns one tangent of the right
    kind (None, a float for a float, a float array of the same rank for an array) per argument."""
    where = f"{rule!r}"
    try:
        ftypes, fret = numba_glue.infer_types(ns[f"fwd_{name}"], argtypes)
    except numba_glue.NumbaError as exc:
        raise RuleError(f"{where}: its forward part does not compile for "
                        f"{tuple(str(a) for a in argtypes)}:\n{numba_glue.error_text(exc)}") from None
    y_type, res_type = fret.types if numba_glue.is_tuple_type(fret) and len(fret) == 2 else (fret, None)
    try:
        btypes, bret = numba_glue.infer_types(ns[f"bwd_{name}"], (res_type, y_type))
    except numba_glue.NumbaError as exc:
        raise RuleError(f"{where}: its pullback does not compile:\n"
                        f"{numba_glue.error_text(exc)}") from None
    if not numba_glue.is_tuple_type(bret) or len(bret) != len(argtypes):
        raise RuleError(f"{where}: the pullback must return a tuple of {len(argtypes)} tangent"
                        f"{'s' * (len(argtypes) != 1)} (one per argument, None for none), "
                        f"not {bret}")
    tangents = []
    for k, (t, a) in enumerate(zip(bret, argtypes)):
        if numba_glue.is_none_type(t):
            tangents.append(None)
            continue
        if not _tangent_fits(t, a):
            raise RuleError(f"{where}: tangent {k} is {t}, but argument {k} is {a}: expected "
                            f"None or {_expected_tangent(a)}")
        tangents.append(t)
    return y_type, tuple(tangents), res_type


def _tangent_fits(t, a):
    """Whether ``t`` is a tangent type for an argument of type ``a`` (None stands for zero)."""
    if numba_glue.is_none_type(t):
        return True
    if kinds.is_float(a):
        return kinds.is_float(t)
    if kinds.is_float_array(a):
        return kinds.is_float_array(t) and t.ndim == a.ndim
    if kinds.is_float_struct(a):
        return getattr(t, "instance_class", None) is Tangent[a.instance_class] \
            and all(_tangent_fits(te, ae) for te, ae in zip(t, a))
    if kinds.is_float_tuple(a):
        return numba_glue.is_tuple_type(t) and len(t) == len(a) \
            and all(_tangent_fits(te, ae) for te, ae in zip(t, a))
    return False


def _expected_tangent(a):
    if kinds.is_float(a):
        return "a float"
    if kinds.is_float_array(a):
        return f"a float array of rank {a.ndim}"
    if kinds.is_float_struct(a):
        return f"an nr.Tangent[{a.instance_class.__name__}]"
    if kinds.is_float_tuple(a):
        return f"a tuple of {len(a)} tangents"
    return "nothing (it carries no tangent)"


def tangent_types(argtypes, mask):
    """The Numba types of the tangents a pullback returns."""
    return [tangent_type(t) if m else numba_glue.NONE for t, m in zip(argtypes, mask)]


def tangent_type(t):
    """The Numba type of the tangent of a value of type ``t`` (none where it carries none)."""
    if kinds.is_float_array(t):
        return numba_glue.array_type_like(t)
    if kinds.is_float(t):
        return t
    if kinds.is_float_struct(t):
        return numba_glue.named_tuple_type([tangent_type(e) for e in t],
                                           Tangent[t.instance_class])
    if kinds.is_float_tuple(t):
        return numba_glue.tuple_type([tangent_type(e) for e in t])
    return numba_glue.NONE


def _classify(spec, call, arg_mask, stmt, types, ns, decisions, callees):
    f = call.func
    if f is float:
        return codegen.CallPlan("identity")
    if f in (int, bool, len, round) or f in (math.floor, math.ceil, math.trunc):
        return codegen.CallPlan("nondiff")
    if f in _ALLOCS:
        return codegen.CallPlan("alloc")
    if f is np.full:
        return codegen.CallPlan("full")
    if isstruct(f):
        # A struct holding arrays shares them with its tangent, bound when the pullback starts:
        # it is built once, at the top level. One of floats is a value like any other.
        if call.kwargs or kinds.holds_arrays(types.get(stmt.target)) and \
                not any(stmt is s for s in spec.fn.body):
            raise UnsupportedSyntaxError(
                f"building the struct {f!r} (holding differentiated arrays) inside a branch or "
                f"loop, or by keyword\n"
                f'  File "{spec.fn.file}", line {stmt.line}, in {spec.func.__qualname__}\n'
                f"Hint: build it once at the top level of the function (its tangent is bound "
                f"when the pullback starts), with positional arguments.")
        return codegen.CallPlan("struct")
    argtypes = tuple(types[a.id] if isinstance(a, ir.Name) else numba_glue.typeof_value(a.value)
                     for a in call.args)
    try:
        target, made = targets.target_for(f, argtypes)
    except (DispatchError, RuleError) as exc:
        raise _at(spec, stmt, exc) from None
    except DifferentiationError as exc:
        raise DifferentiationError(f"{exc}\n  called at {spec.fn.file}:{stmt.line} in "
                                   f"{spec.func.__qualname__}") from None
    decisions.extend(made)
    info = dict(function=f, argtypes=argtypes, line=stmt.line, target=target,
                rule=next((d[3] for d in made if d[2] == "rule"), None),
                method=next((d[3] for d in made if d[2] == "method"), None), callee=None)
    spec.calls.append(info)
    if isinstance(target, rules.Rule) and target.kind == "non_differentiable":
        return codegen.CallPlan("nondiff")
    if isinstance(target, rules.Rule) and target.kind == "scalar":
        # written at the call for scalars (the expression is then what the compiled helper
        # computes), in a kernel where `math` can name the math module
        inline = None
        if all(kinds.is_real_scalar(t) for t in argtypes) and ns.get("math", math) is math:
            inline = partials.inline_form(target.impl)
        if inline is not None:
            ns["math"] = math
            return codegen.CallPlan("scalar", None, with_result=target.uses_result, inline=inline)
        # named after the function, numbered only when two rules of the same name meet in one
        # kernel (np.sin and math.sin): the same name in every process, so nr.code reads the same
        disp = methods.partials(target.impl)
        base = f"_partials_{re.sub(r'[^A-Za-z0-9]', '_', getattr(f, '__name__', 'f'))}"
        pname, k = base, 1
        while ns.get(pname, disp) is not disp:
            k += 1
            pname = f"{base}_{k}"
        ns[pname] = disp
        return codegen.CallPlan("scalar", pname, with_result=target.uses_result)
    callee = specialize(target, argtypes, arg_mask, spec.flags)
    info["callee"] = callee
    if callee.ready:
        _bind(ns, callee)
    elif callee is not spec:
        # mutual recursion: bound once the callee is built
        callee.waiters.add(spec, functools.partial(_bind, ns, callee))
    building = _building()
    if not callee.ready and callee in building:
        # A call back into a specialization still being built: every one from it to this one
        # is on the cycle (recursive). Callers of a recursive function are not: they get the
        # one-kernel gradient and unlinked calls like any other.
        for member in building[building.index(callee):]:
            member.recursive = True
    elif not callee.ready:
        spec.recursive = True           # built by another thread right now: keep it linked
    if callee.node is not None:
        callees.append(callee.node)
    mask = tuple(m and t is not None for m, t in zip(arg_mask, callee.tangent_kinds))
    checked = repr(target).replace("'", "") if isinstance(target, rules.Rule) else ""
    # Keeping the callee's residuals needs its forward's result type now (not a recursive
    # call still being built) and the same type the primal call has (a rule may differ).
    keep = callee.ready and callee is not spec and \
        getattr(callee, "return_type", None) == types.get(stmt.target)
    value = ("rule" if isinstance(target, rules.Rule) and target.kind == "rrule" else
             "forward" if getattr(callee, "uses_rules", False) else "primal")
    changes = getattr(getattr(callee, "kernels", None), "changes_residuals", True)
    ret, want = getattr(callee, "return_type", None), types.get(stmt.target)
    relayout = ""
    if kinds.is_float_array(ret) and kinds.is_float_array(want) \
            and ret.layout != want.layout and want.layout in "CF":
        relayout = "ascontiguousarray" if want.layout == "C" else "asfortranarray"
    return codegen.CallPlan("derived", callee.name, mask, checked=checked, keep=keep,
                            tangents=tuple(callee.tangent_kinds), value=value,
                            residuals=getattr(callee, "residual_type", None),
                            changes_residuals=changes, relayout=relayout)


def _bind(ns, callee):
    ns[f"fwd_{callee.name}"] = callee.fwd
    ns[f"bwd_{callee.name}"] = callee.bwd


def _at(spec, stmt, exc):
    exc.args = (f"{exc.args[0]}\n  called at {spec.fn.file}:{stmt.line} in {spec.func.__qualname__}",)
    return exc


def positions(argnums, n):
    """The argument positions ``argnums`` (an int or a tuple of ints, negative from the end)
    names in a call with ``n`` arguments; TypeError where one is out of range."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not -n <= a < n:
            raise TypeError(f"argnums {argnums!r} out of range for a call with {n} arguments")
    return tuple(a % n for a in nums)


def gradient_spec(f, argtypes, argnums, flags=compile_flags.DEFAULT):
    """``(spec, positions, decisions)``: the AD specialization a gradient of ``f`` with respect
    to ``argnums`` runs at ``argtypes``, for the CPU's gradient objects (api.Gradient) and the
    device's (cuda/gradients.py) alike. Refused, naming ``f``: a differentiated argument that
    can have no tangent, a result that is not a float."""
    spec, nums, decisions = spec_at(f, argtypes, argnums, flags)
    check_differentiable_output(spec)
    return spec, nums, decisions


def spec_at(f, argtypes, argnums, flags=compile_flags.DEFAULT):
    """``(spec, positions, decisions)`` of ``f`` at ``argtypes`` with tangents for the
    arguments at ``argnums`` (an int or a tuple of them, negative from the end), whatever its
    result (nr.pullback, nr.code); a differentiated argument that can have no tangent refused."""
    nums = positions(argnums, len(argtypes))
    mask = tuple(i in nums for i in range(len(argtypes)))
    targets.check_arguments(f, argtypes, mask)
    target, decisions = targets.target_for(f, argtypes)
    return specialize(target, argtypes, mask, flags), nums, decisions


def check_differentiable_output(spec):
    t = spec.return_type
    if not kinds.is_float(t):
        raise UnsupportedSyntaxError(
            f"{spec.func.__qualname__} returns {t}: nr.grad and nr.value_and_grad need a scalar "
            f"float result (use nr.pullback for other outputs)")
