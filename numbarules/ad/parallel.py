"""The parallel schedule of a ``numba.prange`` loop: the fused one-pass vjp, or the two loops of
the two-pass schedule, split into chunks of iterations that run on several threads.

**The rule.** A ``prange`` loop runs in parallel in the gradient when it is the loop of the fused
schedule (``ad/fusion.py``: its iterations are independent apart from accumulators ``s += u``,
it writes no array, and each iteration's reverse follows its forward, with nothing saved or with
a tape of one iteration), on the CPU. Then the only state one iteration hands to the next, in the
fused loop's text, is

- the accumulators (``s``) and the adjoints of values from before the loop that iterations add
  into (``d_a += ...``): each chunk sums into its own variable, and the chunks' sums are added
  after the loop (in chunk order);
- the adjoint of an accumulator (``d_s``), the same in every iteration (fusion.py): each chunk
  reads its own copy of it;
- the adjoints of the loop's own variables and the values an iteration saves and restores, the
  same at every iteration's start: each chunk starts them from zero, with a tape of its own;
- the adjoint arrays of arrays read in the loop (``d_x[j] += ...``).

Anything else the loop's text reads before it writes, or writes into, keeps the loop serial (the
fused loop as it was, with ``# prange: serial here``); so does a loop the fused schedule does not
take. The adjoint arrays decide how the iterations are split:

- every write at the iteration's own first index ``i`` (a row of a matrix, an element), or no
  adjoint array written: one contiguous chunk per thread, all at once, each writing into the
  shared arrays (no two iterations write the same element);
- every write at a first index ``i + o`` (a stencil, offsets within a span ``b - a``): 2 x
  threads contiguous chunks, the even ones in parallel and then the odd ones, all writing into
  the shared arrays (chunks two apart write apart once the chunk between holds the span; a loop
  too short for that runs as one chunk);
- otherwise one chunk per thread, each taking every nch-th iteration (work that shrinks along
  the loop is shared evenly) and writing into its own zeroed copy of each array, added after.

A fused loop the serial engine would split into a forward loop and a gather (ad/gather.py: a
stencil reduction, nothing summed into a scalar adjoint) is split so in parallel too
(``fused_schedule.gathered_loop(..., in_chunks=True)``): this module chunks the forward loop
(its accumulators per chunk), ad/gather.py the gather's loop over adjoint elements.

**The two-pass schedule** (a loop that writes an array, ``out[i] = f(x[i])``, which the fused
schedule does not take) splits its forward loop and its reverse loop the same way when
``codegen._Gen.two_pass_parallel`` allows (a loop of the function's own body, of assignments and
stores, nothing after it reading its values but its accumulators) and every value the loop saves
is saved in slots (below). The reverse then runs in the iterations' own order (any order is the
same).

**Saves in slots.** The serial loop saves its scalars one iteration ahead
(``tape.shifted_saves``): iteration ``j`` writes the values it assigns at ``base + (j + 1) * c +
p`` and its reverse reads the values from before it at ``base + j * c + p`` (``c`` values per
iteration, ``p`` the value's place). Both places depend on ``j`` alone, so when these are all the
loop saves (``tape.slotted``) and no iteration reads a value the one before it assigned
(``codegen._Gen.independent_saves``), each iteration computes its counter from its number
(``_k_f8_c1 = _k_f8 + (_lo1 + _k1) * c``) instead of carrying it: the forward writes its slots,
the reverse first reads its own values back from them, then pops as the serial reverse does.
After the chunks each saved variable is set to what the serial loop leaves (the last
iteration's value after the forward, the value from before the loop after the reverse), so
either loop may stay serial while the other runs in chunks. A math call's value (``tanh``,
``exp``) is saved so rather than evaluated again in the reverse (the tanh map: 2.4x its primal
with tanh evaluated twice). A fused loop (it writes no array) still re-executes its math calls
(``recompute._cheap``): nothing saved keeps it one pass with no tape. A primal array the
loop writes may be shared by the chunks when each iteration writes its own element and the loop
never reads it; anything else keeps the loop serial (``# prange: serial in this schedule``).

**Chunks with tapes of their own** (ad/chunk_tapes.py). A loop the slots cannot lay out (an
inner loop along a row, a branch: what an iteration saves depends on what every iteration before
it saved) whose iterations write arrays they never read (or read only in their own row: ``y[i]
+= A[i, j] * x[j]``), bind no array and hand nothing but accumulators to what follows
(``prange_shapes.row_loops``) runs the two-pass schedule in each chunk: the chunk's forward
saves on a tape of its own, kept in a list for the chunk's reverse, which pops it, the chunk's
iterations last to first. Both passes take the reverse's partition (``Keep``). An adjoint array
written away from the iteration's own first index (``d_w[j]`` in a loop over rows) is summed in
a zeroed copy per chunk while the others stay shared (also in the other schedules).

A prange loop nested in other loops (a time loop around it) is split the same way when nothing
after it reads its values (``prange_shapes.two_pass_shape``), also when the time loop swaps or
rebinds its arrays: the driver runs each chunk loop as a function of its own (ad/outline.py), so
Numba's parallel array analysis, which would mis-size an array name bound to several arrays
across a whole kernel, sees the loop's arrays as arguments bound once (a kernel that cannot be
outlined and binds an array name twice keeps its prange loops serial: ``rebinds_arrays``).

A write at ``i + a < 0`` would count from the end of the array, into another chunk's elements:
a loop whose start allows that runs serially (a constant start) or as one chunk (a start known
at run time). The trip counts of nested loops, saved and restored around each entry, start
from zero in each chunk, as in the function.

``nr.code(..., kind="vjp")`` shows which (``for _c in _prange(...)``).

The chunks are explicit (``prange`` over the thread count, a serial loop inside each) rather
than a ``prange`` over the iterations with Numba's reduction inference: the reverse's text
reads and rewrites adjoints in ways Numba's parfor analysis would take for reductions, and a
chunk per thread makes every shared write a write into the chunk's own slot. Addition in
another order than the serial loop's changes the last bits of a sum, as ``prange`` does in the
primal. Only the driver Python calls runs chunks on threads (its chunk loops outlined and
compiled with ``parallel=True``); the vjp kernel compiled callers link runs ``prange`` as
``range`` (the same result), so a gradient called inside the user's own parallel loop launches
no nested parallel work.
"""

