"""The reverse of a stencil loop nest as a gather, so that LLVM vectorises it.

The reverse of ``for i: v[i] = u[i - 1] + u[i + 1]`` scatters: iteration ``i`` adds into
``d_u[i - 1]`` and ``d_u[i + 1]``, and the next iteration reads back what this one wrote, a
dependence between iterations that keeps LLVM's loop vectoriser away (reaction-diffusion's reverse
sweep ran at 1/7 of its primal's speed). The same sums can be taken the other way round: for
each element ``p`` of ``d_u``, add what every iteration ``m = p - o`` gave it, one term per
offset ``o`` of the stencil. Each element is then written once, iterations are independent and
the loop vectorises. A scalar adjoint accumulated in a 2-D nest (``d_k += ...``) is summed in one
lane per column and the lanes added at the end, so no chain of additions runs through the nest.

The rewrite works on the emitted reverse loops (text, parsed with ``ast``) and applies only to a
shape it can check completely:

- one range loop or a nest of two with step 1, whose inner bounds do not change across the outer
  loop (checked on the IR by ``nest_of``), nothing pushed or popped inside but the inner trip
  counts, no views or snapshots;
- a body of assignments of pure expressions to names set once per iteration and read only after
  they are set (no value carried between iterations), element accumulations
  ``d_x[i + a, j + b] = d_x[i + a, j + b] + e`` into float64 adjoint arrays (not read otherwise),
  reads and zeroings of adjoint arrays at the iteration's own element, and scalar accumulations
  ``d_k += e`` into names the body does not otherwise touch. The adjoint of a value an
  iteration reads several times is summed within the iteration (``d_t += a; d_t += b; _g = d_t;
  d_t = -0.0``); such sums are first rewritten as a name per version (``gather_read._Plan._versions``).

At run time a guard checks that every trip count is positive, that the gathered elements are in
bounds without negative-index wraparound, and that each written array shares no memory with an
array the body reads (``runtime._apart``), and that an adjoint summed from zero in each
iteration is zero when the loop begins; otherwise the scatter, kept beside it, runs. The sums
are the same numbers added in another order: array elements within a few ulp of the scatter,
lane sums within (rows + columns) rounding steps of the terms' magnitudes instead of (rows x
columns). ``NUMBARULES_GATHER=0`` turns the rewrite off; tests set ``GATHER`` to compare both.

The guards are needed only at the edges: the elements every offset's term reaches (the
interior) run in a loop of their own without them, counted from 0 over a base LLVM can see is
non-negative (so Numba's negative-index wraparound folds away and the loop vectorises without
masks); in a 2-D nest, and in a prange loop's chunks (a serial 1-D gather keeps one guarded
loop: compile time). An adjoint array nothing has touched since its allocation is
written without being read and allocated unfilled (``fresh``), and a ``prange`` loop's gather
runs its outer loop in chunks on the threads (``parallel``).
"""

import ast
import os
import re
import textwrap

from numba import types as nbt

from . import ir
from .gather_read import _Plan, _is_name, _names_in, _own, _read_nest

#: ``NUMBARULES_GATHER=0`` in the environment turns the rewrite off (part of the disk cache's key).
GATHER = os.environ.get("NUMBARULES_GATHER", "1").strip().lower() not in ("0", "false", "no", "off")



# --- the IR side: which loops may be rewritten -----------------------------------------------


def nest_of(gen, s):
    """The loop nest rooted at ``s`` when its reverse may become a gather, else ``None``."""
    if not GATHER or gen.device is not None or gen.fusing or s.snapshots is not None:
        return None
    if s.step != ir.Const(1) or gen.loop_views(s):
        return None
    body = list(s.body)
    loops = [s]
    if not _straight(body):
        if not body or not isinstance(body[-1], ir.For):
            return None
        inner = body[-1]
        if not all(isinstance(x, ir.Assign) for x in body[:-1]) or not _straight(inner.body):
            return None
        if inner.step != ir.Const(1) or inner.snapshots is not None or gen.loop_views(inner) \
                or gen.snapshots(inner) or id(inner) in gen.plan.pushes:
            return None
        set_in_nest = {s.var, inner.var} | {x.target for x in ir.walk(body) if isinstance(x, ir.Assign)}
        hoisted = {x.target: x for x in body[:-1]}
        for a in (inner.start, inner.stop):
            if not _invariant(a, set_in_nest, hoisted):
                return None
        loops.append(inner)
    for x in ir.walk(s.body):
        if id(x) in gen.plan.pushes and not (isinstance(x, ir.Store) and gen.snapshotted(x)):
            return None
    return loops


