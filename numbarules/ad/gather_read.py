"""The scatter a stencil nest's reverse was emitted as, read back (``ast``) and classified:
its loops (``_read_nest``) and its body's statements (``_Plan``: names set once per iteration,
element accumulations at loop variable plus constant, zeroings, scalar sums), from which
ad/gather.py writes the gather, or None where the body has another shape. Adjoints summed
within one iteration are first written as a name per version (``_Plan._versions``)."""

import ast
import copy

from numba import types as nbt

_PURE_MODULES = {"_math", "math", "_np", "np"}
_PURE_NAMES = {"abs", "min", "max", "float", "int"}


class _Nest:
    def __init__(self):
        self.vars, self.starts, self.counts, self.js = [], [], [], []
        self.body = []        # prefix (outer level) + innermost statements, in order
        self.pops = []        # the inner trip count's pop after each inner loop: (k, tape, n)


def _read_nest(stmts, depth):
    """The loop variables, starts, trip counts and body of the emitted reverse nest
    (``codegen.stmt_rev_body``: ``_jN = _nN - 1; while _jN >= 0: var = start + _jN ...``)."""
    nest = _Nest()
    level = stmts
    for d in range(depth):
        if len(level) < 2 or not _is_counter_init(level[0]) or not isinstance(level[1], ast.While):
            return None
        j, n = level[0].targets[0].id, level[0].value.left.id
        loop = level[1]
        t = loop.test
        if not (isinstance(t, ast.Compare) and _is_name(t.left, j) and isinstance(t.ops[0], ast.GtE)
                and _is_const(t.comparators[0], 0)) or loop.orelse:
            return None
        rest = level[2:]
        if d == 0 and rest:
            return None
        if d > 0:
            pops = rest
            if pops:
                if len(pops) != 2 or not _is_pop(pops, n):
                    return None
                nest.pops = [(pops[0].target.id, pops[1].value.value.id, n)]
        b = loop.body
        if not b or not _is_var_init(b[0], j) or not _is_decrement(b[-1], j):
            return None
        var, start = b[0].targets[0].id, b[0].value
        nest.vars.append(var)
        nest.starts.append("0" if _is_name(start, j) else ast.unparse(start.left))
        nest.counts.append(n)
        nest.js.append(j)
        inner = b[1:-1]
        if d + 1 < depth:
            k = next((i for i, x in enumerate(inner) if _is_counter_init(x)), None)
            if k is None:
                return None
            nest.body += inner[:k]
            level = inner[k:]
            # after the inner while: its pops, then nothing else of the outer iteration
            w = next((i for i, x in enumerate(level) if isinstance(x, ast.While)), None)
            if w != 1:
                return None
        else:
            nest.body += inner
    return nest


def _is_name(e, name=None):
    return isinstance(e, ast.Name) and (name is None or e.id == name)


def _is_const(e, value):
    return isinstance(e, ast.Constant) and type(e.value) is type(value) and e.value == value


def _is_counter_init(x):
    return (isinstance(x, ast.Assign) and len(x.targets) == 1 and _is_name(x.targets[0])
            and isinstance(x.value, ast.BinOp) and isinstance(x.value.op, ast.Sub)
            and _is_name(x.value.left) and _is_const(x.value.right, 1)
            and x.targets[0].id.startswith("_j") and x.value.left.id.startswith("_n"))


def _is_var_init(x, j):
    if not (isinstance(x, ast.Assign) and len(x.targets) == 1 and _is_name(x.targets[0])):
        return False
    v = x.value
    if _is_name(v, j):
        return True
    return (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add) and _is_name(v.right, j)
            and isinstance(v.left, (ast.Name, ast.Constant)))


def _is_decrement(x, j):
    return (isinstance(x, ast.AugAssign) and _is_name(x.target, j) and isinstance(x.op, ast.Sub)
            and _is_const(x.value, 1))


def _is_pop(pops, n):
    a, b = pops
    return (isinstance(a, ast.AugAssign) and _is_name(a.target) and isinstance(a.op, ast.Sub)
            and _is_const(a.value, 1) and isinstance(b, ast.Assign) and len(b.targets) == 1
            and _is_name(b.targets[0], n) and isinstance(b.value, ast.Subscript)
            and _is_name(b.value.value) and _is_name(b.value.slice, a.target.id))


