"""The chunk loops of a parallel gradient driver as functions of their own.

A prange loop's chunks (ad/parallel.py) run on threads only when Numba compiles them with
``parallel=True``. Its parallel passes analyse the whole function they compile: the array
analysis gives each array name one class of shapes, so a driver that binds an array name to
several arrays (a time loop's buffer swap ``u, v = v, u``, the placeholders of saved arrays) is
mis-sized, and fails its own inserted size checks at run time (numba/numba#7681, #9769; see
``parallel.rebinds_arrays``). So the driver is compiled without ``parallel=True``, and each
``for _c in _prange(...)`` statement (one chunk loop, its serial inner loops included) becomes a
function of its own, compiled with ``parallel=True``, that takes the driver's variables the loop
reads as arguments and is called where the loop was:

    _chunks_heat_1(_n2, _nch2, _k_f8, _tape_f8, u, v, k)

Inside it every array is an argument, bound once, whatever the driver does with the names
around the call; and the parallel passes see a dozen lines instead of the whole gradient.

A loop is outlined only when nothing it assigns is read after it before being assigned again
(the chunks' private values: an iteration's temporaries, its counters), which the chunked
schedules guarantee (what a chunk hands on goes through arrays: the per-chunk sums, the tape's
slots); ``outline`` returns None otherwise, and the driver keeps its loops inline."""

import ast
import re

from . import ir


def outline(lines, name, params):
    """``(driver lines, chunk function sources)`` for the driver body ``lines`` (statements at
    4 spaces, as ``Kernels.whole_body``) of a function with parameters ``params``, or None where
    a loop cannot be outlined (see the module's note). ``name`` names the functions
    (``_chunks_<name>_<k>``)."""
    text = "def _w():\n" + "\n".join(lines) + "\n"
    func = ast.parse(text).body[0]
    loops = [n for n in _outermost_chunk_loops(func.body)]
    if not loops:
        return None
    inside = {id(x) for loop in loops for x in ast.walk(loop)}
    driver_locals = set(params) | {
        n.id for n in ast.walk(func) if id(n) not in inside
        and isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    src = text.split("\n")           # src[k - 1] is line k of the parse
    out, chunks, done = [], [], 1    # done: the last line of the parse copied or replaced
    shared = {}                      # a loop's text with its arguments numbered -> function
    for loop in loops:
        assigned = {n.id for n in ast.walk(loop)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        after = ir.statements_after(func.body, loop, _parts)
        if any(_reads_first(after, v) for v in assigned):
            return None              # a chunk's value read after the loop: not outlined
        args = _arguments(loop, driver_locals)
        first = loop.lineno
        # comments just above the loop stay in the driver (they say which schedule it is)
        out.extend(src[done:first - 1])
        indent = src[first - 1][:len(src[first - 1]) - len(src[first - 1].lstrip())]
        block = [line[len(indent):] if line.strip() else ""
                 for line in src[first - 1:loop.end_lineno]]
        body = "".join(f"    {line}\n" if line else "\n" for line in block)
        # a loop that is another one with other arrays (the zeroing of each run of adjoint
        # arrays) calls that one's function: one compile per argument types, not per loop
        same = re.sub(r"\b(" + "|".join(map(re.escape, args)) + r")\b",
                      lambda m: f"_arg{args.index(m.group(1))}", body) if args else body
        fname = shared.get(same)
        if fname is None:
            fname = shared[same] = f"_chunks_{name}_{len(chunks) + 1}"
            chunks.append((fname, f"def {fname}({', '.join(args)}):\n" + body))
        out.append(f"{indent}{fname}({', '.join(args)})")
        done = loop.end_lineno
    out.extend(src[done:])
    while out and not out[-1].strip():
        out.pop()
    return tuple(out), tuple(chunks)


def _outermost_chunk_loops(block):
    """The ``for ... in _prange(...)`` statements of ``block`` not inside another one, in the
    order of the text."""
    found = []
    for s in block:
        if isinstance(s, ast.For) and isinstance(s.iter, ast.Call) \
                and isinstance(s.iter.func, ast.Name) and s.iter.func.id == "_prange":
            found.append(s)
            continue
        for part in _blocks(s):
            found.extend(_outermost_chunk_loops(part))
    return found


def _blocks(s):
    return [getattr(s, f) for f in ("body", "orelse", "finalbody") if isinstance(
        getattr(s, f, None), list)]


def _arguments(loop, driver_locals):
    """The driver's variables ``loop`` reads before assigning them, in the order of the
    text: what the outlined function takes."""
    names = []
    for n in ast.walk(loop):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in driver_locals \
                and n.id not in names and (_loads(loop.iter, n.id) or (
                    not _stores(loop.target, n.id) and _seq(loop.body, n.id) is True)):
            names.append(n.id)
    return sorted(names, key=lambda v: _first_use(loop, v))


def _first_use(loop, v):
    return min((n.lineno, n.col_offset) for n in ast.walk(loop)
               if isinstance(n, ast.Name) and n.id == v)


def _parts(s):
    """(the statement blocks inside ``s``, whether it is a loop): for ir.statements_after."""
    return _blocks(s), isinstance(s, (ast.For, ast.While))


def _reads_first(stmts, v):
    """Whether some path through ``stmts`` reads ``v`` before assigning it."""
    return _seq(stmts, v) is True


def _seq(stmts, v):
    """True: some path reads ``v`` first; False: every path assigns it first; None: neither
    (a path that does not touch it)."""
    for s in stmts:
        r = _stmt(s, v)
        if r is not None:
            return r
    return None


def _stmt(s, v):
    if isinstance(s, ast.Assign):
        if _loads(s.value, v) or any(_loads(t, v) for t in s.targets):
            return True
        return False if any(_stores(t, v) for t in s.targets) else None
    if isinstance(s, ast.AugAssign):
        return True if _loads(s.value, v) or _loads(s.target, v) or _stores(s.target, v) \
            else None
    if isinstance(s, ast.For):
        if _loads(s.iter, v):
            return True
        if _stores(s.target, v):
            return None              # the body reads the loop's own variable; it may not run
        return True if _seq(s.body, v) is True or _seq(s.orelse, v) is True else None
    if isinstance(s, ast.While):
        if _loads(s.test, v) or _seq(s.body, v) is True:
            return True
        return None
    if isinstance(s, ast.If):
        if _loads(s.test, v):
            return True
        a, b = _seq(s.body, v), _seq(s.orelse, v)
        if a is True or b is True:
            return True
        return False if a is False and b is False else None
    return True if _loads(s, v) else None


def _loads(node, v):
    return any(isinstance(n, ast.Name) and n.id == v and not isinstance(n.ctx, ast.Store)
               for n in ast.walk(node))


def _stores(node, v):
    return any(isinstance(n, ast.Name) and n.id == v and isinstance(n.ctx, ast.Store)
               for n in ast.walk(node))
