"""What a call is differentiated as (the rule rule applied): a rule, a method's body or a
function's own source; the arguments that can have no tangent, refused by name; and generated
source run in its namespace, with the user's lines it came from."""

import inspect
import linecache
import math

from . import cache, methods, numba_glue, rules
from .ad import kinds, runtime, tangents
from .primitives import arrays
from .dispatch import GenericFunction
from .errors import DifferentiationError, TangentShapeError
from .lattice import from_numba


def target_for(f, argtypes):
    """What to differentiate for a call of ``f`` at Numba ``argtypes``, and the decisions made.

    The target is a ``rules.Rule`` when the rule rule picks an rrule, a scalar rule or a
    non-differentiable declaration; else the Method (generic functions) or the Python function
    whose source is differentiated.
    """
    sig = tuple(from_numba(a) for a in argtypes)
    rule = rules.lookup(f, sig)
    argtypes = tuple(argtypes)
    decisions = [(f, sig, "rule", rule, argtypes)]
    method = None
    if isinstance(f, GenericFunction):
        method = f.resolve(sig)
        decisions.append((f, sig, "method", method, argtypes))
    if rule is not None and rule.kind != "opt_out":
        return rule, tuple(decisions)
    if method is not None:
        return method, tuple(decisions)
    if getattr(f, "_nr_gradient_of", None) is not None:
        # nr.grad(f) of a float argument: its directional derivative's generated source
        from .higher import derivative_function
        return derivative_function(f, argtypes), tuple(decisions)
    return source_of(f), tuple(decisions)


def source_of(f):
    why = getattr(f, "_nr_refusal", None) or getattr(getattr(f, "py_func", None), "_nr_refusal",
                                                     None)
    if why is not None:
        raise DifferentiationError(f"cannot differentiate {getattr(f, '__name__', f)}: {why}")
    if getattr(f, "_nr_gradient_of", None) is not None:
        raise DifferentiationError(
            f"cannot differentiate {f!r}: second derivatives (nr.grad of a gradient object, or "
            f"a gradient object called inside a differentiated function) are not supported yet. "
            f"Hint: write the derivative you need as a function of its own, or give it a rule "
            f"with nr.rrule.")
    if numba_glue.is_dispatcher(f):
        return getattr(f, "_nr_source", None) or f.py_func
    if inspect.isfunction(f) and not _is_library(f):
        return f
    name = f"{getattr(f, '__module__', '') or ''}.{getattr(f, '__qualname__', f)}".lstrip(".")
    raise DifferentiationError(
        f"cannot differentiate a call of {name}: it has no Python source numbarules "
        f"differentiates and no rule. Give it a rule with nr.scalar_rule (or nr.rrule), or "
        f"declare it nr.non_differentiable.")


def _is_library(f):
    """NumPy, SciPy and Numba functions: differentiated only through rules, never their source."""
    return (getattr(f, "__module__", None) or "").split(".")[0] in ("numpy", "scipy", "numba")


def check_arguments(f, argtypes, mask):
    """Refuse, naming ``f`` and the argument, a differentiated argument that can have no
    tangent (a list, a complex number): never a silent None in place of a gradient."""
    for k, (t, m) in enumerate(zip(argtypes, mask)):
        why = kinds.tangent_refusal(t) if m else None
        if why is not None:
            name = getattr(f, "__qualname__", None) or getattr(f, "__name__", repr(f))
            raise DifferentiationError(f"cannot differentiate {name} with respect to argument "
                                       f"{k}, {why}")





def namespace(refs):
    ns = {}
    for k, v in refs.items():
        ns[k] = methods.helper(v) if methods.is_plain(v) else arrays.for_numba(v)
    ns.update(runtime.HELPERS)
    ns.update(tangents.HELPERS)
    ns["_np"] = arrays.NUMPY
    ns["_math"] = math
    ns["_RuleError"] = TangentShapeError
    ns["__name__"] = cache.GENERATED
    return ns


def exec_source(source, ns, tag, origin=None):
    """Run generated ``source`` (as file ``<numbarules tag>``); with ``origin`` (a normalised
    function), errors its compiled code raises at run time name the user's lines
    (``numba_glue.located``)."""
    filename = f"<numbarules {tag}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    if origin is not None:
        numba_glue.located.register_lines(filename, origin.file, origin.name, source)
    exec(compile(source, filename, "exec"), ns)  # noqa: S102 - our own generated source
    return ns


