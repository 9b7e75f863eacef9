"""What a callee does to its arguments, found from its own source: the argument arrays it writes
into and the views of its arguments it returns. A differentiated function must not write into
its arguments, and its analysis must see every write into an array it follows; writes it cannot
follow (through a helper, a part of a tuple or struct, a view a callee returned) are refused by
name here. The answers are memoized per (callee, argument types) with the dispatch decisions
they rest on, which every specialization built from them records (kernels._build)."""

import contextlib
import threading
import weakref

import numpy as np

from . import cache, function_values, numba_glue, rules
from .ad import dataflow, frontend, ir, kinds
from .primitives import arrays
from .dispatch import Method
from .errors import UnsupportedSyntaxError
from .targets import exec_source, namespace, target_for


def refuse_argument_writes(fn, types):
    """A function that writes into an argument array cannot be replayed (checkpointing runs a
    callee's forward again) nor have its input restored for the caller: refuse it. Writes
    through a call count (a helper that fills its argument), and writes into an array taken
    out of a local tuple or struct (it is the array the aggregate was built from)."""
    for kind, name, line, via in _array_writes(fn, types):
        if kind == "argument":
            through = f" (through the call of {via}, which writes into its argument)" if via else ""
            raise UnsupportedSyntaxError(
                f"writing into the argument array '{name}'{through}\n"
                f'  File "{fn.file}", line {line}, in {fn.name}\n'
                f"Hint: differentiated functions leave their arguments unchanged; work on a "
                f"copy ({name} = {name}.copy()).")
        if kind == "attribute":
            raise UnsupportedSyntaxError(
                f"writing through '{name}'\n"
                f'  File "{fn.file}", line {line}, in {fn.name}\n'
                f"Hint: index the array itself ({name.split('.')[0]}[i] = ...).")
        if kind == "part":
            # the tuple or struct shares the array with the names it was built from: the
            # write would change them behind the analysis (a silently wrong gradient)
            what = f"the tuple or struct '{name}'"
            made = next((x for x in ir.walk(fn.body) if isinstance(x, ir.Assign)
                         and x.target == name), None)
            if name.startswith("_") and made is not None and isinstance(made.expr, ir.Call):
                what = f"the tuple or struct {made.expr.fname}(...) returned"   # a, b = f(u)
            raise UnsupportedSyntaxError(
                f"writing into an array taken out of {what} (bound on "
                f"line {_bound_line(fn, name)})\n"
                f'  File "{fn.file}", line {line}, in {fn.name}\n'
                f"Hint: write into the array before building the tuple or struct, or into a "
                f"copy of the part (a = {name}[0].copy(), a = {name}.field.copy()).")
        # a helper writing into a local array: whether or not its result is differentiated,
        # the write changes an array the analysis follows (a silently wrong gradient)
        held = "" if kinds.is_array(types.get(name)) else " (an array it holds)"
        raise UnsupportedSyntaxError(
            f"the call of {via} writes into its array argument {_user_expr(fn, name)}{held}\n"
            f'  File "{fn.file}", line {line}, in {fn.name}\n'
            f"Hint: have {via} return a new array (r = {via}(...)) instead of filling one, or "
            f"write the elements in this function.")


