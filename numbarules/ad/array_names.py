"""Array names as references: arrays rebound in loops or branches (``_rebound``), views taken
in loops (``_loop_views``) or taken again by the reverse pass (``_lazy_views``), and the array
constructs the engine refuses rather than differentiate wrongly (``_check_*``).

Part of the AD analysis (``analysis.plan``).
"""

from numba import types as nbt

from ..errors import UnsupportedSyntaxError
from . import ir
from .kinds import (holds_arrays, is_float, is_float_array, is_float_struct,
                    is_float_tuple)
from .dataflow import _one_part, part_of, _rebinds, stmt_reads, view_base, where


def _array_named(v):
    if v.startswith("_t") and v[2:].isdigit():
        return "the array an expression makes"
    return f"the array '{v}'"


def _rebound(fn, stmts, types, active, alias, view_of, loop_views, sites, in_loop):
    """Differentiated arrays bound more than once or inside a loop, and their alias classes:
    ``{name: (the other names of its class)}``.

    An array name is a reference. The forward saves the reference a rebinding drops (a list of
    arrays: no copy); the reverse pass takes it back after the binding's adjoint, and with it
    the adjoint *of that array*: the adjoint of another name of the class holding the very same
    array (``a is b``), else a fresh zero array (no name holds it any more, so nothing after
    this point added to its adjoint). So every name's adjoint is always the adjoint of the array
    the name holds, through swaps (``u, v = v, u``), aliases (``u = u_new``) and fresh arrays
    (``v = u.copy()``, ``u = u + k * lap``) alike. Refused in such a class: views (the view's
    adjoint is bound once, to one array's) and aggregates holding its arrays (likewise).
    """
    classes = {}
    for v in types:
        classes.setdefault(alias.get(v, v), []).append(v)
    out = {}
    for v in sorted(active):
        if not is_float_array(types.get(v)) or v in out or v in loop_views \
                or not _rebinds(fn, v, sites, in_loop) \
                or _one_part(sites.get(v, []), types) and v not in fn.params:
            continue
        # Views taken in loops are bound per iteration (_loop_views, _lazy_views): not members.
        members = sorted(m for m in classes.get(alias.get(v, v), [v]) if m not in loop_views)
        for m in members:
            view = view_of.get(m) or next((s for w, s in view_of.items() if w not in loop_views
                                           and view_base(s.expr, types) == m), None)
            if view is not None:
                raise UnsupportedSyntaxError(
                    f"a view (slice, .T or reshape) of "
                    f"{_array_named(view_base(view.expr, types) or v)}, which is rebound (in a "
                    f"loop, or more than once)\n{where(fn, view.line)}\n"
                    f"Hint: index its elements (x[i, j]) instead, or copy the slice "
                    f"(x[a:b].copy()).")
        for s in stmts:
            built = isinstance(s, ir.Assign) and (
                isinstance(s.expr, ir.MakeTuple) and any(
                    isinstance(a, ir.Name) and a.id in members for a in s.expr.items)
                or s.target in members and part_of(s.expr, types) is not None
                and not isinstance(s.expr, ir.Atom))
            # (a call's result can hold the array only if its type holds arrays: a pair of
            # floats from a forward rule of np.sum does not)
            if built or isinstance(s, ir.Assign) and isinstance(s.expr, ir.Call) \
                    and holds_arrays(types.get(s.target)) and any(
                        isinstance(a, ir.Name) and a.id in members for a in s.expr.args):
                raise UnsupportedSyntaxError(
                    f"a struct or tuple holding {_array_named(v)}, which is rebound (in a loop, "
                    f"or more than once)\n{where(fn, s.line)}\n"
                    f"Hint: pass the array itself, or bind it once outside loops and update "
                    f"its elements in place.")
        for m in members:
            out[m] = tuple(x for x in members if x != m)
    return out


def _check_aggregates(fn, stmts, types, active, sites, in_loop):
    for v in active:
        if not holds_arrays(types.get(v)):
            continue
        # An aggregate holding arrays shares them with its tangent: it is bound once, from a
        # part of another aggregate (any number of times: the same value), or at the top level.
        ss = sites.get(v, [])
        kind = "struct" if is_float_struct(types[v]) else "tuple"
        bad = (v in fn.params and ss) or len(ss) > 1 or any(
            id(s) in in_loop and part_of(s.expr, types) is None for s in ss)
        if bad:
            line = ss[-1].line if ss else fn.firstline
            raise UnsupportedSyntaxError(
                f"the {kind} '{v}' (holding differentiated arrays) is bound more than once or "
                f"built inside a loop\n{where(fn, line)}\n"
                f"Hint: build it once at the top level of the function, or read its fields "
                f"from the argument directly.")
    for s in stmts:
        if isinstance(s, ir.Assign) and s.target in active and isinstance(s.expr, ir.Index) \
                and is_float_tuple(types.get(s.expr.a.id) if isinstance(s.expr.a, ir.Name)
                                   else None) and not isinstance(s.expr.index[0], ir.Const) \
                and not is_float(types.get(s.target)):
            raise UnsupportedSyntaxError(
                f"indexing a tuple of arrays or structs with a run-time index\n"
                f"{where(fn, s.line)}\n"
                f"Hint: index it with a constant, or pass a NumPy array.")