def _straight(stmts):
    return all(isinstance(x, (ir.Assign, ir.Store)) for x in stmts)


def _invariant(a, set_in_nest, hoisted):
    """Whether atom ``a`` has one value for the whole nest: a constant, a name the nest does not
    set, or a name set before the inner loop from such names."""
    if isinstance(a, ir.Const) or a.id not in set_in_nest:
        return True
    x = hoisted.get(a.id)
    return x is not None and all(isinstance(b, ir.Const) or b.id not in set_in_nest
                                 for b in x.expr.atoms())


# --- the text side: read the emitted scatter, write the gather -------------------------------


def rewrite(gen, out, start, loops, parallel=False, fresh=()):
    """Replace ``out.lines[start:]`` (the scatter reverse of ``loops``) with a guarded gather
    and the scatter as its fallback, when the emitted body has the shape described above.
    ``parallel``: the gather of a single ``prange`` loop, in chunks on the threads (each
    element written by one iteration of the gather: no two chunks meet), with no scalar summed
    (a scalar's sum would run through the chunks). ``fresh``: adjoint arrays allocated
    just before (``d_x = _zeros_like(x)``) that nothing has touched since; a 1-D gather writes
    its elements without reading them and zeroes only the ones no iteration reaches (the
    caller then allocates them with ``_empty_like``). Returns the arrays it so treated (a
    set, possibly empty), or None where it did not rewrite."""
    lines = out.lines[start:]
    if not lines:
        return None
    pad = len(lines[0]) - len(lines[0].lstrip())
    try:
        tree = ast.parse(textwrap.dedent("\n".join(lines)))
    except SyntaxError:
        return None
    nest = _read_nest(tree.body, len(loops))
    if nest is None:
        return None
    plan = _Plan.of(gen, nest, loops[0].id)
    if plan is None or (parallel and (plan.scalars or len(nest.vars) > 1)):
        return None
    written = {site.array for site in plan.sites}
    plan.fresh = set(fresh) & written if len(nest.vars) == 1 else set()
    text = _write(plan, loops[0].id, lines, pad, parallel)
    out.lines[start:] = text
    return plan.fresh


def _slice(plan, exprs, upto):
    """The statements (before position ``upto``) that compute the names ``exprs`` read."""
    need = set()
    for e in exprs:
        need |= _names_in(e)
    keep = []
    for pos in range(upto - 1, -1, -1):
        x = plan.nest.body[pos]
        if isinstance(x, ast.Assign) and _is_name(x.targets[0]) and x.targets[0].id in need:
            keep.append(pos)
            need |= _names_in(x.value)
    return [ast.unparse(plan.nest.body[pos]) for pos in sorted(keep)]


