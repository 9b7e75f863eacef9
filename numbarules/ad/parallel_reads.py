"""What a ``prange`` loop's text reads, binds and writes: the questions ``parallel.rewrite`` asks
of a loop's emitted body (parsed with ``ast``) before it splits the loop into chunks. Which names
an iteration reads before it binds them (what one iteration hands the next), which adjoint
arrays it writes and at which offsets from the loop variable (a stencil's span), and whether
an array is only added into (each chunk may then add into a copy of its own).
"""

import ast

from . import ir


def stencil_offsets(gen, loop, stmts, arrays):
    """``(a, b)`` when every write into the shared adjoint ``arrays`` in the loop's text is at a
    first index ``i + o`` with ``a <= o <= b`` (``i`` the loop variable, step 1), else None."""
    if not arrays or loop.step != ir.Const(1):
        return None if arrays else (0, 0)
    offsets = {loop.var: 0}
    # (also in nested loops and branches: ``_t10 = i - 1`` in a loop along the row; one site,
    # so wherever an iteration reads it, it holds i - 1)
    for x in ir.walk(loop.body):
        if isinstance(x, ir.Assign) and len(gen.sites.get(x.target, ())) == 1 \
                and isinstance(x.expr, ir.BinOp) and x.expr.op in ("+", "-"):
            a, b = x.expr.a, x.expr.b
            if isinstance(a, ir.Name) and a.id == loop.var and isinstance(b, ir.Const) \
                    and type(b.value) is int:
                offsets[x.target] = b.value if x.expr.op == "+" else -b.value
            elif x.expr.op == "+" and isinstance(b, ir.Name) and b.id == loop.var \
                    and isinstance(a, ir.Const) and type(a.value) is int:
                offsets[x.target] = a.value
    if loop.var in {x.target for x in ir.walk(loop.body) if isinstance(x, ir.Assign)}:
        return None
    found = []
    for node in ast.walk(ast.Module(body=list(stmts), type_ignores=[])):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        for t in targets:
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) \
                    and t.value.id in arrays:
                first = t.slice.elts[0] if isinstance(t.slice, ast.Tuple) else t.slice
                if not (isinstance(first, ast.Name) and first.id in offsets):
                    return None
                found.append(offsets[first.id])
    return (min(found), max(found)) if found else (0, 0)


def only_added_into(stmts, arrays):
    """Whether the statements use each of ``arrays`` only to add into its elements:
    ``d[idx] = d[idx] + e`` or ``d[idx] += e``, with ``e`` not reading it."""
    module = ast.Module(body=list(stmts), type_ignores=[])

    def reads(e):
        return any(isinstance(n, ast.Name) and n.id in arrays for n in ast.walk(e))

    def element(t):
        return isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) \
            and t.value.id in arrays

    allowed = set()
    for node in ast.walk(module):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) \
                and element(node.target) and not reads(node.value) \
                and not reads(node.target.slice):
            allowed.add(id(node.target.value))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and element(node.targets[0]) and isinstance(node.value, ast.BinOp) \
                and isinstance(node.value.op, ast.Add) and element(node.value.left):
            t, left = node.targets[0], node.value.left
            if t.value.id == left.value.id and ast.dump(t.slice) == ast.dump(left.slice) \
                    and not reads(node.value.right) and not reads(t.slice):
                allowed.update((id(t.value), id(left.value)))
    return all(id(n) in allowed for n in ast.walk(module)
               if isinstance(n, ast.Name) and n.id in arrays)


def read_arrays(stmts):
    """The names the statements read other than as the array of a subscript they assign."""
    targets = set()
    for node in ast.walk(ast.Module(body=list(stmts), type_ignores=[])):
        for t in (node.targets if isinstance(node, ast.Assign) else
                  [node.target] if isinstance(node, ast.AugAssign) else []):
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                targets.add(id(t.value))
            if isinstance(node, ast.AugAssign) and isinstance(t, ast.Subscript):
                targets.discard(id(t.value))         # a[i] += v reads a[i]
    return {n.id for n in ast.walk(ast.Module(body=list(stmts), type_ignores=[]))
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in targets}


def exposed_names(stmts):
    """(names the statements read before they surely bind them, names they bind, names they
    write into by subscript ``a[i] = ...`` / ``a[i] += ...``), over the loop body's text. Reads
    inside a nested loop or a branch count at once; binds there do not count as sure."""
    exposed, stored, subscripted = set(), set(), set()

    def reads(node, bound):
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in bound:
                exposed.add(sub.id)

    def block(body, bound):
        for s in body:
            if isinstance(s, ast.Assign):
                reads(s.value, bound)
                for t in s.targets:
                    _target(t, bound, reads)
            elif isinstance(s, ast.AugAssign):
                reads(s.value, bound)
                if isinstance(s.target, ast.Name):
                    if s.target.id not in bound:
                        exposed.add(s.target.id)
                    stored.add(s.target.id)
                else:
                    _target(s.target, bound, reads)
            elif isinstance(s, (ast.For, ast.While, ast.If)):
                reads(s.iter if isinstance(s, ast.For) else s.test, bound)
                inner = set(bound)
                if isinstance(s, ast.For):
                    _target(s.target, inner, reads)
                block(s.body, inner)
                block(s.orelse, set(bound))
            elif isinstance(s, ast.Expr):
                reads(s.value, bound)
            elif isinstance(s, ast.Pass):
                pass
            else:
                # anything else (a return, a raise): read everything, bind nothing
                reads(s, bound)

    def _target(t, bound, reads_of):
        if isinstance(t, ast.Name):
            stored.add(t.id)
            bound.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                _target(e, bound, reads_of)
        elif isinstance(t, ast.Subscript):
            reads_of(t.slice, bound)
            if isinstance(t.value, ast.Name):
                subscripted.add(t.value.id)
                if t.value.id not in bound:
                    exposed.add(t.value.id)
            else:
                reads_of(t.value, bound)
        else:
            reads_of(t, bound)

    block(stmts, set())
    return exposed, stored, subscripted
