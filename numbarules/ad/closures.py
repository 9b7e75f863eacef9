"""Closure conversion of a reverse rule: ``(y, pullback)`` becomes two compilable kernels.

A rule is written the ChainRules way::

    def rule(x):
        y = my_sum(x)
        m, n = x.shape
        def pullback(dy):
            return (np.full((m, n), dy),)
        return y, pullback

Numba cannot return a closure, so the rule is split at its nested function:

    def fwd(x):                      def bwd(_res, dy):
        y = my_sum(x)                    m, n = _res
        m, n = x.shape                   return (np.full((m, n), dy),)
        return y, (m, n)

The forward returns the rule's locals the pullback reads (its residuals); the pullback unpacks
them. Anything else in the rule's shape is a ``RuleError`` naming the rule, file and line.
"""

import ast
import copy

from ..errors import RuleError
from .frontend import Source


class Converted:
    def __init__(self, forward, pullback, captured, refs):
        self.forward = forward      # source of fwd_<name>(args) -> (y, residuals)
        self.pullback = pullback    # source of bwd_<name>(_res, dy) -> tangents
        self.captured = captured    # names handed from one to the other
        self.refs = refs            # free names of both -> their values


def convert(impl, name):
    src = Source(impl)
    node = src.node
    where = f"the rule {impl.__qualname__} ({src.file}:{src.firstline})"
    if not isinstance(node, ast.FunctionDef):
        raise RuleError(f"{where} must be a def returning (y, pullback)")
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    nested = [s for s in body if isinstance(s, ast.FunctionDef)]
    last = body[-1] if body else None
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Tuple)
            and len(last.value.elts) == 2):
        raise RuleError(f"{where} must end with `return y, pullback` (a pair), not "
                        f"{ast.unparse(last) if last is not None else 'nothing'}")
    pb_name = last.value.elts[1]
    if len(nested) != 1 or not isinstance(pb_name, ast.Name) or pb_name.id != nested[0].name:
        raise RuleError(f"{where}: its pullback must be a function defined inside the rule and "
                        f"returned as the second element, e.g.\n    def pullback(dy): ...\n"
                        f"    return y, pullback")
    pb = nested[0]
    if len(pb.args.args) != 1 or pb.args.vararg or pb.args.kwonlyargs or pb.args.kwarg:
        raise RuleError(f"{where}: its pullback {pb.name} must take one argument, the cotangent")
    dy = pb.args.args[0].arg
    params = [a.arg for a in node.args.args]
    rule_locals = set(params) | {n.id for s in body if s is not pb for n in ast.walk(s)
                                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    pb_stores = {n.id for n in ast.walk(pb) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    captured = sorted({n.id for n in ast.walk(pb) if isinstance(n, ast.Name)
                       and isinstance(n.ctx, ast.Load) and n.id in rule_locals
                       and n.id not in pb_stores and n.id != dy})
    res = ast.Tuple(elts=[ast.Name(id=c, ctx=ast.Load()) for c in captured], ctx=ast.Load())
    fwd_body = [copy.deepcopy(s) for s in body[:-1] if s is not pb]
    fwd_body.append(ast.Return(value=ast.Tuple(elts=[copy.deepcopy(last.value.elts[0]), res],
                                               ctx=ast.Load())))
    args = copy.deepcopy(node.args)
    for a in args.args:
        a.annotation = None
    fwd = _def(f"fwd_{name}", args, fwd_body)
    unpack = []
    if captured:
        unpack = [ast.Assign(targets=[ast.Tuple(elts=[ast.Name(id=c, ctx=ast.Store())
                                                      for c in captured], ctx=ast.Store())],
                             value=ast.Name(id="_res", ctx=ast.Load()))]
    bwd_args = ast.arguments(posonlyargs=[], args=[ast.arg(arg="_res"), ast.arg(arg=dy)],
                             kwonlyargs=[], kw_defaults=[], defaults=[])
    bwd = _def(f"bwd_{name}", bwd_args, unpack + copy.deepcopy(pb.body))
    module = ast.Module(body=[fwd, bwd], type_ignores=[])
    ast.fix_missing_locations(module)
    loaded = {n.id for n in ast.walk(module) if isinstance(n, ast.Name)}
    refs = {k: src.namespace[k] for k in loaded if k in src.namespace and k not in rule_locals}
    header = f"# forward and pullback of {where}, closure-converted\n"
    return Converted(header + ast.unparse(fwd) + "\n", ast.unparse(bwd) + "\n", captured, refs)


def _def(name, args, body):
    node = ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None)
    if "type_params" in ast.FunctionDef._fields:     # Python >= 3.12
        node.type_params = []
    return node