def _array_writes(fn, types):
    """Writes into arrays the analysis of ``fn`` alone cannot follow: (kind, name, line, via)
    with kind "argument" (an argument array, ``via`` the helper that writes it or None),
    "part" (an array taken out of the local tuple or struct ``name``) or "call" (the local
    array ``name`` that the helper ``via`` writes into)."""
    params = set(fn.params)
    # Every array a name may be bound to (a name may be bound several times: `a, b = b, a`).
    bound = {}
    parts = {}            # name bound to an array taken out of a tuple or struct -> that one
    attrs = {}            # name bound to u.flat, u.real, u.imag -> that expression
    writes = []           # (array name, line, the helper writing it or None)
    for s in ir.walk(fn.body):
        if isinstance(s, ir.Store):
            writes.append((s.array, s.line, None))
        if not isinstance(s, ir.Assign):
            continue
        if isinstance(s.expr, ir.Atom) and isinstance(s.expr.a, ir.Name):
            bound.setdefault(s.target, set()).add(s.expr.a.id)
        elif dataflow.view_base(s.expr, types) is not None:
            # a slice writes its base
            bound.setdefault(s.target, set()).add(dataflow.view_base(s.expr, types))
        elif kinds.is_array(types.get(s.target)) and dataflow.part_of(s.expr, types):
            # `a = t[0]`, `a = p.w`: the array that went into the aggregate (an argument's
            # own, or one a local tuple or struct was built from)
            bound.setdefault(s.target, set()).add(dataflow.part_of(s.expr, types))
            parts[s.target] = dataflow.part_of(s.expr, types)
        elif isinstance(s.expr, ir.Attr) and s.expr.attr in ("flat", "real", "imag") \
                and isinstance(s.expr.a, ir.Name) and kinds.is_array(types.get(s.expr.a.id)):
            # u.flat[i] = v, r = u.real; r[i] = v: writes into u through objects the analysis
            # does not follow as views
            bound.setdefault(s.target, set()).add(s.expr.a.id)
            attrs[s.target] = f"{s.expr.a.id}.{s.expr.attr}"
        elif isinstance(s.expr, ir.Call):
            for k in _written_positions(s.expr, types):
                a = s.expr.args[k]
                if isinstance(a, ir.Name):
                    writes.append((a.id, s.line, getattr(s.expr.func, "__name__", s.expr.fname)))
            if kinds.is_array(types.get(s.target)):
                # r = pick(v) with pick returning a view of v: a write through r writes v
                for k in _returned_views(s.expr, types):
                    a = s.expr.args[k]
                    if isinstance(a, ir.Name):
                        bound.setdefault(s.target, set()).add(a.id)

    def behind(name, stop):
        seen, stack = set(), [name]
        while stack:                 # a graph walk: bindings may form cycles (swaps)
            v = stack.pop()
            if v in stop:
                return v
            if v not in seen:
                seen.add(v)
                stack.extend(bound.get(v, ()))
        return None

    out = []
    for name, line, via in writes:
        root = behind(name, params)
        if root is not None:
            out.append(("argument", root, line, via))
        elif behind(name, attrs) is not None:
            out.append(("attribute", attrs[behind(name, attrs)], line, via))
        elif behind(name, parts) is not None:
            out.append(("part", parts[behind(name, parts)], line, via))
        elif via is not None:
            out.append(("call", name, line, via))
    return out


def _written_positions(call, types):
    """Positions of the array arguments ``call`` may write into, found from the callee's own
    source (a plain helper, an njit function, a method); () for rules and library functions
    (the writes of those, a ufunc's output argument, the frontend refuses)."""
    return _probe_callee(call, types, _WRITTEN, _arguments_written_by)


def _probe_callee(call, types, table, probe):
    """``probe(func, argtypes)`` of the function ``call`` dispatches to, memoized in ``table``;
    () for calls without array arguments, rules and calls that do not dispatch."""
    argtypes = tuple(types.get(a.id) if isinstance(a, ir.Name) else numba_glue.typeof_value(a.value)
                     for a in call.args)
    # an array inside a tuple or struct argument is written as well as one passed alone
    if not any(_holds_any_array(t) for t in argtypes) or None in argtypes:
        return ()
    try:
        target, made = target_for(call.func, argtypes)
    except Exception:       # noqa: BLE001 - dispatch errors are reported where the call is made
        return ()
    _note_probe_decisions(made)
    if isinstance(target, rules.Rule):
        return ()
    func = target.func if isinstance(target, Method) else target
    known = table.setdefault(func, {})
    stack = _PROBES.__dict__.setdefault("running", [])
    key = (id(table), func, argtypes)
    for k, entry in enumerate(stack):
        if entry["key"] == key:
            # A recursive call while this one is worked out: answer with what is known so far,
            # and mark the probes in between as depending on that partial answer.
            entry["cyclic"] = True
            for later in stack[k + 1:]:
                later["partial_input"] = True
            return entry["answer"]
    found = known.get(argtypes)
    if found is not None and cache.decisions_hold(found[1]):
        _note_probe_decisions(found[1])
        return found[0]
    entry = {"key": key, "answer": (), "cyclic": False, "partial_input": False}
    stack.append(entry)
    try:
        while True:
            # In a cycle of calls, iterate until the answer no longer grows (a fixpoint: the
            # answers only grow, and are subsets of the argument positions).
            entry["cyclic"] = False
            with probe_decisions() as inner:
                positions = probe(func, argtypes)
            if not entry["cyclic"] or positions == entry["answer"]:
                break
            entry["answer"] = positions
    finally:
        stack.pop()
    if entry["partial_input"]:
        # worked out from the partial answer of a probe further out: not stored, asked again
        # once that one is known
        known.pop(argtypes, None)
    else:
        known[argtypes] = (positions, tuple(inner))
    _note_probe_decisions(inner)
    return positions