def _pure(e):
    """Whether expression ``e`` has no effect and calls nothing but math: what may be evaluated
    again, in another order, for another iteration."""
    for x in ast.walk(e):
        if isinstance(x, ast.Call):
            f = x.func
            ok = (isinstance(f, ast.Attribute) and _is_name(f.value) and f.value.id in _PURE_MODULES) \
                or (_is_name(f) and f.id in _PURE_NAMES)
            if not ok or x.keywords:
                return False
        elif isinstance(x, (ast.Slice, ast.Starred, ast.Lambda, ast.NamedExpr, ast.Await,
                            ast.Yield, ast.YieldFrom, ast.ListComp, ast.GeneratorExp,
                            ast.DictComp, ast.SetComp, ast.JoinedStr, ast.List, ast.Dict, ast.Set)):
            return False
    return True


def _index(sub):
    """The index of a subscript as a list of its parts (names or constants), or None."""
    s = sub.slice
    parts = list(s.elts) if isinstance(s, ast.Tuple) else [s]
    return parts if all(isinstance(p, (ast.Name, ast.Constant)) for p in parts) else None


class _Site:
    def __init__(self, array, offsets, expr, sign, position):
        self.array, self.offsets, self.expr, self.sign = array, offsets, expr, sign
        self.position = position      # its statement's place in the body (for its slice)