import ast
import dataclasses
import re
import textwrap
from typing import Any

from numba.core import types as nbt

from . import fusion, ir
from .tape import _TAPE_DTYPES, _TAPE_KEYS
from .parallel_reads import exposed_names, only_added_into, read_arrays, stencil_offsets


@dataclasses.dataclass
class Keep:
    """What the forward and the reverse loop of a loop with chunk tapes (ad/chunk_tapes.py)
    share; ``rewrite`` fills it from the reverse's text, then reads it for the forward's."""
    k: int                           # the loop's id: the names of its lists (_kt_f8_<k>)
    reverse: bool = False
    span: Any = None                 # the reverse's partition: None every nch-th iteration,
    wraps: str = ""                  # else contiguous chunks (in waves if > 0)
    keys: tuple = ()                 # the tapes the chunks keep
    ends: dict = dataclasses.field(default_factory=dict)  # name -> type: what each chunk's
    #                                  forward leaves in its variables for its reverse
    reads: frozenset = frozenset()   # names the reverse reads and never assigns
    fixed: bool = False              # set by the dry run of both texts (chunk_tapes.py)


def rewrite(gen, loop, lines, indent, two_pass=False, slots=None, reverse=False, keep=None):
    """The parallel form of the fused loop ``lines`` (its ``for`` line first, at ``indent``
    levels), or None where the rule above does not hold. ``two_pass``: the lines are the
    forward loop or the reverse loop of the two-pass schedule (``codegen._Gen.
    two_pass_parallel``), which may write a primal array at the iteration's own element and
    save values in slots of each iteration's own: ``slots`` (tape key -> the statements
    saved, ``gen.slotted``), ``reverse`` for the reverse loop. ``keep``: the forward or the
    reverse loop of the schedule of chunk tapes (a ``Keep``; with ``two_pass``)."""
    if getattr(gen, "serial", False):
        return None                  # a kernel whose arrays Numba's analysis would mis-size
    at = next((k for k, ln in enumerate(lines) if not ln.strip().startswith("#")), None)
    if at is None or not lines[at].lstrip().startswith("for "):
        return None
    comments, body_lines = lines[:at], lines[at + 1:]
    code = [ln for ln in body_lines if not ln.strip().startswith("#")]
    try:
        tree = ast.parse(textwrap.dedent("\n".join(code)))
    except SyntaxError:
        return None
    exposed, stored, subscripted = exposed_names(tree.body)
    types, names, d = gen.types, gen.names, gen.names.d
    assigned = {x.target for x in ir.walk(loop.body) if isinstance(x, ir.Assign)}
    carried = {v for v in assigned if fusion.exposed(loop.body, v)[0]}
    accumulators = fusion.accumulators(loop)
    local_adjoints = {d(v): v for v in assigned - carried if v in names.adj}
    carried_adjoints = {d(v): v for v in carried if v in names.adj}
    outer_adjoints = {d(v): v for v in names.adj if v not in assigned}

    sums, copies, zeros, arrays, primal = {}, {}, {}, {}, {}
    reset = set()                    # local adjoints: zero after the loop, as the serial leaves them
    if "_push_view" in "\n".join(code) or getattr(gen, "rule_lists", None):
        return None                  # whole-array saves, residual lists: not split here
    slotted = {f"_tape_{key}" for key in slots or ()} | {f"_k_{key}" for key in slots or ()}
    text = "\n".join(code)
    if two_pass and keep is None and not set(re.findall(r"\b_(?:tape|k)_\w+", text)) <= slotted:
        return None                  # a save or restore the slots do not hold
    tapes = {}                       # a tape of one iteration (fusion's tape mode): one per chunk
    for key in ([] if two_pass and keep is None else getattr(gen, "tapes", ())):
        tapes[f"_tape_{key}"] = f"_tape(16, _np.{_TAPE_DTYPES[key]})"
        tapes[f"_k_{key}"] = "0"
    # values the iteration saves before overwriting and restores before it ends (tape mode):
    # each chunk starts them from a typed zero, as the function does
    restored = set() if two_pass and keep is None else {
        x.target if isinstance(x, ir.Assign) else x.var for x in ir.walk(loop.body)
        if isinstance(x, (ir.Assign, ir.For)) and id(x) in gen.plan.pushes}
    ends = {}                        # (keep, the reverse) loaded from the chunk's tape
    # the trip counts of nested loops, saved before an entry overwrites them and restored after
    # its reverse (codegen: ``_n<id>``, a while loop's ``_w<id>``, on the int tape): each chunk
    # starts them from 0 too
    trips = {f"_n{x.id}" for x in ir.walk(loop.body) if isinstance(x, ir.For)}
    trips |= {f"_w{x.id}" for x in ir.walk(loop.body) if isinstance(x, ir.While)}
    for name in sorted(stored & exposed):
        if name in tapes or name in slotted:
            continue                 # a chunk's own tape; an iteration's slots (_chunked)
        if name in trips or name in restored and gen.zero(types.get(name)):
            t = nbt.int64 if name in trips else types[name]
            if keep is not None and keep.reverse:
                ends[name] = t       # the value the chunk's forward left (chunk_tapes.py)
            else:
                zeros[name] = t
            continue
        if name in carried and _float(types.get(name)):
            if name not in accumulators:
                return None          # a recurrence, not a sum the chunks may split
            sums[name] = types[name]
        elif name in outer_adjoints and _float(types.get(outer_adjoints[name])):
            sums[name] = types[outer_adjoints[name]]
        elif name in carried_adjoints:
            copies[name] = name
        elif name in local_adjoints and _float(types.get(local_adjoints[name])):
            zeros[name] = types[local_adjoints[name]]
            reset.add(name)
        else:
            return None              # state carried from one iteration to the next: serial
    read = read_arrays(tree.body) if two_pass else set()
    if keep is not None:
        # a chunk tape's loop may read a primal array where it writes it, in its own row only
        # (prange_shapes.own_rows, found by the analysis): as an array it writes and never
        # reads, its rows disjoint
        read -= gen.plan.rows[id(loop)]
    for name in sorted(subscripted):
        if name in stored or name in slotted:
            continue                 # an array the iteration binds itself; the slots' tapes
        v = outer_adjoints.get(name)
        t = types.get(v) if v is not None else None
        if two_pass and v is None and isinstance(types.get(name), nbt.Array) \
                and name not in read:
            primal[name] = types[name]   # a primal array the loop writes and never reads
            continue
        if not (isinstance(t, nbt.Array) and isinstance(t.dtype, nbt.Float)):
            return None              # a write into an array iterations share
        arrays[name] = t
    if not (sums or arrays or primal):
        return None                  # nothing to split (and no accumulator to speak of)
    private = {}
    if stencil_offsets(gen, loop, tree.body, arrays) is None:
        # an adjoint array some iteration writes away from its own first index (``d_w[j]`` in
        # a loop over rows): each chunk adds into a zeroed copy of its own, added into the
        # array after the chunks. Right only for an array the loop adds into and nothing else
        # (the two-pass reverse of a store reads and zeroes its adjoint, ``_d = d_out[i, j];
        # d_out[i, j] = 0.0``: on a zeroed copy that read is 0 and the zeroing is lost, a
        # silently wrong gradient). The others stay shared.
        private = {a: t for a, t in arrays.items()
                   if stencil_offsets(gen, loop, tree.body, {a: t}) is None} or dict(arrays)
        if not only_added_into(tree.body, set(private)):
            return None
        arrays = {a: t for a, t in arrays.items() if a not in private}
    # (private copies alone: chunks of every nch-th iteration, as work may shrink along the loop)
    offsets = None if private and not arrays and not primal else \
        stencil_offsets(gen, loop, tree.body, arrays)
    if primal:
        # each element of a primal array written by one iteration only (the last writer would
        # otherwise depend on the order), every iteration's writes disjoint from the others'
        at = stencil_offsets(gen, loop, tree.body, primal)
        if at is None or at[0] != at[1] or offsets is None:
            return None
        offsets = (min(offsets[0], at[0]), max(offsets[1], at[1])) if arrays else at
    span = None if offsets is None else offsets[1] - offsets[0]
    if (arrays or primal) and offsets is not None and isinstance(loop.start, ir.Const) \
            and loop.start.value + offsets[0] < 0:
        return None                  # a write at a negative index (from the end): serial
    k = loop.id
    if keep is not None:
        # the chunks keep every tape the text reads or writes, and the tapes of the values
        # their forward leaves for their reverse (``ends``)
        wraps = "" if span is None or not (arrays or primal) or isinstance(
            loop.start, ir.Const) else f" and {loop.start.src()} >= {-offsets[0]}"
        if keep.reverse and not keep.fixed:
            keep.ends = ends
            keep.reads = frozenset(v for v in exposed - stored
                                   if not re.match(r"_(tape|k)_[a-z]\d$", v))
            keep.span, keep.wraps = span, wraps
        elif keep.reverse and (set(ends) != set(keep.ends) or (span, wraps) != (
                keep.span, keep.wraps)):
            return None              # (not the text the dry run saw)
        elif not keep.reverse and (not set(keep.ends) <= stored or keep.reads & stored):
            return None              # a value the reverse reads that the chunks would not hold
        if any(t not in _TAPE_KEYS for t in keep.ends.values()):
            return None
        keys = {key for key in getattr(gen, "tapes", ())
                if re.search(rf"\b_(?:tape|k)_{key}\b", text)}
        keys |= {_TAPE_KEYS[t] for t in keep.ends.values()}
        if not keep.fixed:
            keep.keys = tuple(sorted(keys | set(keep.keys)))
        elif not keys <= set(keep.keys):
            return None
        tapes = {}
        for key in keep.keys:
            tapes[f"_tape_{key}"] = f"_tape(16, _np.{_TAPE_DTYPES[key]})"
            tapes[f"_k_{key}"] = "0"
        if not keep.reverse:
            zeros.update({name: t for name, t in keep.ends.items() if name not in zeros})
    tapes = {name: init for name, init in tapes.items() if name in stored or keep is not None}
    slots = {key: saves for key, saves in (slots or {}).items() if f"_k_{key}" in stored}
    own = {name: f"{name}_c{k}" for name in list(sums) + list(copies) + list(tapes)
           + [f"_k_{key}" for key in slots] + list(private)}
    return comments + _chunked(gen, loop, body_lines, indent, sums, copies, zeros, arrays, own,
                               offsets, tapes, primal, private, slots, reverse, reset, keep)


