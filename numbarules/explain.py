"""``nr.explain(f, *args)``: the tree of what differentiating a call of ``f`` uses, level by
level: the method each generic call resolved to, the rule that applies to it (and why: the rule
rule's answer), down to the first rule taken."""

from . import lattice, rules, targets
from .api import spec_for_call
from .dispatch import GenericFunction, Method


class Explanation:
    """``nr.explain(f, *args)``: the tree of calls reached while differentiating ``f``.

    ``str()`` draws it; ``root`` is the data: dicts with ``call``, ``method``, ``how`` (rule,
    derived, opted out, non-differentiable), ``where`` and ``children``.
    """

    def __init__(self, root):
        self.root = root

    def __str__(self):
        lines = []

        def draw(node, prefix, last, top):
            head = "" if top else prefix + ("└─ " if last else "├─ ")
            method = f" -> {node['method']}" if node["method"] else ""
            lines.append(f"{head}{node['call']}{method}  [{node['how']}]  {node['where']}")
            kids = node["children"]
            for k, child in enumerate(kids):
                draw(child, prefix + ("" if top else ("   " if last else "│  ")),
                     k == len(kids) - 1, False)

        draw(self.root, "", True, True)
        return "\n".join(lines)

    __repr__ = __str__


def explain(f, *args):
    """The call tree of differentiating ``f`` at these arguments: for each call, the method
    chosen and whether a ``rule``, the ``derived`` body, an ``opted out`` rule or a
    ``non-differentiable`` declaration was used."""
    spec = spec_for_call(f, args, caller="explain")
    sig = tuple(lattice.from_numba(t) for t in spec.argtypes)
    target, _ = targets.target_for(f, spec.argtypes)
    rule = rules.lookup(f, sig)
    method = target if isinstance(target, Method) else (
        f.resolve(sig) if isinstance(f, GenericFunction) else None)
    root = _node(f, sig, method, rule, spec, set())
    return Explanation(root)


def _how(rule, target):
    if isinstance(target, rules.Rule):
        return {"rrule": "rule", "scalar": "rule", "non_differentiable": "non-differentiable"}[
            target.kind]
    if rule is not None and rule.kind == "opt_out":
        return "opted out"
    return "derived"


def _display(f):
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or repr(f)
    return name.rsplit("<locals>.", 1)[-1]


def _node(f, sig, method, rule, spec, seen):
    name = _display(f)
    module = getattr(f, "__module__", "") or ""
    if module in ("math", "builtins") or module.startswith("numpy"):
        name = f"{module}.{name}" if module != "builtins" else name
    target = spec.target if spec is not None else rule
    where = ""
    if isinstance(target, rules.Rule) and target.kind != "opt_out":
        where = f"({target.kind} at {target.file}:{target.line})"
    elif isinstance(method, Method):
        where = f"({method.where()})"
    elif spec is not None:
        where = f"({spec.fn.file}:{spec.fn.firstline})" if hasattr(spec, "fn") else ""
    node = {"call": f"{name}{lattice.fmt_sig(sig)}", "method": repr(method) if method else "",
            "how": _how(rule, target), "where": where, "children": []}
    if spec is None or id(spec) in seen:
        if spec is not None:
            node["how"] += ", recursive"
        return node
    seen = seen | {id(spec)}
    for info in spec.calls:
        csig = tuple(lattice.from_numba(t) for t in info["argtypes"])
        callee = info["callee"]
        child_spec = callee if callee is not None else None
        if child_spec is None and isinstance(info["target"], rules.Rule):
            node["children"].append(_leaf(info, csig))
            continue
        node["children"].append(_node(info["function"], csig, info["method"], info["rule"],
                                      child_spec, seen))
    return node


def _leaf(info, csig):
    rule = info["target"]
    f = info["function"]
    name = _display(f)
    module = getattr(f, "__module__", "") or ""
    if module == "math":
        name = f"math.{name}"
    return {"call": f"{name}{lattice.fmt_sig(csig)}",
            "method": repr(info["method"]) if info["method"] else "",
            "how": _how(info["rule"], rule), "where": f"({rule.kind} at {rule.file}:{rule.line})",
            "children": []}