class _Plan:
    """The classified body of one nest and the gather written from it."""

    @classmethod
    def of(cls, gen, nest, sid):
        p = cls()
        p.gen, p.nest = gen, nest
        p._versions(sid)
        return p if p._classify() else None

    def _versions(self, sid):
        """Rewrite in ``nest.body`` each adjoint that one iteration sums (``+=``) as a name per
        version, set once and read after it is set, as the gather needs: ``d_u = a; d_u += b``
        becomes ``_v1_0 = a; _v1_1 = _v1_0 + b``, and reads of ``d_u`` read the version before
        them. Two shapes begin anew in each iteration: an accumulator first assigned there
        (``d_u = a``), and one summed from zero and taken out (``_d6_ += a; _g = _d6_;
        _d6_ = -0.0``: the adjoint of a value the iteration uses twice). The second is zero when
        an iteration begins (the previous one took it out), except perhaps in the scatter's first
        iteration: those names are kept in ``entry_zero``, and the gather runs only where they
        are zero when the loop begins (a guard in ``emit``). ``leftover``: each rewritten name's
        value after an iteration (the last version, or the zero it was reset to)."""
        body = self.nest.body
        summed = [x.target.id for x in body if isinstance(x, ast.AugAssign)
                  and _is_name(x.target) and isinstance(x.op, (ast.Add, ast.Sub))]
        self.entry_zero, self.leftover, count = [], {}, 0
        for name in dict.fromkeys(summed):
            if name in self.nest.vars or self._type(name) != nbt.float64:
                continue
            new, cur, first, last = [], None, None, None
            for x in body:
                loads = [y for y in ast.walk(x) if isinstance(y, ast.Name) and y.id == name
                         and isinstance(y.ctx, ast.Load)]
                aug = isinstance(x, ast.AugAssign) and _is_name(x.target, name) \
                    and isinstance(x.op, (ast.Add, ast.Sub))
                assign = isinstance(x, ast.Assign) and len(x.targets) == 1 \
                    and _is_name(x.targets[0], name)
                stores = [y for y in ast.walk(x) if isinstance(y, ast.Name) and y.id == name
                          and not isinstance(y.ctx, ast.Load)]
                if stores and not (aug or assign) or loads and cur is None:
                    break           # set otherwise, or read where it is zero: left as it is
                if not (loads or aug or assign):
                    new.append(x)
                    continue
                if first is None:
                    first = "sum" if aug else "set"
                if assign and _is_zero(x.value):
                    cur, last = None, x.value
                    continue
                x = _Rename(name, cur).visit(copy.deepcopy(x)) if loads else x
                if aug or assign:
                    v = _own(self.gen, f"_v{sid}_{count}")
                    count += 1
                    value = x.value
                    if aug and cur is not None:
                        value = ast.BinOp(ast.Name(cur, ast.Load()), x.op, x.value)
                    elif aug and isinstance(x.op, ast.Sub):
                        value = ast.UnaryOp(ast.USub(), x.value)
                    x = ast.fix_missing_locations(
                        ast.Assign([ast.Name(v, ast.Store())], value, lineno=1))
                    cur = v
                new.append(x)
            else:
                if first is None or first == "sum" and cur is not None:
                    continue        # summed into what the last iteration left: a real carry
                body[:] = new
                if first == "sum":
                    self.entry_zero.append(name)
                self.leftover[name] = cur if cur is not None else ast.unparse(last)
        return self.entry_zero

    def _classify(self):
        nest = self.nest
        depth = len(nest.vars)
        self.defs = {}            # name -> position of its one assignment
        self.sites = []           # element accumulations
        self.zeros = []           # (array, position) zeroed at the iteration's own element
        self.scalars = []         # (name, expr, sign, position)
        loaded_arrays = []        # (array, index parts) read anywhere but in an accumulation
        for pos, x in enumerate(nest.body):
            if isinstance(x, ast.Assign) and len(x.targets) == 1 and _is_name(x.targets[0]):
                name = x.targets[0].id
                if name in self.defs or name in nest.vars or not _pure(x.value):
                    return False
                self.defs[name] = pos
                loaded_arrays += _subscripts(x.value)
            elif isinstance(x, ast.Assign) and len(x.targets) == 1 \
                    and isinstance(x.targets[0], ast.Subscript) and _is_name(x.targets[0].value):
                tgt = x.targets[0]
                idx = _index(tgt)
                if idx is None:
                    return False
                v = x.value
                if _is_const(v, 0.0):
                    self.zeros.append((tgt.value.id, idx, pos))
                elif isinstance(v, ast.BinOp) and isinstance(v.op, (ast.Add, ast.Sub)) \
                        and isinstance(v.left, ast.Subscript) \
                        and ast.dump(v.left) == ast.dump(ast.Subscript(tgt.value, tgt.slice, ast.Load())) \
                        and _pure(v.right):
                    self.sites.append(_Site(tgt.value.id, idx, v.right,
                                            "+" if isinstance(v.op, ast.Add) else "-", pos))
                    loaded_arrays += _subscripts(v.right)
                else:
                    return False
            elif isinstance(x, ast.AugAssign) and _is_name(x.target) \
                    and isinstance(x.op, (ast.Add, ast.Sub)) and _pure(x.value):
                self.scalars.append((x.target.id, x.value,
                                     "+" if isinstance(x.op, ast.Add) else "-", pos))
                loaded_arrays += _subscripts(x.value)
            else:
                return False
        # no value carried from one iteration to the next: a name is read only after it is set
        seen = set()
        for pos, x in enumerate(nest.body):
            for name in _loaded_names(x):
                if name in self.defs and name not in seen:
                    return False
            if isinstance(x, ast.Assign) and _is_name(x.targets[0]):
                seen.add(x.targets[0].id)
        acc_names = {a for a, _, _, _ in self.scalars}
        if acc_names & set(self.defs) or any(a in nest.vars for a in acc_names):
            return False
        for x in nest.body:
            if acc_names & _loaded_names(x, skip_aug_target=True):
                return False
        for name in acc_names:
            if self._type(name) != nbt.float64:
                return False
        # element accumulations: full-rank float64 adjoint arrays at loop variable + constant
        written = {s.array for s in self.sites}
        zeroed = {a for a, _, _ in self.zeros}
        if written & zeroed or written & set(self.defs) or zeroed & set(self.defs):
            return False
        for site in self.sites:
            offs = [self._affine(p) for p in site.offsets]
            if any(o is None for o in offs) or [k for k, _ in offs] != list(range(depth)):
                return False
            site.offsets = [c for _, c in offs]
            t = self._type(site.array)
            if not (isinstance(t, nbt.Array) and t.ndim == depth and t.dtype == nbt.float64):
                return False
        for array, idx, _ in self.zeros:
            if [self._affine(p) for p in idx] != [(k, 0) for k in range(depth)]:
                return False
        self.read = []
        for array, idx in loaded_arrays:
            if array in written:
                return False
            if array in zeroed and [self._affine(p) for p in idx] != [(k, 0) for k in range(depth)]:
                return False
            if array not in self.read:
                self.read.append(array)
        for array in sorted(zeroed) + self.read + sorted(written):
            t = self._type(array)
            if t is None:
                return False
            # C layout only: with strides known at run time alone (layout A, F) LLVM emits no
            # vector code for the gather, which then ran at half the scatter's speed
            # (docs/numba-internals.md)
            if isinstance(t, nbt.Array) and t.layout != "C":
                return False
        # Constant starts, and no gathered index below zero: where the scatter writes x[i - 1]
        # at i = 0 it means Python's x[-1], which the gather would not.
        if not all(x.lstrip("-").isdigit() for x in nest.starts):
            return False
        for site in self.sites:
            if any(int(nest.starts[k]) + site.offsets[k] < 0 for k in range(depth)):
                return False
        if self.scalars and any(int(x) < 0 for x in nest.starts):
            return False
        # Worth it where the scatter carries a dependence that the gather removes: a neighbour
        # written. Scalars are summed in lanes in a 2-D nest; in a single loop they would keep
        # their chain (measured: the 1-D wave's reverse, one sum and two arrays, gained nothing).
        if not any(any(site.offsets) for site in self.sites):
            return False
        return depth == 2 or not self.scalars

    def _type(self, name):
        gen = self.gen
        if name in gen.names.adj.values():
            name = gen.names.primal_of(name)
        return gen.types.get(name)

    def _affine(self, part):
        """``(k, c)``: ``part`` is loop variable ``k`` plus ``c``; else None."""
        vars_ = self.nest.vars
        if _is_name(part) and part.id in vars_:
            return vars_.index(part.id), 0
        if not _is_name(part) or part.id not in self.defs:
            return None
        e = self.nest.body[self.defs[part.id]].value
        if not isinstance(e, ast.BinOp) or not isinstance(e.op, (ast.Add, ast.Sub)):
            return None
        a, b = e.left, e.right
        if _is_name(a) and a.id in vars_ and isinstance(b, ast.Constant) and type(b.value) is int:
            return vars_.index(a.id), (b.value if isinstance(e.op, ast.Add) else -b.value)
        if isinstance(e.op, ast.Add) and _is_name(b) and b.id in vars_ \
                and isinstance(a, ast.Constant) and type(a.value) is int:
            return vars_.index(b.id), a.value
        return None

    # --- writing ---


