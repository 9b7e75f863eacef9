"""What the analyses ask of the normalised IR: what an expression or statement reads, which
statements are inside loops, which array names are views of or aliases of others, which
variables are active, where an array name is rebound, and where a statement is in the user's
code.

Part of the AD analysis (``analysis.plan``); pure functions of the IR and its types.
"""

from numba import types as nbt

from ..errors import UnsupportedSyntaxError
from . import ir
from .kinds import _carries_no_tangent, differentiable, is_aggregate


def _target(s):
    if isinstance(s, ir.Assign):
        return s.target
    return None


def _in_loop(body, inside=False, out=None):
    """id() of every statement that some loop encloses."""
    out = set() if out is None else out
    for s in body:
        if inside:
            out.add(id(s))
        if isinstance(s, ir.If):
            _in_loop(s.body, inside, out)
            _in_loop(s.orelse, inside, out)
        elif isinstance(s, ir.For):
            _in_loop(s.body, True, out)
        elif isinstance(s, ir.While):
            _in_loop(s.cond, True, out)
            _in_loop(s.body, True, out)
    return out


def views(fn, types):
    """Array variables that share memory with another array: v -> the statement binding it.

    Slices (``x[a:b]``, ``x[:, j]``, ``x[i]`` of a matrix), ``x.T`` / ``x.transpose()`` and
    ``x.reshape(...)`` are views in NumPy and Numba; ``x.ravel()`` is one when Numba types x as
    C-contiguous (it copies otherwise, checked at compile time). A write through either array
    changes the other, so the view's adjoint is the same slice of its base's adjoint: every
    contribution, and every zeroing by a store's adjoint, reaches both.
    """
    out = {}
    for s in ir.walk(fn.body):
        if isinstance(s, ir.Assign) and isinstance(types.get(s.target), nbt.Array) \
                and view_base(s.expr, types) is not None:
            out[s.target] = s
    return out


def view_base(expr, types):
    """The array ``expr`` is a view of, or None."""
    base = expr.obj if isinstance(expr, ir.MethodCall) else getattr(expr, "a", None)
    if not (isinstance(base, ir.Name) and isinstance(types.get(base.id), nbt.Array)):
        return None
    if isinstance(expr, ir.Index) or isinstance(expr, ir.Attr) and expr.attr == "T":
        return base.id
    if isinstance(expr, ir.MethodCall) and (
            expr.name in ("reshape", "view") or expr.name == "transpose" and not expr.args
            or expr.name == "ravel" and types[base.id].layout == "C"):
        return base.id
    return None


def _alias_classes(stmts, types, view_of):
    """Array variables that share memory (``b = a``, views) share one alias class."""
    parent = {}

    def find(v):
        while parent.get(v, v) != v:
            v = parent[v]
        return v

    for s in stmts:
        if isinstance(s, ir.Assign) and isinstance(s.expr, ir.Atom) and isinstance(s.expr.a, ir.Name) \
                and isinstance(types.get(s.target), nbt.Array):
            parent[find(s.target)] = find(s.expr.a.id)
    for v, s in view_of.items():
        parent[find(v)] = find(view_base(s.expr, types))
    return {v: find(v) for v in parent}


def _reads(expr):
    """Variable names an expression reads."""
    return [a.id for a in expr.atoms() if isinstance(a, ir.Name)]


def _value_reads(expr):
    """Names whose *values* flow into the result (not indices, not shapes)."""
    if isinstance(expr, ir.Index):
        return [expr.a.id] if isinstance(expr.a, ir.Name) else []
    if isinstance(expr, ir.Attr):
        return [expr.a.id] if isinstance(expr.a, ir.Name) else []
    if isinstance(expr, ir.Call) and expr.func in (len,):
        return []
    if isinstance(expr, ir.Call) and getattr(expr.func, "__name__", "") in (
            "zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like") \
            and getattr(expr.func, "__module__", "") == "numpy":
        return []
    if isinstance(expr, ir.BinOp) and expr.op in ("<", "<=", ">", ">=", "==", "!=", "&", "|", "^"):
        return []
    return _reads(expr)


