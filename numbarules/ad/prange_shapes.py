"""Which prange loops' gradients may run in chunks: the shapes, read from the engine's IR.

``two_pass_shape``: the loops whose two-pass forward and reverse run in chunks with saves in
slots of each iteration's own (ad/parallel.py); ``row_loops``: the loops whose chunks keep tapes
of their own instead (ad/chunk_tapes.py), known to the analysis (``Plan.rows``). Both need the
iterations to hand each other nothing but accumulators (``_only_sums_leave``), what may run
after the loop read from ``ir.statements_after``.
"""

from numba.core import types as nbt

from . import fusion, ir


def two_pass_shape(body, loop):
    """Whether the prange ``loop`` has the shape whose two-pass forward and reverse may run in
    chunks: a loop of assignments and stores in the function ``body`` (at its top level or
    nested in other loops: a time loop around a prange) whose values nothing after it reads
    before assigning them again, but its accumulators (the chunks leave no last iteration's
    values behind). After it: the rest of its block, then each enclosing loop again (its next
    steps, which may not run) and the rest of the block around that, out to the function's
    end."""
    if not (isinstance(loop, ir.For) and loop.parallel) \
            or not all(isinstance(x, (ir.Assign, ir.Store)) for x in loop.body):
        return False
    return _only_sums_leave(body, loop, {x.target for x in loop.body if isinstance(x, ir.Assign)})


def _only_sums_leave(body, loop, assigned):
    """Whether of the names the prange ``loop`` assigns (``assigned``, its variable besides) the
    only ones an iteration hands the next or the code after the loop (``ir.statements_after``) reads are its
    accumulators. A value an iteration hands the next (read before it is assigned) must be an
    accumulator (s += u), read nowhere else in the loop: each chunk sums its own, added after
    the loop, where it may be read. Anything else (s = 0.5 * s + u; out[i] = s after s += u)
    is a recurrence the chunks would cut: serial (Numba refuses such a prange in the primal)."""
    after = ir.statements_after(body, loop)
    if after is None:
        return False                 # not a loop of this function
    carried = {v for v in assigned - {loop.var} if fusion.exposed(loop.body, v)[0]}
    if not carried <= fusion.accumulators(loop):
        return False
    return all(v in carried for v in assigned | {loop.var} if fusion.exposed(after, v)[0])


def row_loops(fn, types, alias, distinct):
    """{id() of a prange loop whose shape the schedule of chunk tapes takes (ad/chunk_tapes.py;
    ad/parallel.py's docstring, "Chunks with tapes of their own"): the arrays it reads only in
    its own row (``own_rows``), which its chunks read as arrays they write apart}."""
    found = {}
    for s in ir.walk(fn.body):
        own = _row_shape(fn.body, s, types, alias, distinct)
        if own is not None:
            found[id(s)] = own
    return found


def _row_shape(body, loop, types, alias, distinct):
    """The arrays the prange ``loop`` reads only in its own row (``own_rows``; a frozenset,
    maybe empty) where it has the shape whose chunks may keep tapes of their own, else None: a
    loop two_pass_shape does not take (a nested loop, a branch) that writes arrays it never
    reads (by any name of their alias class) but in its iteration's own row, binds no array
    and no name of the function but its accumulators that anything after it reads, holds no
    prange or checkpointed loop and no return. (Two names of one alias class count apart where
    they surely hold arrays apart whenever the loop starts, ``distinct``: a time loop's swap
    ``u, v = v, u``.)"""
    if not (isinstance(loop, ir.For) and loop.parallel and loop.snapshots is None) \
            or two_pass_shape(body, loop):
        return None
    inside = list(ir.walk(loop.body))
    if not any(isinstance(x, ir.Store) for x in inside):
        return None                  # writes no array: the fused schedule's (fusion.py)
    for x in inside:
        if isinstance(x, ir.Return) or isinstance(x, ir.For) and (
                x.parallel or x.snapshots is not None):
            return None
        if isinstance(x, ir.Assign) and isinstance(types.get(x.target), nbt.Array):
            return None              # an array bound per iteration (a view, a temporary)
    stored = {x.array for x in inside if isinstance(x, ir.Store)}
    read = set()
    for x in inside:
        atoms = x.expr.atoms() if isinstance(x, ir.Assign) else \
            ir.index_atoms(x.index) + (x.value,) if isinstance(x, ir.Store) else ()
        read |= {a.id for a in atoms if isinstance(a, ir.Name)}
    apart = distinct.get(id(loop), frozenset())
    own = own_rows(loop, inside, stored)
    if any(w == n and w not in own or w != n and alias.get(w, w) == alias.get(n, n)
           and frozenset((w, n)) not in apart for w in stored for n in read):
        return None                  # an iteration may read what another one writes
    if not _only_sums_leave(body, loop, {x.target for x in inside if isinstance(x, ir.Assign)}
                            | {x.var for x in inside if isinstance(x, ir.For)}):
        return None
    return own


def own_rows(loop, inside, stored):
    """The arrays of ``stored`` the prange ``loop`` reads only where it writes them: every read
    and every write an element whose first index is the loop's variable (``out[i, j] += v``,
    ``y[i] += A[i, j] * x[j]``), so that an iteration reads nothing another one writes. The
    serial schedule saves each overwritten element on the tape, which the chunk's own is."""
    var = ir.Name(loop.var)
    if any(isinstance(x, ir.Assign) and x.target == loop.var
           or isinstance(x, ir.For) and x.var == loop.var for x in inside):
        return frozenset()           # the variable rebound: its name is not the row any more

    def row(index):
        return bool(index) and index[0] == var and not ir.has_slice(index)

    own = {w for w in stored if all(row(x.index) for x in inside
                                    if isinstance(x, ir.Store) and x.array == w)}
    for x in inside:
        if isinstance(x, ir.Store):
            atoms = ir.index_atoms(x.index) + (x.value,)
        elif isinstance(x, ir.Assign):
            e = x.expr
            if isinstance(e, ir.Index) and isinstance(e.a, ir.Name) and row(e.index):
                atoms = ir.index_atoms(e.index)      # a read of the row's own element
            else:
                atoms = e.atoms()
        else:
            continue
        own -= {a.id for a in atoms if isinstance(a, ir.Name)}
    return frozenset(own)