def _holds_any_array(t):
    return kinds.is_array(t) or kinds.is_aggregate(t) and any(_holds_any_array(e) for e in t)


# What a probe found depends on the methods and rules its callee's calls dispatched to: a method
# added later (one that writes into its argument) changes the answer. The dispatch decisions a
# probe made, its nested probes' included, are kept with its memo entry (checked on each use)
# and handed to every specialization being built (its node's backedges: kernels._build).
_PROBES = threading.local()    # .stack: lists collecting probe decisions, innermost last


@contextlib.contextmanager
def probe_decisions():
    stack = _PROBES.__dict__.setdefault("stack", [])
    found = []
    stack.append(found)
    try:
        yield found
    finally:
        stack.pop()


def _note_probe_decisions(decisions):
    for found in getattr(_PROBES, "stack", ()):
        found.extend(decisions)


def _callee_types(func, argtypes):
    """``(fn, types)``: the normalised IR of a callee and Numba's types of its variables, or
    None for a callee that cannot be read (it is refused when differentiated)."""
    try:
        fn, refs = frontend.normalize(func, function_values.known(func, argtypes))
        primal = exec_source(ir.function_source(fn, "callee_probe"), namespace(refs),
                       "callee-probe")["callee_probe"]
        types, _ = numba_glue.infer_types(primal, argtypes)
    except Exception:       # noqa: BLE001
        return None
    types.update(dict(zip(fn.params, argtypes)))
    return fn, types


_WRITTEN = weakref.WeakKeyDictionary()  # function -> {argument types: (positions, decisions)}


def _arguments_written_by(func, argtypes):
    found = _callee_types(func, argtypes)
    if found is None:
        return ()
    fn, types = found
    written = {name for kind, name, _, _ in _array_writes(fn, types) if kind == "argument"}
    return tuple(k for k, p in enumerate(fn.params) if p in written)


def _user_expr(fn, name):
    """``name`` quoted as the user wrote it: a temporary the normalisation made for an argument
    (``h((a, 0.5))`` binds ``_t2 = (a, 0.5)``) is shown as its expression."""
    if name.startswith("_"):
        made = next((x for x in ir.walk(fn.body) if isinstance(x, ir.Assign)
                     and x.target == name), None)
        if made is not None:
            return f"'{ir.expr_src(made.expr)}'"
    return f"'{name}'"


def _bound_line(fn, name):
    return next((s.line for s in ir.walk(fn.body) if isinstance(s, ir.Assign)
                 and s.target == name), fn.firstline)


def refuse_writes_through_returned_views(spec, fn, types):
    """A callee may return a view of an argument array (``def first_row(B): return B[0]``). A
    derived call's adjoint is exact for reading it; a later write through the view (or into the
    array it views) changes the other behind the analysis' back, so it is refused."""
    order = {id(s): k for k, s in enumerate(ir.walk(fn.body))}
    loops = [s for s in ir.walk(fn.body) if isinstance(s, (ir.For, ir.While))]
    in_loop = {id(x): {id(lp) for lp in loops if any(x is y for y in ir.walk(
        lp.body + (lp.cond if isinstance(lp, ir.While) else ())))} for x in ir.walk(fn.body)}
    stores = [s for s in ir.walk(fn.body) if isinstance(s, ir.Store)]
    for s in ir.walk(fn.body):
        if not (isinstance(s, ir.Assign) and isinstance(s.expr, ir.Call) and stores
                and kinds.is_array(types.get(s.target))):
            continue
        positions = _returned_views(s.expr, types)
        if not positions:
            continue
        names = {s.target} | {s.expr.args[k].id for k in positions}
        edges = _alias_edges(fn, types)
        group = _alias_closure(fn, types, names, edges)
        view = _derived_from(edges, s.target)           # the returned view and views of it
        for w in stores:
            if w.array not in group or not (order[id(w)] > order[id(s)]
                                            or in_loop[id(w)] & in_loop[id(s)]):
                continue
            # Writing into the argument is harmless when the view is never read again (a
            # temporary consumed before the write: np.stack's new axes); a write through the
            # view itself changes the argument behind the analysis' back.
            later = [r for r in ir.walk(fn.body)
                     if order[id(r)] > order[id(w)] or in_loop[id(r)] & in_loop[id(w)]]
            if w.array in view or any(set(dataflow.stmt_reads(r)) & view for r in later):
                raise UnsupportedSyntaxError(
                    f"writing into '{w.array}', which shares memory with the array "
                    f"{getattr(s.expr.func, '__name__', s.expr.fname)} returned on line {s.line} "
                    f"(a view of its argument)\n{dataflow.where(fn, w.line)}\n"
                    f"Hint: copy the returned view (r = f(x).copy()) before writing into it, "
                    f"or write through the original array before the call.")