def _write(plan, sid, original, pad, parallel=False):
    nest = plan.nest
    depth = len(nest.vars)
    lo, n, v = nest.starts, nest.counts, nest.vars
    own = lambda name: _own(plan.gen, name)      # noqa: E731
    m = [own(f"_m{sid}_{k}") for k in range(depth)]
    q = [own(f"_q{sid}_{k}") for k in range(depth)]
    g = own(f"_acc{sid}")      # (not _g<n>: names.fresh("_g") spells those)
    gnt = own(f"_gnt{sid}")
    out = []

    def add(level, text):
        out.append(" " * (pad + 4 * level) + text)

    def plus(a, b):
        return b if a == "0" else f"{a} + {b}"

    def shift(a, c):
        """``a + c`` for a constant ``c``, folded where ``a`` starts with a number."""
        head, sep, tail = a.partition(" + ")
        if head.lstrip("-").isdigit():
            k = int(head) + c
            return (tail if k == 0 else f"{k} + {tail}") if sep else str(k)
        return a if c == 0 else f"{a} {'+' if c > 0 else '-'} {abs(c)}"

    def in_box(k):
        return f"{v[k]} >= {lo[k]} and {v[k]} < {plus(lo[k], n[k])}"

    # each written array's offsets; the scalars' lanes ride with the first one's offset 0
    groups = {}
    for s in plan.sites:
        groups.setdefault(s.array, {})[tuple(s.offsets)] = None
    if plan.scalars:
        groups[next(iter(groups))][(0,) * depth] = None
    groups = {array: list(offs) for array, offs in groups.items()}

    conds = [f"{c} > 0" for c in n] + [f"{x} == 0.0" for x in plan.entry_zero]
    for array, offs in groups.items():
        for k in range(depth):
            conds.append(f"{shift(plus(lo[k], n[k]), max(o[k] for o in offs))} "
                         f"<= {array}.shape[{k}]")
        for other in [a for a, _, _ in plan.zeros] + plan.read:
            if isinstance(plan._type(other), nbt.Array):
                conds.append(f"_apart({array}, {other})")
    add(0, f"{_HEAD}: each adjoint element written once, so the loop vectorises"
           + (" and its chunks run on the threads" if parallel else ""))
    add(0, "# (ad/gather.py); the scatter below runs where arrays may overlap or a loop is empty")
    add(0, f"if {' and '.join(dict.fromkeys(conds))}:")
    if parallel:
        add(1, f"{gnt} = _num_threads()")
    z = own(f"_z{sid}")
    for array, offsets in groups.items():
        if array in plan.fresh:
            # allocated unfilled: zero the elements no iteration reaches, write the others
            first = int(lo[0]) + min(o[0] for o in offsets)
            span = max(o[0] for o in offsets) - min(o[0] for o in offsets)
            end = plus(str(first), n[0] if not span else f"{n[0]} + {span}")
            if first > 0:
                add(1, f"for {z} in range({first}):")
                add(2, f"{array}[{z}] = 0.0")
            add(1, f"for {z} in range({end}, {array}.shape[0]):")
            add(2, f"{array}[{z}] = 0.0")

    def loops(level, names, ranges):
        for k in range(depth):
            add(level + k, f"for {names[k]} in range({ranges[k]}):")
        return level + depth

    # In a 2-D nest the scalar accumulations ride along with the first written array's own
    # iteration (offset 0), one lane per column, the lanes added up at the end: no chain of
    # additions runs through the loop.
    lanes = {a: own(f"_l{sid}_{k}") for k, a in
             enumerate(dict.fromkeys(a for a, _, _, _ in plan.scalars))}
    for name in lanes.values():
        add(1, f"{name} = _tape({n[1]}, _np.float64)")
    if lanes:
        add(1, f"for {m[1]} in range({n[1]}):")
        for name in lanes.values():
            add(2, f"{name}[{m[1]}] = 0.0")

    # each written array: for each of its elements, the terms of the iterations that reach it
    for w, (array, offsets) in enumerate(groups.items()):
        mine = [s for s in plan.sites if s.array == array]
        ext = []
        for k in range(depth):
            lo_k, hi_k = min(o[k] for o in offsets), max(o[k] for o in offsets)
            ext.append((lo_k, f"{n[k]} + {hi_k - lo_k}" if hi_k > lo_k else n[k]))
        at_q = [shift(plus(lo[k], m[k]), ext[k][0]) for k in range(depth)]
        names = [m[k] if at_q[k] == m[k] else q[k] for k in range(depth)]

        def element(lvl, guarded=True):
            """The sum of the terms reaching one element, and its write."""
            for k in range(depth):
                if names[k] != m[k]:
                    add(lvl, f"{q[k]} = {at_q[k]}")
            add(lvl, f"{g} = 0.0")
            for offs in offsets:
                group = [s for s in mine if tuple(s.offsets) == offs]
                sums = [(a, e, sign) for a, e, sign, _ in plan.scalars] \
                    if w == 0 and offs == (0,) * depth else []
                for k in range(depth):
                    add(lvl, f"{v[k]} = {shift(names[k], -offs[k])}")
                inner = lvl
                if guarded:
                    add(lvl, f"if {' and '.join(in_box(k) for k in range(depth))}:")
                    inner = lvl + 1
                upto = max([s.position for s in group]
                           + [p for _, _, _, p in plan.scalars if sums])
                for line in _slice(plan, [s.expr for s in group] + [e for _, e, _ in sums],
                                        upto + 1):
                    add(inner, line)
                if group:
                    terms = " ".join(f"{s.sign} {_term(s.expr)}" for s in group)
                    add(inner, f"{g} = {g} {terms}")
                for a, e, sign in sums:
                    at = f"{lanes[a]}[{shift(v[1], -int(lo[1]))}]"
                    add(inner, f"{at} = {at} {sign} {_term(e)}")
            at = f"{array}[{', '.join(names)}]"
            add(lvl, f"{at} = {g}" if array in plan.fresh else f"{at} = {at} + {g}")

        if not parallel and depth == 1:
            element(loops(1, m, [e for _, e in ext]))
            continue
        if not parallel:
            # A 2-D nest: element (m0, m1) gets a term from every offset exactly when
            # span_k <= m_k < n_k in both dimensions (the interior). There the terms go
            # unguarded, each loop counted from 0 (a range from a constant other than 0 or 1
            # kept Numba's negative-index wraparound, which LLVM did not fold, and the loop
            # did not vectorise: docs/numba-internals.md); the guarded body runs on the ring
            # around it. Reaction-diffusion's reverse step 216 -> 76 us at 256 x 256.
            spans = [max(o[k] for o in offsets) - min(o[k] for o in offsets)
                     for k in range(depth)]
            ends = [e for _, e in ext]
            whole = own(f"_gw{sid}")
            e_, a_, b_ = own(f"_ge{sid}"), own(f"_ga{sid}"), own(f"_gb{sid}")
            add(1, "# the elements some offset's term misses, guarded: whole rows at the ends, "
                   "the two ends of the others")
            add(1, f"for {m[0]} in range({ends[0]}):")
            add(2, f"{whole} = {m[0]} < {spans[0]} or {m[0]} >= {n[0]}")
            add(2, f"{b_} = {ends[1]} if {whole} else min({spans[1]}, {ends[1]})")
            add(2, f"{a_} = {ends[1]} if {whole} else max({spans[1]}, {n[1]})")
            add(2, f"for {e_} in range(2):")
            add(3, f"for {m[1]} in range(0 if {e_} == 0 else {a_}, "
                   f"{b_} if {e_} == 0 else {ends[1]}):")
            element(4)
            add(1, "# the others, which every offset's term reaches: no guard, so it vectorises")
            r = [own(f"{m[k]}_") for k in range(depth)]
            for k in range(depth):
                add(1 + k, f"for {r[k]} in range({n[k]} - {spans[k]}):")
                add(2 + k, f"{m[k]} = {plus(str(spans[k]), r[k])}")
            element(1 + depth, guarded=False)
            continue
        # One loop in chunks: element m gets a term from every offset exactly when
        # span <= m < n (the interior). There the terms go unguarded, counted from 0 over a
        # base LLVM can see is non-negative, and the loop vectorises without masks; the
        # guarded body runs at the ends only (a few elements). The guarded loop from a
        # chunk's start vectorised poorly (0.81 ms at 10^6 against 0.59; from the constant 0,
        # as the serial gather runs, 0.68). Not in the serial gather: the body's second
        # copy costs Rosenbrock's first gradient 0.18 s of compile (0.37 -> 0.55 s) for
        # 0.09 ms per call (docs/numba-internals.md).
        span_ = max(o[0] for o in offsets) - min(o[0] for o in offsets)
        c, c_lo, c_hi = own(f"_gc{sid}"), own(f"_glo{sid}"), own(f"_ghi{sid}")
        add(1, f"for {c} in _prange({gnt}):")
        add(2, f"{c_lo} = max(({ext[0][1]}) * {c} // {gnt}, 0)")
        add(2, f"{c_hi} = ({ext[0][1]}) * ({c} + 1) // {gnt}")
        lvl = 2
        a, b, e = own(f"_ga{sid}"), own(f"_gb{sid}"), own(f"_ge{sid}")
        m0 = own(f"{m[0]}_")
        add(lvl, f"{a} = max({c_lo}, {span_})")
        add(lvl, f"{b} = min({c_hi}, {n[0]})")
        add(lvl, "# the elements at the ends, which some iteration's term misses: guarded")
        add(lvl, f"for {e} in range(2):")
        add(lvl + 1, f"for {m[0]} in range({c_lo} if {e} == 0 else max({a}, {b}), "
                     f"min({a}, {c_hi}) if {e} == 0 else {c_hi}):")
        element(lvl + 2)
        add(lvl, "# the others, which every offset's term reaches: no guard, so it vectorises")
        add(lvl, f"for {m0} in range({b} - {a}):")
        add(lvl + 1, f"{m[0]} = {a} + {m0}")
        element(lvl + 1, guarded=False)
    if lanes:
        add(1, f"for {m[1]} in range({n[1]}):")
        for a, name in lanes.items():
            add(2, f"{a} += {name}[{m[1]}]")

    # the scatter leaves the last iteration's values (the loops' first) in the names it set;
    # drop_unread_leftovers removes those nothing outside the nest reads
    add(1, _LEFTOVERS)
    for k in range(depth):
        add(1, f"{v[k]} = {lo[k]}")
    for pos in sorted(plan.defs.values()):
        add(1, ast.unparse(nest.body[pos]))
    for name, value in plan.leftover.items():
        add(1, f"{name} = {value}")
    for j in nest.js:
        add(1, f"{j} = -1")
    add(1, _LEFTOVERS_END)
    # the adjoints the body read at its own element, zeroed once every term was read
    if plan.zeros:
        lvl = loops(1, m, n)
        home = ", ".join(plus(lo[k], m[k]) for k in range(depth))
        for array in dict.fromkeys(a for a, _, _ in plan.zeros):
            add(lvl, f"{array}[{home}] = 0.0")
    for k_name, tape, count in nest.pops:
        add(1, f"{k_name} -= {n[0]}")
        add(1, f"{count} = {tape}[{k_name}]")
    add(0, "else:")
    for array in sorted(plan.fresh):
        add(1, f"for {z} in range({array}.shape[0]):")
        add(2, f"{array}[{z}] = 0.0")
    out += ["    " + line for line in original]
    return out