def _check_arrays(fn, active, types, sites, in_loop, loop_views, rebound):
    for v in active:
        if not is_float_array(types.get(v)):
            continue
        ss = sites.get(v, [])
        if _one_part(ss, types):
            continue      # one field of one aggregate: the same array every time, an alias
        if v in loop_views and len(ss) == 1:
            continue      # a view bound afresh in each reverse iteration of its loop
        if v in rebound:
            continue      # references saved and restored with their adjoints (_rebound)
        if _rebinds(fn, v, sites, in_loop):
            line = ss[-1].line if ss else fn.firstline
            temporary = v.startswith("_t") and v[2:].isdigit() and len(ss) == 1
            what = ("a whole-array expression (an array temporary) evaluated inside a loop"
                    if temporary else f"the array variable '{v}' bound more than once or "
                                      f"inside a loop (a swap `a, b = b, a` included)")
            raise UnsupportedSyntaxError(
                f"{what}\n{where(fn, line)}\n"
                f"Hint: bind each differentiated array to its own name once, outside loops, "
                f"and update its elements in place (x[i] = ...).")


def _loop_views(fn, types, active, view_of, recompute):
    """Views taken inside a loop whose adjoint can be bound afresh at the start of each of that
    loop's reverse iterations: v -> the id of the innermost loop holding the view.

    The same view of the base's adjoint is taken then (``d_r = d_M[t]`` for ``r = M[t]``), so
    its index must have the value it had in that iteration: the loop's variable, a constant, a
    value the loop does not change, or one the reverse pass recomputes at the start of each
    iteration. The view itself is recomputed there too (the loop never rebinds its base).
    """
    out = {}
    for loop in ir.walk(fn.body):
        if not isinstance(loop, (ir.For, ir.While)):
            continue
        body = loop.body + (loop.cond if isinstance(loop, ir.While) else ())
        inner = set()         # statements of nested loops: their views belong to those loops
        for lp in ir.walk(body):
            if isinstance(lp, (ir.For, ir.While)):
                inner |= {id(x) for x in ir.walk(lp.body + (
                    lp.cond if isinstance(lp, ir.While) else ()))}
        assigned = {x.target for x in ir.walk(body) if isinstance(x, ir.Assign)}
        assigned |= {x.var for x in ir.walk(body) if isinstance(x, ir.For)}
        again = {x.target for x in recompute.get(loop.id, ())}
        for x in ir.walk(body):
            if id(x) in inner or not isinstance(x, ir.Assign) or x.target not in view_of:
                continue
            e = x.expr
            if isinstance(e, ir.MethodCall) and e.name != "transpose":
                continue
            base = view_base(e, types)
            atoms = ir.index_atoms(e.index) if isinstance(e, ir.Index) else ()
            if base in assigned or not all(
                    isinstance(a, ir.Const) or a.id == getattr(loop, "var", None)
                    or a.id not in assigned or a.id in again for a in atoms):
                continue
            out[x.target] = loop.id
    return out


def _lazy_views(fn, types, view_of, sites, in_loop, loop_views):
    """Views of an array that is rebound (``lap = u[2:] - u[:-2]`` in a time loop that ends
    with ``u = u_new``; ``u[::-1].copy()`` in a branch), and views taken in a loop or branch that
    _loop_views does not bind (``x[a:b]`` with bounds the loop computes, a reshape in a
    branch): v -> id() of the last statement of the
    view's block that uses it, before whose reverse the view and its adjoint are taken again
    (``_t5 = u[2:]; _d5 = d_u[2:]``).

    There the base holds the array it held when the view was taken, and its adjoint is that
    array's (analysis._rebound), provided that the view is used only in its own block after it,
    and neither the base nor the view's indices are assigned between the view and its last use
    (the reverse pass restores what it reads, so they have their values from then).
    """
    readers = {}
    for x in ir.walk(fn.body):
        for n in stmt_reads(x):
            readers.setdefault(n, set()).add(id(x))
    # A use of a view of w is a use of w: taking that view again in the reverse pass reads w's
    # adjoint (w3 = w1[::2] used after w1's own last use; seed 20261511 #355: d_w1 undefined).
    children = {}
    for v, st in view_of.items():
        children.setdefault(view_base(st.expr, types), set()).add(v)

    def uses(w, seen):
        out = set(readers.get(w, ()))
        for v in children.get(w, ()):
            if v not in seen:
                seen.add(v)
                out |= uses(v, seen)
        return out

    readers = {w: uses(w, {w}) for w in set(readers) | set(children)}
    out = {}
    for body in ir.blocks(fn.body):
        inside = [{id(y) for y in ir.walk([st])} for st in body]
        for k, x in enumerate(body):
            if not isinstance(x, ir.Assign) or x.target not in view_of \
                    or x.target in loop_views or len(sites.get(x.target, ())) != 1:
                continue
            w, base = x.target, view_base(x.expr, types)
            if body is fn.body and not _rebinds(fn, base, sites, in_loop):
                continue      # bound once when the pullback starts (adjoint_header)
            used = [j for j in range(k + 1, len(body)) if readers.get(w, set()) & inside[j]]
            if not used:
                continue
            m = used[-1]
            span = set().union(*inside[k + 1:m + 1])
            atoms = {a.id for a in x.expr.atoms() if isinstance(a, ir.Name)}
            # (the last use itself may rebind the base: u = u[::-1].copy(); codegen.block_rev)
            last = body[m]
            rebinds_at_last = isinstance(last, ir.Assign) and last.target == base
            if readers.get(w, set()) <= span and not any(
                    isinstance(y, ir.Assign) and y.target in atoms | {w}
                    and not (y is last and rebinds_at_last)
                    for y in ir.walk(body[k + 1:m + 1])):
                out[w] = id(body[m])
    return out