def _chunked(gen, loop, body_lines, indent, sums, copies, zeros, arrays, own, offsets, tapes,
             primal, private, slots=None, reverse=False, reset=(), keep=None):
    k = loop.id
    span = None if offsets is None else offsets[1] - offsets[0]
    nt, nch, c, lo, hi, j, w = (f"_nt{k}", f"_nch{k}", f"_c{k}", f"_lo{k}", f"_hi{k}", f"_k{k}",
                                f"_w{k}")
    n = f"_n{k}"
    pad = "    " * indent
    # a negative index counts from the end: a write at i + a < 0 lands where another chunk
    # writes, so a loop whose start (known at run time) allows one runs as one chunk
    wraps = "" if span is None or not (arrays or primal) or isinstance(loop.start, ir.Const) else \
        f" and {loop.start.src()} >= {-offsets[0]}"
    kept = keep is not None and not keep.reverse
    if kept:
        # the forward of a loop with chunk tapes: the reverse's chunks, all at once
        span, wraps = keep.span, keep.wraps
    waves = bool(span) and not kept
    disjoint = span == 0                 # every write at [i, ...]: no two iterations meet
    head = [f"{pad}{nt} = _num_threads()",
            f"{pad}{n} = _trip({loop.start.src()}, {loop.stop.src()}, {loop.step.src()})"]
    if kept:
        head = [f"{pad}# prange: the reverse's chunks of iterations, all at once, each saving on "
                f"a tape of its own, kept for the chunk's reverse (ad/chunk_tapes.py)"] + head
        head.append(f"{pad}_kn{k} = " + (
            f"2 * {nt} if {n} >= 2 * {nt} * {span + 1}{wraps} else 1" if span else
            f"{nt} if {wraps[5:]} else 1" if wraps else nt))
        head.append(f"{pad}{nch} = _kn{k}")
    elif keep is not None:
        head.append(f"{pad}_k_i8 -= 1")
        head.append(f"{pad}_kn{k} = _tape_i8[_k_i8]")
        head.append(f"{pad}{nch} = _kn{k}")
        if waves:
            head.insert(0, f"{pad}# prange: the chunks of the forward, the even ones in "
                           f"parallel, then the odd ones (adjoints written within {span} of "
                           f"the iteration), each popping its own tape (ad/chunk_tapes.py)")
        elif disjoint:
            head.insert(0, f"{pad}# prange: the chunks of the forward, all at once, each popping "
                           f"its own tape (ad/chunk_tapes.py)")
        else:
            head.insert(0, f"{pad}# prange: the chunks of the forward (every nch-th iteration), "
                           f"each popping its own tape, with its own adjoint arrays "
                           f"(ad/chunk_tapes.py)")
    elif waves:
        # The iterations write their adjoints at i + a .. i + b only (b - a = span): chunks
        # two apart write apart once a chunk is longer than the span, so the even chunks run
        # together, then the odd ones, each into the shared adjoints.
        head = [f"{pad}# prange: 2 x threads chunks of iterations, the even ones in parallel, "
                f"then the odd ones (adjoints written within {span} of the iteration: chunks "
                f"two apart write apart); accumulators per chunk (ad/parallel.py)"] + head
        head.append(f"{pad}{nch} = 2 * {nt} if {n} >= 2 * {nt} * {span + 1}{wraps} else 1")
    elif disjoint:
        what = ("arrays written at the iteration's own index only, in place" if primal else
                "adjoints written at the iteration's own index only, into the shared arrays")\
            if arrays or primal else "no adjoint array written"
        head = [f"{pad}# prange: one contiguous chunk of iterations per thread, all at once "
                f"({what}){'; accumulators per chunk' if sums else ''} (ad/parallel.py)"] + head
        head.append(f"{pad}{nch} = {nt}{' if ' + wraps[5:] + ' else 1' if wraps else ''}")
    else:
        head = [f"{pad}# prange: one chunk of iterations per thread (every nch-th), each with "
                f"its own accumulators and adjoint arrays (ad/parallel.py)"] + head
        head.append(f"{pad}{nch} = {nt}")
    if private and span is not None:
        head.insert(1, f"{pad}# prange: {', '.join(private)}: written away from the "
                       f"iteration's index, each chunk adds into its own zeroed copy")
    if keep is not None and keep.keys:
        lists = [f"_kt_{key}_{k}" for key in keep.keys]
        if kept:
            # a place per chunk at the end of each list: the lists hold the chunks' tapes of
            # every entry of the loop (a time loop's steps), popped by the reverse
            head.append(f"{pad}_kb{k} = len({lists[0]})")
            head.append(f"{pad}for {c} in range({nch}):")
            for key, name in zip(keep.keys, lists):
                head.append(f"{pad}    {name}.append(_tape(0, _np.{_TAPE_DTYPES[key]}))")
        else:
            head.append(f"{pad}_kb{k} = len({lists[0]}) - {nch}")
    for name, t in sums.items():
        head.append(f"{pad}_ps_{own[name]} = _np.zeros({nch}, _np.{t})")
    for name, t in private.items():
        head.append(f"{pad}_pa_{own[name]} = _np.zeros(({nch},) + {name}.shape, "
                    f"_np.{t.dtype})")
    if slots and reverse:
        for key, saves in sorted(slots.items()):
            # The last iteration's values go back into their slots: the serial layout lets the
            # next save after the loop overwrite them (the serial reverse holds them in the
            # variables, as this reverse starts too); then back to where the slots begin.
            for p, x in enumerate(saves):
                head.append(f"{pad}_tape_{key}[_k_{key}{f' + {p}' if p else ''}] = {x.target}")
            head.append(f"{pad}_k_{key} -= {_times(n, len(saves))}")
    if waves:
        head.append(f"{pad}for {w} in range(2):")
        pad2 = pad + "    "
        head.append(f"{pad2}for {c}_ in _prange(({nch} + 1 - {w}) // 2):")
        inner = pad2 + "    "
        head.append(f"{inner}{c} = 2 * {c}_ + {w}")
    else:
        head.append(f"{pad}for {c} in _prange({nch}):")
        inner = pad + "    "
    if span is not None:
        # max(.., 0) and the loop counted from 0 below: LLVM then knows every index is
        # non-negative, folds Numba's negative-index wraparound and vectorises the chunk's loop
        # (from a start it cannot see it emits a select per load: 1.9x slower, numba-internals.md)
        head += [f"{inner}{lo} = max(({n} * {c}) // {nch}, 0)",
                 f"{inner}{hi} = ({n} * ({c} + 1)) // {nch}"]
    for name, t in sums.items():
        head.append(f"{inner}{own[name]} = {gen.zero(t)}")
    for name in copies:
        head.append(f"{inner}{own[name]} = {name}")
    for name, t in zeros.items():
        head.append(f"{inner}{name} = {gen.zero(t)}")
    if keep is not None and keep.reverse:
        for key in keep.keys:
            tape, count = own[f"_tape_{key}"], own[f"_k_{key}"]
            head.append(f"{inner}{tape} = _kt_{key}_{k}[_kb{k} + {c}]")
            head.append(f"{inner}{count} = {tape}.shape[0]")
        for name, t in reversed(list(keep.ends.items())):
            key = _TAPE_KEYS[t]
            head.append(f"{inner}{own[f'_k_{key}']} -= 1")
            head.append(f"{inner}{name} = {own[f'_tape_{key}']}[{own[f'_k_{key}']}]")
    else:
        for name, init in tapes.items():
            head.append(f"{inner}{own[name]} = {init}")
    for name in private:
        head.append(f"{inner}{own[name]} = _pa_{own[name]}[{c}]")
    if span is not None and keep is not None and keep.reverse:
        # the chunk's iterations last to first: its tape pops what its forward pushed
        head.append(f"{inner}for {j} in range({hi} - {lo}):")
        head.append(f"{inner}    {loop.var} = "
                    f"{ir.affine_src(loop.start, f'({hi} - 1 - {j})', loop.step)}")
        it = None
    elif keep is not None and keep.reverse:
        head.append(f"{inner}for {j} in range(({n} - 1 - {c}) // {nch} * {nch} + {c}, -1, "
                    f"-{nch}):")
        head.append(f"{inner}    {loop.var} = {ir.affine_src(loop.start, j, loop.step)}")
        it = None
    elif span is not None:
        head.append(f"{inner}for {j} in range({hi} - {lo}):")
        at = f"{lo} + {j}" if loop.step == ir.Const(1) else f"({lo} + {j})"
        head.append(f"{inner}    {loop.var} = {ir.affine_src(loop.start, at, loop.step)}")
        it = f"({lo} + {j})"
    else:
        # every nch-th iteration: work that grows or shrinks along the loop (an inner loop
        # over the elements after i) is shared evenly
        head.append(f"{inner}for {j} in range({c}, {n}, {nch}):")
        head.append(f"{inner}    {loop.var} = {ir.affine_src(loop.start, j, loop.step)}")
        it = j
    for key, saves in sorted((slots or {}).items()):
        # iteration it's saves: the values before it at _k + p, its own at _k + c + p (the
        # serial loop's layout, tape.shifted_saves), from where the serial counter would be
        head.append(f"{inner}    {own[f'_k_{key}']} = _k_{key} + {_times(it, len(saves))}")
    pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(own, key=len,
                                                                          reverse=True)))
                         + r")(?!\w)")
    extra = "    " * (len(inner) // 4 + 1 - (indent + 1))
    if slots and not reverse:
        # the forward's last step of a slotted counter (``_k_f8 += 1``) is dead: each iteration
        # sets its counter from its number
        bumps = {f"_k_{key} += {len(saves)}" for key, saves in slots.items()}
        body_lines = list(body_lines)
        while body_lines and (not body_lines[-1].strip() or body_lines[-1].strip() in bumps):
            body_lines.pop()
    for line in body_lines:
        if own and not line.strip().startswith("#"):
            # names outside string literals (an error message may hold the same words)
            parts = _STRINGS.split(line)
            line = "".join(part if odd % 2 else pattern.sub(lambda m: own[m.group(1)], part)
                           for odd, part in enumerate(parts))
        head.append(extra + line)
    for name in sums:
        head.append(f"{inner}_ps_{own[name]}[{c}] = {own[name]}")
    if kept:
        for name, t in keep.ends.items():
            # what the chunk's last iteration leaves, for the chunk's reverse to start from
            tape, count = own[f"_tape_{_TAPE_KEYS[t]}"], own[f"_k_{_TAPE_KEYS[t]}"]
            head.append(f"{inner}if {count} == {tape}.shape[0]:")
            head.append(f"{inner}    {tape} = _reserve({tape}, {count}, 1)")
            head.append(f"{inner}{tape}[{count}] = {name}")
            head.append(f"{inner}{count} += 1")
        for key in keep.keys:
            tape, count = own[f"_tape_{key}"], own[f"_k_{key}"]
            head.append(f"{inner}_kt_{key}_{k}[_kb{k} + {c}] = {tape}[:{count}]")
    # the chunks' sums, in chunk order
    for name in sums:
        head.append(f"{pad}for {c} in range({nch}):")
        head.append(f"{pad}    {name} = {name} + _ps_{own[name]}[{c}]")
    for name in private:
        head.append(f"{pad}for {c} in range({nch}):")
        head.append(f"{pad}    {name} += _pa_{own[name]}[{c}]")
    if kept:
        # the chunk count, for the reverse (a time loop's steps each push theirs)
        head += [f"{pad}if _k_i8 == _tape_i8.shape[0]:",
                 f"{pad}    _tape_i8 = _reserve(_tape_i8, _k_i8, 1)",
                 f"{pad}_tape_i8[_k_i8] = {nch}", f"{pad}_k_i8 += 1"]
    elif keep is not None:
        for key in keep.keys:
            head.append(f"{pad}for {c} in range({nch}):")
            head.append(f"{pad}    _kt_{key}_{k}.pop()")
    for name in sorted(reset):
        # the adjoint of a value each iteration assigns before reading it: every iteration's
        # reverse hands it on and leaves zero (the chunks' copies stay in the chunks)
        head.append(f"{pad}{name} = {gen.zero(zeros[name])}")
    for key, saves in sorted((slots or {}).items()):
        if not reverse:
            head.append(f"{pad}_k_{key} += {_times(n, len(saves))}")
        # the saved values as the serial loop leaves them (the forward: the last iteration's;
        # the reverse: the ones from before the loop), for whatever runs serially next
        for p, x in enumerate(saves):
            head.append(f"{pad}{x.target} = _tape_{key}[_k_{key}{f' + {p}' if p else ''}]")
    return head


# a kernel's header allocating a zero adjoint array: (adjoint, primal) (also fused_schedule's)
ZEROS = re.compile(r"    (\w+) = _zeros_like\((\w+)\)")


def rebinds_arrays(source, arrays):
    """The names of ``arrays`` (``array_names``) the kernel ``source`` binds more than once (its
    loops' placeholders and saved lists, a swap, an adjoint chosen by which array a name
    holds), or an empty set.

    Numba's parallel passes (``parallel=True``) run an array analysis over the whole function
    that gives each array name one equivalence class of shapes: a name bound to arrays of other
    sizes at different points (a placeholder of size 0, then the step's array) fails its
    inserted checks at run time (``AssertionError: Sizes of _d11, _t10.4 do not match``: a time
    loop around a prange whose step rebinds ``u = u * 0.9 + k * np.sin(u)``) or, worse, reads
    a wrong size (numba/numba#9769, #7681). The driver's chunk loops are therefore compiled
    as functions of their own (ad/outline.py), each asked this of its own text; a kernel that
    cannot be outlined and has such a name keeps its prange loops serial
    (``codegen.generate``): the serial engine's answer, and no parallel analysis."""
    tree = ast.parse(source)
    counts = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):      # a parameter is bound at the call
            for a in node.args.args:
                counts[a.arg] = counts.get(a.arg, 0) + 1
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.For) else []
        for t in targets:
            for name in ast.walk(t):
                if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                    counts[name.id] = counts.get(name.id, 0) + 1
    return {name for name, k in counts.items() if k > 1 and name in arrays}