_HEAD = "# the reverse of this loop nest as a gather"
_LEFTOVERS = "# the values the scatter's last iteration leaves"
_LEFTOVERS_END = "# (end of the values left)"


def drop_unread_leftovers(source):
    """``source`` without the assignments of a gathered nest's left-over values (see ``emit``)
    to names that occur nowhere outside that nest's gather and scatter: nothing reads them."""
    lines = source.split("\n")
    while True:
        start = next((k for k, line in enumerate(lines) if line.strip() == _LEFTOVERS), None)
        if start is None:
            return "\n".join(lines)
        end = next(k for k in range(start, len(lines)) if lines[k].strip() == _LEFTOVERS_END)
        # the construct: from its head comment to the end of the else block after it
        head = max(k for k in range(start) if lines[k].strip().startswith(_HEAD))
        pad = len(lines[head]) - len(lines[head].lstrip())
        stop = next(k for k in range(end, len(lines)) if lines[k].strip() == "else:"
                    and len(lines[k]) - len(lines[k].lstrip()) == pad) + 1
        while stop < len(lines) and (not lines[stop].strip()
                                     or len(lines[stop]) - len(lines[stop].lstrip()) > pad):
            stop += 1
        # what runs after it: the rest of the function, and in an enclosing loop the part of
        # its body before the nest (the next iteration)
        first = head
        for k in range(head - 1, -1, -1):
            indent = len(lines[k]) - len(lines[k].lstrip())
            if lines[k].strip() and indent < pad and lines[k].lstrip().startswith(("for ", "while ")):
                first = k
                pad = min(pad, indent)
        outside = "\n".join(lines[first:head] + lines[stop:])
        kept = []
        for line in lines[start + 1:end]:
            name = line.strip().split(" = ", 1)[0]
            if re.search(rf"(?<![\w.]){re.escape(name)}\b", outside):
                kept.append(line)
        lines[start:end + 1] = kept


def _term(e):
    text = ast.unparse(e)
    return text if isinstance(e, (ast.Name, ast.Constant, ast.Subscript, ast.Call)) else f"({text})"