def _check_views(fn, stmts, types, active, alias, view_of, in_loop, loop_views):
    """A differentiated view's adjoint is bound once, when the pullback starts, to the same view
    of its base's adjoint: the view is taken once, outside loops. In a branch, a slice or a
    transpose is fine (its bounds are pinned temporaries, zero where the branch did not run and
    nothing flows through the view); a reshape is bound to the view's own shape, which a branch
    that did not run never set."""
    top = {id(s) for s in fn.body}
    for v, s in view_of.items():
        if v not in active or id(s) in top or v in loop_views:
            continue
        if id(s) in in_loop or isinstance(s.expr, ir.MethodCall) and s.expr.name != "transpose":
            raise UnsupportedSyntaxError(
                f"a view ({'reshape or ravel' if id(s) not in in_loop else 'slice, .T or reshape'})"
                f" of a differentiated array taken inside a {'loop' if id(s) in in_loop else 'branch'}"
                f"\n{where(fn, s.line)}\n"
                f"Hint: take the view once before the {'loop' if id(s) in in_loop else 'branch'}, "
                f"or index elements (x[i, j]) inside it.")


#: Array methods and attributes whose adjoint the engine knows (the others would silently get none).
_ARRAY_METHODS = {"copy", "reshape", "ravel", "flatten", "transpose"}


def _check_array_methods(fn, stmts, types, active):
    for s in stmts:
        if not (isinstance(s, ir.Assign) and s.target in active):
            continue
        e = s.expr
        if isinstance(e, ir.MethodCall) and e.name not in _ARRAY_METHODS \
                or isinstance(e, ir.MethodCall) and e.name == "transpose" and e.args:
            what = f"the array method .{e.name}({'...' if e.args else ''})"
        elif isinstance(e, ir.Attr) and isinstance(types.get(e.a.id), nbt.Array) and e.attr != "T":
            what = f"the array attribute .{e.attr}"
        else:
            continue
        hint = (f"Hint: call the NumPy function (np.{getattr(e, 'name', getattr(e, 'attr', ''))}"
                f"(x, ...)) if numbarules has a rule for it, or write one with nr.rrule.")
        if isinstance(e, ir.MethodCall) and e.name == "view":
            hint = ("Hint: reinterpreting an array's memory has no derivative; for a view of the "
                    "whole array write x[:], for a copy of another dtype x.astype(...).")
        raise UnsupportedSyntaxError(f"{what} on a differentiated array\n{where(fn, s.line)}\n{hint}")


def _check_fancy_indexing(fn, stmts, types, active, alias):
    """Indexing a differentiated array with an array of indices or a mask (``x[idx]``,
    ``x[x > 0]``) makes a copy, not a view, and its adjoint needs a scatter-add that sums
    repeated indices: refused (the view rule gave a zero gradient, silently)."""
    hot = {alias.get(n, n) for n in active}
    for s in stmts:
        if isinstance(s, ir.Assign) and isinstance(s.expr, ir.Index):
            base, index = s.expr.a, s.expr.index
        elif isinstance(s, ir.Store):
            base, index = ir.Name(s.array), s.index
        else:
            continue
        if not (isinstance(base, ir.Name) and alias.get(base.id, base.id) in hot):
            continue
        if any(isinstance(a, ir.Name) and isinstance(types.get(a.id), nbt.Array)
               for a in ir.index_atoms(index)):
            raise UnsupportedSyntaxError(
                f"indexing the differentiated array '{base.id}' with an array of indices or a "
                f"mask ({base.id}[idx], {base.id}[{base.id} > 0])\n{where(fn, s.line)}\n"
                f"Hint: loop over the indices (for k in range(idx.shape[0]): ... "
                f"{base.id}[idx[k]] ...), or use np.where(mask, {base.id}, 0.0) for a mask.")
