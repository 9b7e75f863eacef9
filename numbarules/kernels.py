"""AD specializations: forward, pullback and vjp kernels per (method or function, types, mask).

``specialize(target, argtypes, mask)`` reads the target's source, normalises it, types it with
Numba, plans the reverse pass, generates the three kernels and compiles them (lazily) as
dispatchers the cache owns. Every choice the generator makes about a call (which method of a
generic function, which rule) is recorded on the specialization's engine node, so a new method
or rule that changes one of them drops exactly the kernels generated from it, and everything
compiled against them.
"""

import inspect
import itertools
import linecache
import re
import math

import numpy as np

from . import cache, numba_glue, rules
from .ad import analysis, codegen, frontend, ir, runtime
from .dispatch import GenericFunction, Method
from .errors import CompilationError, DifferentiationError, DispatchError, UnsupportedSyntaxError
from .lattice import from_numba, source_location

_ALLOCS = {np.zeros, np.ones, np.empty, np.zeros_like, np.ones_like, np.empty_like}
_SPECS = {}          # (target, argtypes, mask) -> Spec
_ids = itertools.count(1)


class Spec:
    """One AD specialization: its IR, types, plan, sources and compiled kernels."""

    def __init__(self, key, target, func, name):
        self.key = key
        self.target = target
        self.func = func
        self.name = name
        self.alive = True
        self.ready = False
        self.waiters = []           # namespaces to give our kernels once they exist
        self.node = None

    def __repr__(self):
        return f"<AD specialization {self.name}>"

    def drop(self):
        self.alive = False
        if _SPECS.get(self.key) is self:
            del _SPECS[self.key]


def target_for(f, argtypes):
    """What to differentiate for a call of ``f`` at Numba ``argtypes``, and the decision made."""
    if isinstance(f, GenericFunction):
        sig = tuple(from_numba(a) for a in argtypes)
        method = f.resolve(sig)
        return method, ((f, sig, method),)
    if numba_glue.is_dispatcher(f):
        return f.py_func, ()
    if inspect.isfunction(f) and not _is_library(f):
        return f, ()
    name = f"{getattr(f, '__module__', '') or ''}.{getattr(f, '__qualname__', f)}".lstrip(".")
    raise DifferentiationError(
        f"cannot differentiate a call of {name}: it has no Python source numbarules "
        f"differentiates and no rule. Give it a rule with nr.scalar_rule (or nr.rrule), or "
        f"declare it nr.non_differentiable.")


def _is_library(f):
    """NumPy, SciPy and Numba functions: differentiated only through rules, never their source."""
    return (getattr(f, "__module__", None) or "").split(".")[0] in ("numpy", "scipy", "numba")


def specialize(target, argtypes, mask):
    """The (cached) AD specialization of a Method or function at ``argtypes``."""
    key = (target, tuple(argtypes), tuple(mask))
    spec = _SPECS.get(key)
    if spec is not None and spec.alive:
        return spec
    func = target.func if isinstance(target, Method) else target
    name = re.sub(r"\W", "_", f"{func.__name__}_{next(_ids)}")
    spec = _SPECS[key] = Spec(key, target, func, name)
    try:
        _build(spec, argtypes, mask)
    except BaseException:
        spec.drop()
        raise
    return spec


def _build(spec, argtypes, mask):
    fn, refs = frontend.normalize(spec.func)
    ns = _namespace(refs)
    spec.fn = fn
    spec.primal_source = ir.function_source(fn, f"primal_{spec.name}")
    primal = _exec(spec.primal_source, ns, f"primal:{spec.name}")[f"primal_{spec.name}"]
    try:
        types, rtype = numba_glue.infer_types(primal, argtypes)
    except numba_glue.NumbaError as exc:
        file, line = source_location(spec.func)
        raise CompilationError(
            f"{spec.func.__qualname__} ({file}:{line}) could not be typed for "
            f"{tuple(str(a) for a in argtypes)}:\n{numba_glue.error_text(exc)}",
            function=spec.func, argtypes=argtypes, file=file, line=line) from None
    types.update(dict(zip(fn.params, argtypes)))
    spec.types, spec.return_type = types, rtype
    decisions, callees = [], []

    def classify(call, arg_mask, stmt):
        return _classify(spec, call, arg_mask, stmt, types, ns, decisions, callees)

    _refuse_argument_writes(fn, types)
    spec.plan = analysis.plan(fn, types, mask, classify)
    spec.kernels = codegen.generate(fn, types, spec.plan, spec.name, mask)
    spec.node = cache.engine_node(f"AD {spec.name}", decisions, callees, spec.drop)
    k = spec.kernels
    spec.source = "\n".join((k.forward, k.pullback, k.vjp))
    _exec(spec.source, ns, f"kernels:{spec.name}")
    label = spec.func.__qualname__
    # Declaring the tangents' type lets Numba type (mutually) recursive vjps without inferring
    # the pullback's return type through the recursion.
    local_types = {} if k.fused else {
        "vjp": {"_d": numba_glue.tuple_type(tangent_types(argtypes, mask))}}
    # The forward keeps the primal's error semantics (ZeroDivisionError where it would raise);
    # the pullback divides by values the forward already divided by, so it skips the checks.
    options = {"bwd": {"error_model": "numpy"}}
    for kind in ("fwd", "bwd", "vjp"):
        fname = f"{kind}_{spec.name}"
        ns[fname] = cache.owned(ns[fname], f"{label} ({kind})", options=options.get(kind),
                                depends=(spec.node,), local_types=local_types.get(kind))
    spec.fwd, spec.bwd, spec.vjp = (ns[f"{kind}_{spec.name}"] for kind in ("fwd", "bwd", "vjp"))
    spec.ready = True
    for other_ns in spec.waiters:
        _bind(other_ns, spec)