def array_names(types, adjoints):
    """The kernel's array names: the primal's array variables (``types``) and their adjoints
    (``adjoints``: primal name -> adjoint name, the generator's ``_Names.adj``)."""
    arrays = {v for v, t in types.items() if isinstance(t, nbt.Array)}
    return arrays | {adjoints[v] for v in arrays if v in adjoints}


def zeroed_in_chunks(lines):
    """The lines of a parallel kernel with its adjoint arrays allocated unfilled and zeroed in
    parts, one part per thread: a ``np.zeros_like`` of a large array is one memset, a pass over
    memory (and its first page faults) on one thread, which the rest of a parallel gradient
    then waits for (W4's 32 MB adjoint: about 1.5 ms). Each run of header allocations
    (``d_x = _zeros_like(x)``, at the function's top level) gets one ``prange`` after it."""
    out, run = [], []

    def flush():
        if run:
            out.append("    # the adjoint arrays zeroed in parts on the threads (ad/parallel.py)")
            out.append("    _znt = _num_threads()")
            out.append("    for _zc in _prange(_znt):")
            out.extend(f"        _zero_part({name}, _zc, _znt)" for name in run)
            run.clear()
    for line in lines:
        m = ZEROS.fullmatch(line)
        if m:
            out.append(f"    {m.group(1)} = _empty_like({m.group(2)})")
            run.append(m.group(1))
            continue
        flush()
        out.append(line)
    flush()
    return out


_STRINGS = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")


def _times(a, c):
    return a if c == 1 else f"{a} * {c}"


def _float(t):
    return isinstance(t, nbt.Float)