def _activity(fn, stmts, types, mask, alias):
    rep = lambda v: alias.get(v, v)   # noqa: E731
    varied = {rep(p) for p, m in zip(fn.params, mask) if m and differentiable(types.get(p))}
    changed = True
    while changed:
        changed = False
        for s in stmts:
            if isinstance(s, ir.Assign) and differentiable(types.get(s.target)):
                if rep(s.target) not in varied and any(rep(n) in varied for n in _value_reads(s.expr)):
                    varied.add(rep(s.target))
                    changed = True
            elif isinstance(s, ir.Store) and isinstance(s.value, ir.Name):
                if rep(s.value.id) in varied and rep(s.array) not in varied:
                    varied.add(rep(s.array))
                    changed = True
    useful = set()
    for s in stmts:
        if isinstance(s, ir.Return) and isinstance(s.value, ir.Name):
            useful.add(rep(s.value.id))
    changed = True
    while changed:
        changed = False
        for s in stmts:
            if isinstance(s, ir.Assign) and rep(s.target) in useful:
                for n in _value_reads(s.expr):
                    if rep(n) not in useful and not _carries_no_tangent(types.get(n)):
                        useful.add(rep(n))
                        changed = True
            elif isinstance(s, ir.Store) and rep(s.array) in useful and isinstance(s.value, ir.Name):
                if differentiable(types.get(s.value.id)) and rep(s.value.id) not in useful:
                    useful.add(rep(s.value.id))
                    changed = True
    for s in stmts:
        if isinstance(s, ir.Assign) and rep(s.target) in useful and not _carries_no_tangent(
                types.get(s.target)) and not differentiable(types.get(s.target)) \
                and any(rep(n) in varied for n in _value_reads(s.expr)):
            raise UnsupportedSyntaxError(
                f"a value of type {types.get(s.target)} that depends on a differentiated input\n"
                f'  File "{fn.file}", line {s.line}, in {fn.name}\n'
                f"Hint: numbarules differentiates floats and float arrays here; unpack tuples "
                f"into separate variables, or write a rule (nr.rrule) for this function.")
    names = set(types)
    return {v for v in names if rep(v) in varied and rep(v) in useful and differentiable(types.get(v))}


def part_of(expr, types):
    """The aggregate variable ``expr`` reads a part of or copies (``o.field``, ``t[0]``, ``o``),
    or None."""
    if isinstance(expr, ir.Attr) or isinstance(expr, ir.Index) and len(expr.index) == 1 \
            and isinstance(expr.index[0], ir.Const):
        base = expr.a
    elif isinstance(expr, ir.Atom):
        base = expr.a
    else:
        return None
    return base.id if isinstance(base, ir.Name) and is_aggregate(types.get(base.id)) else None


def _rebinds(fn, v, sites, in_loop):
    """Whether variable ``v`` is bound more than once, inside a loop, or (a parameter) at all."""
    ss = sites.get(v, [])
    return bool(v in fn.params and ss or len(ss) > 1 or any(id(s) in in_loop for s in ss))


def _one_part(ss, types):
    """Whether the assignments ``ss`` all read the same part of one aggregate (``o.w``): the
    same array every time, an alias of the aggregate's field."""
    return bool(ss) and all(isinstance(s, ir.Assign) and part_of(s.expr, types) is not None
                            and not isinstance(s.expr, ir.Atom) for s in ss) \
        and len({ir.expr_src(s.expr) for s in ss}) == 1


def rebinding_sites(fn, v, sites):
    """The assignments of array variable ``v`` after which the reverse pass must restore its
    previous binding: all of them but a first one at the top level (nothing is bound before it,
    and nothing before it reads ``v``)."""
    ss = [s for s in sites.get(v, ()) if isinstance(s, ir.Assign)]
    top = {id(x) for x in fn.body}
    if ss and id(ss[0]) in top and v not in fn.params:
        ss = ss[1:]
    return ss


def where(fn, line):
    """The traceback-style location of ``line`` with its source text."""
    k = line - fn.firstline
    text = fn.source_lines[k].strip() if 0 <= k < len(fn.source_lines) else ""
    return f'  File "{fn.file}", line {line}, in {fn.name}' + (f"\n    {text}" if text else "")


def branch_key(s, k):
    """The key of the statements the reverse of branch ``k`` (0: body, 1: orelse) of the If
    ``s`` recomputes, in Plan.recompute."""
    return ("if", id(s), k)


def stmt_reads(s):
    """Variable names a statement reads itself (not inside its nested blocks)."""
    if isinstance(s, ir.Assign):
        atoms = s.expr.atoms()
    elif isinstance(s, ir.Store):
        atoms = ir.index_atoms(s.index) + (s.value, ir.Name(s.array))
    elif isinstance(s, (ir.If, ir.While)):
        atoms = (s.test,)
    elif isinstance(s, ir.For):
        atoms = (s.start, s.stop, s.step)
    elif isinstance(s, ir.Return):
        atoms = (s.value,)
    else:
        atoms = ()
    return [a.id for a in atoms if isinstance(a, ir.Name)]