def _returned_views(call, types):
    """Positions of the array arguments whose memory ``call`` may return (a view or the array
    itself), found from the callee's own source; () for rules and library functions."""
    if call.func in _VIEW_RESULTS or call.func is np.diag and getattr(
            types.get(getattr(call.args[0], "id", None)) if call.args else None, "ndim", 0) == 2:
        # before dispatch: np.asarray has no rule, and on a value that is not differentiated
        # needs none, yet writing into its result writes into the argument. (np.diag of a
        # matrix is a view in NumPy and a copy in Numba: refusing the write keeps the two equal.)
        if any(kinds.is_array(types.get(getattr(a, "id", None))) for a in call.args):
            return (0,)
        return ()
    return _probe_callee(call, types, _VIEW_RETURNS, _views_returned_by)


_VIEW_RETURNS = weakref.WeakKeyDictionary()  # function -> {argtypes: (positions, decisions)}

#: Library functions whose result may share memory with their first argument (in Numba as in
#: NumPy): a write into it changes the argument too.
_VIEW_RESULTS = {np.expand_dims, np.atleast_1d, np.atleast_2d, np.atleast_3d, np.flipud,
                 np.fliplr, np.asarray, np.ascontiguousarray, np.asfortranarray, np.squeeze,
                 np.swapaxes, np.moveaxis, np.broadcast_to, np.diagonal, np.flip, np.rot90,
                 arrays.new_axis}


def _views_returned_by(func, argtypes):
    found = _callee_types(func, argtypes)
    if found is None:
        return ()
    fn, types = found
    ret = [s.value for s in ir.walk(fn.body) if isinstance(s, ir.Return)]
    if not ret or not isinstance(ret[0], ir.Name):
        return ()
    group = _alias_closure(fn, types, {ret[0].id})
    return tuple(k for k, p in enumerate(fn.params) if p in group)


def _derived_from(edges, name):
    """``name`` and every array variable bound to it or to a view of it, transitively
    (``edges`` from ``_alias_edges``)."""
    found, grown = {name}, True
    while grown:
        grown = False
        for a, b in edges:
            if b in found and a not in found:
                found.add(a)
                grown = True
    return found


def _alias_closure(fn, types, names, edges=None):
    """``names`` and every array variable sharing memory with one of them: copies (``b = a``),
    views, and arrays returned by calls that return a view of an argument."""
    edges = _alias_edges(fn, types) if edges is None else edges
    group, grown = set(names), True
    while grown:
        grown = False
        for a, b in edges:
            if (a in group) != (b in group):
                group |= {a, b}
                grown = True
    return group


def _alias_edges(fn, types):
    """(a, b) for each array variable ``a`` bound to ``b`` or to memory of ``b``."""
    edges = []
    for s in ir.walk(fn.body):
        if not isinstance(s, ir.Assign) or not kinds.is_array(types.get(s.target)):
            continue
        if isinstance(s.expr, ir.Atom) and isinstance(s.expr.a, ir.Name):
            edges.append((s.target, s.expr.a.id))
        elif dataflow.view_base(s.expr, types) is not None:
            edges.append((s.target, dataflow.view_base(s.expr, types)))
        elif isinstance(s.expr, ir.Call):
            edges += [(s.target, s.expr.args[k].id) for k in _returned_views(s.expr, types)]
    return edges