def _own(gen, name):
    """The gather's name ``name`` (``_m1_0``: its loop id in it), or ``name`` with underscores
    appended where the kernel already has a name so spelt (a user's variable, a temporary of the
    reverse): the gather's statements are mixed with the body's, whose names must keep their
    values (fuzz seed 56000 #3: the gather's sum was ``_g1``, which the body's ``_g1 = _d41_``
    overwrote). The same answer for the same name in one kernel (a nest's text may be written
    twice: a trial, then the kernel)."""
    mine = gen.__dict__.setdefault("gather_names", {})
    if name not in mine:
        own = name
        while own in gen.names.taken:
            own += "_"
        gen.names.taken.add(own)
        mine[name] = own
    return mine[name]


def _is_zero(e):
    """``0.0`` or ``-0.0``."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        e = e.operand
    return _is_const(e, 0.0)


class _Rename(ast.NodeTransformer):
    """Reads of one name replaced by another."""

    def __init__(self, old, new):
        self.old, self.new = old, new

    def visit_Name(self, node):
        if node.id == self.old and isinstance(node.ctx, ast.Load):
            return ast.Name(self.new, ast.Load())
        return node


def _subscripts(e):
    """(array, index parts) of the element reads in ``e``."""
    found = []
    for x in ast.walk(e):
        if isinstance(x, ast.Subscript) and _is_name(x.value):
            found.append((x.value.id, _index(x) or []))
    return found


def _names_in(e):
    return {x.id for x in ast.walk(e) if isinstance(x, ast.Name)}


def _loaded_names(stmt, skip_aug_target=False):
    names = set()
    for x in ast.walk(stmt):
        if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Load):
            names.add(x.id)
    if isinstance(stmt, ast.AugAssign) and not skip_aug_target:
        names.add(stmt.target.id)
    return names