def tangent_types(argtypes, mask):
    """The Numba types of the tangents a pullback returns."""
    out = []
    for t, m in zip(argtypes, mask):
        if m and analysis.is_float_array(t):
            out.append(numba_glue.array_type_like(t))
        elif m and analysis.is_float(t):
            out.append(t)
        else:
            out.append(numba_glue.NONE)
    return out


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
    rule = rules.scalar_rule_for(f)
    if rule is not None:
        pname = f"_partials_{getattr(f, '__name__', 'f')}"
        ns[pname] = cache.helper(rule.partials)
        return codegen.CallPlan("scalar", pname, with_result=rule.uses_result)
    argtypes = tuple(types[a.id] if isinstance(a, ir.Name) else numba_glue.typeof_value(a.value)
                     for a in call.args)
    try:
        target, made = target_for(f, argtypes)
    except DispatchError as exc:
        raise _at(spec, stmt, exc) from None
    except DifferentiationError as exc:
        raise DifferentiationError(f"{exc}\n  called at {spec.fn.file}:{stmt.line} in "
                                   f"{spec.func.__qualname__}") from None
    decisions.extend(made)
    callee = specialize(target, argtypes, arg_mask)
    if callee.ready:
        _bind(ns, callee)
    elif callee is not spec:
        callee.waiters.append(ns)     # mutual recursion: bound once the callee is built
    if callee.node is not None:
        callees.append(callee.node)
    return codegen.CallPlan("derived", callee.name, arg_mask)


def _bind(ns, callee):
    ns[f"fwd_{callee.name}"] = callee.fwd
    ns[f"bwd_{callee.name}"] = callee.bwd


def _at(spec, stmt, exc):
    exc.args = (f"{exc.args[0]}\n  called at {spec.fn.file}:{stmt.line} in {spec.func.__qualname__}",)
    return exc


def _refuse_argument_writes(fn, types):
    """A function that writes into an argument array cannot be replayed (checkpointing runs a
    callee's forward again) nor have its input restored for the caller: refuse it."""
    params = set(fn.params)
    bound = {}
    for s in ir.walk(fn.body):
        if isinstance(s, ir.Assign) and isinstance(s.expr, ir.Atom) and isinstance(s.expr.a, ir.Name):
            bound[s.target] = s.expr.a.id
    for s in ir.walk(fn.body):
        if isinstance(s, ir.Store):
            root = s.array
            while root in bound and root not in params:
                root = bound[root]
            if root in params:
                raise UnsupportedSyntaxError(
                    f"writing into the argument array '{root}'\n"
                    f'  File "{fn.file}", line {s.line}, in {fn.name}\n'
                    f"Hint: differentiated functions leave their arguments unchanged; work on a "
                    f"copy ({root} = {root}.copy()).")


def _namespace(refs):
    ns = {}
    for k, v in refs.items():
        ns[k] = cache.helper(v) if cache.is_plain(v) else v
    ns.update(runtime.HELPERS)
    ns["_math"] = math
    return ns


def _exec(source, ns, tag):
    filename = f"<numbarules {tag}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)  # noqa: S102 - our own generated source
    return ns


def check_differentiable_output(spec):
    t = spec.return_type
    if not analysis.is_float(t):
        raise UnsupportedSyntaxError(
            f"{spec.func.__qualname__} returns {t}: nr.grad and nr.value_and_grad need a scalar "
            f"float result (use nr.pullback for other outputs)")
