"""Versions of rebound names: each top-level rebinding of a variable gets a name of its own
(``x = x.copy()`` -> ``x_2``), so that the analysis sees one value per name where it can."""

import dataclasses

from . import ir


def _version_rebindings(params, stmts, taken):
    """Give each top-level rebinding of a variable its own name (``x = x.copy()`` -> ``x_2``).

    Only variables bound exclusively by top-level assignments are versioned (straight-line code,
    so every read sees exactly one binding). Each array then has one binding, and scalars that
    are rebound need no saving in the reverse pass.
    """
    top, nested = {}, set()
    for s in stmts:
        if isinstance(s, ir.Assign):
            top[s.target] = top.get(s.target, 0) + 1
    for s in ir.walk(stmts):
        if isinstance(s, (ir.If, ir.For, ir.While)):
            for sub in ir.walk(s.body if not isinstance(s, ir.If) else s.body + s.orelse):
                if isinstance(sub, ir.Assign):
                    nested.add(sub.target)
            if isinstance(s, ir.While):
                nested.update(x.target for x in ir.walk(s.cond) if isinstance(x, ir.Assign))
            if isinstance(s, ir.For):
                nested.add(s.var)
    candidates = {v for v, n in top.items() if v not in nested and (n > 1 or v in params)}
    if not candidates:
        return stmts
    used = set(taken) | set(params)
    current, out = {}, []
    for s in stmts:
        s = _rename(s, current)
        if isinstance(s, ir.Assign) and s.target in candidates:
            if s.target in current or s.target in params:
                k = 2
                while f"{s.target}_{k}" in used:
                    k += 1
                new = f"{s.target}_{k}"
                used.add(new)
            else:
                new = s.target
            current[s.target] = new
            s = dataclasses.replace(s, target=new)
        out.append(s)
    return out


def _rename(s, names):
    """``s`` with the variables it reads renamed by ``names`` (targets unchanged)."""
    if not names:
        return s
    atom = lambda a: ir.Name(names[a.id]) if isinstance(a, ir.Name) and a.id in names else a  # noqa: E731
    if isinstance(s, ir.Assign):
        return dataclasses.replace(s, expr=_rename_expr(s.expr, atom))
    if isinstance(s, ir.Store):
        return dataclasses.replace(s, array=names.get(s.array, s.array),
                                   index=_rename_index(s.index, atom), value=atom(s.value))
    if isinstance(s, ir.If):
        return dataclasses.replace(s, test=atom(s.test),
                                   body=tuple(_rename(x, names) for x in s.body),
                                   orelse=tuple(_rename(x, names) for x in s.orelse))
    if isinstance(s, ir.For):
        return dataclasses.replace(s, start=atom(s.start), stop=atom(s.stop), step=atom(s.step),
                                   snapshots=None if s.snapshots is None else atom(s.snapshots),
                                   body=tuple(_rename(x, names) for x in s.body))
    if isinstance(s, ir.While):
        return dataclasses.replace(s, test=atom(s.test),
                                   cond=tuple(_rename(x, names) for x in s.cond),
                                   body=tuple(_rename(x, names) for x in s.body))
    if isinstance(s, ir.Return):
        return dataclasses.replace(s, value=atom(s.value))
    return s


def _rename_index(index, atom):
    return tuple(ir.Slice(*map(atom, i.parts())) if isinstance(i, ir.Slice) else atom(i)
                 for i in index)


def _rename_expr(e, atom):
    if isinstance(e, ir.Atom):
        return ir.Atom(atom(e.a))
    if isinstance(e, ir.BinOp):
        return dataclasses.replace(e, a=atom(e.a), b=atom(e.b))
    if isinstance(e, ir.UnaryOp):
        return dataclasses.replace(e, a=atom(e.a))
    if isinstance(e, ir.Call):
        return dataclasses.replace(e, args=tuple(map(atom, e.args)),
                                   kwargs=tuple((k, atom(v)) for k, v in e.kwargs))
    if isinstance(e, ir.MethodCall):
        return dataclasses.replace(e, obj=atom(e.obj), args=tuple(map(atom, e.args)))
    if isinstance(e, ir.Index):
        return dataclasses.replace(e, a=atom(e.a), index=_rename_index(e.index, atom))
    if isinstance(e, ir.Attr):
        return dataclasses.replace(e, a=atom(e.a))
    if isinstance(e, ir.MakeTuple):
        return ir.MakeTuple(tuple(map(atom, e.items)))
    return e
