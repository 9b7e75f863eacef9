"""The adjoint variables: their zeros, their declarations, and the tangents a kernel returns.

An adjoint is a float for a float, an array of the array's shape for an array, and a tuple or a
``Tangent[S]`` of those for a tuple or a struct (``AdjointVariables``, a mixin of
``codegen._Gen``).
"""

from numba import types as nbt

from ..errors import UnsupportedSyntaxError
from ..structs import Tangent
from . import ir
from .kinds import holds_arrays, is_aggregate, is_float, is_float_array, is_float_struct
from .dataflow import part_of, stmt_reads, view_base
from .dataflow import where as where_in


class AdjointVariables:
    """Zeros, declarations and returned tangents of the adjoints (a mixin of codegen._Gen)."""

    def zero(self, t):
        """A typed zero of a primal scalar (or tuple of scalars): for variables a path may leave
        unset, and for float adjoints."""
        if isinstance(t, nbt.BaseTuple) and not isinstance(t, nbt.BaseNamedTuple) \
                and all(self.zero(e) for e in t):
            return "(" + "".join(f"{self.zero(e)}, " for e in t) + ")"
        if isinstance(t, nbt.Float):
            return "0.0" if t == nbt.float64 else f"_np.{t}(0.0)"
        if isinstance(t, nbt.Boolean):
            return "False"
        if isinstance(t, nbt.Integer):
            return "0" if t == nbt.int64 else f"_np.{t}(0)"
        return None

    @staticmethod
    def empty_of(t, fn, s):
        """An empty array of type ``t`` (its layout too: Numba unifies the two bindings only
        if the layouts agree)."""
        if not t.mutable:
            raise UnsupportedSyntaxError(
                f"the read-only array '{s.target}' ({t}) first bound inside a loop or a branch "
                f"and rebound\n{where_in(fn, s.line)}\n"
                f"Hint: bind it once before the loop (v = np.empty_like(...)) or copy it.")
        empty = f"_np.empty(({'0, ' * t.ndim}), _np.{t.dtype})"
        if t.layout == "F":       # .T of a C array; a 1-d F array is a column of one
            return f"_np.empty((1, 0), _np.{t.dtype}).T[:, 0]" if t.ndim == 1 else f"{empty}.T"
        if t.layout == "A":       # a strided slice
            return f"{empty}[{', '.join(['::-1'] * t.ndim)}]"
        return empty

    def reset_zero(self, t):
        """The value a scalar adjoint restarts from when its variable is written again: -0.0,
        the exact identity of +, so that LLVM folds ``d = -0.0; d += g`` to ``d = g``. With
        +0.0 it may not (+0.0 + -0.0 is +0.0), and the add stays on the loop-carried chain of
        every accumulating loop (measured 4 ms of 33 on the logsumexp benchmark)."""
        if isinstance(t, nbt.Float):
            return "-0.0" if t == nbt.float64 else f"_np.{t}(-0.0)"
        if is_aggregate(t):
            return self.tangent_zero(t, "", set(), "")      # no arrays inside: static
        return self.zero(t) or "0.0"

    def seed_result(self, v):
        """The cotangent of the result enters the sweep. An array result that shares its
        adjoint with another array (a view of an argument, an alias, a struct's field), or whose
        elements the function writes, takes it in place: assigning would cut the view's tie to
        its base, and the element adjoints would then write into the caller's cotangent."""
        t = self.types.get(v)
        written = any(isinstance(s, ir.Store) and self.plan.alias_of.get(s.array, s.array)
                      == self.plan.alias_of.get(v, v) for s in ir.walk(self.fn.body))
        shared = v in self.plan.alias_of or v in set(self.plan.alias_of.values())
        if is_float_array(t) and (shared or v in self.fn.params or written or v in self.sourced):
            return f"_iadd({self.names.d(v)}, _dout)"
        if holds_arrays(t):
            return f"{self.names.d(v)} = _tadd({self.names.d(v)}, _dout)"
        return f"{self.names.d(v)} = _dout"

    def tangent_class(self, t):
        """The namespace name of Tangent[S] for a struct type (kernels puts it there)."""
        cls = Tangent[t.instance_class]
        name = f"_Tangent_{t.instance_class.__name__}"
        self.tangent_classes[name] = cls
        return name

    def aggregate_of(self, t, parts):
        """The expression building a tangent of aggregate type ``t`` from ``parts``."""
        if is_float_struct(t):
            return f"{self.tangent_class(t)}({', '.join(parts)})"
        return "(" + "".join(p + ", " for p in parts) + ")"

    def tangent_zero(self, t, path, reads, root):
        """A zero tangent for a value of type ``t`` found at ``path`` (arrays need it: their
        zeros take its shape; ``root`` is the variable it starts from)."""
        if is_float(t):
            return self.zero(t)
        if is_float_array(t):
            reads.add(root)
            return f"_zeros_like({path})"
        if is_aggregate(t):
            return self.aggregate_of(t, [self.tangent_zero(e, f"{path}[{k}]", reads, root)
                                         for k, e in enumerate(t)])
        return "None"

    def with_part(self, v, t, k, value):
        """The adjoint of aggregate ``v`` with part ``k`` replaced by ``value``."""
        d = self.names.d(v)
        return self.aggregate_of(t, [value if j == k else f"{d}[{j}]" for j in range(len(t))])

    def adjoint_header(self, reads):
        """Zero adjoints: aggregates (structs, tuples), then one array per alias class (b = a
        shares a's), then, in program order, the adjoints that are parts of others, then the
        scalars."""
        plan, d = self.plan, self.names.d
        header = []
        scalars = sorted(v for v in plan.active if is_float(self.types.get(v)))
        arrays = sorted(v for v in plan.active if is_float_array(self.types.get(v)))
        for v in sorted(plan.active):
            t = self.types.get(v)
            if is_aggregate(t) and v not in self.built and v not in self.sourced:
                header.append(f"{d(v)} = {self.tangent_zero(t, v, reads, v)}")
        rebound = plan.rebound or {}
        for v in arrays:
            if v in self.sourced or v in self.forwarded:
                continue        # bound below / assigned by its single reader
            if v in rebound:
                # one adjoint per array, whichever names hold it now (names sort first)
                header.append(self.adjoint_lookup(v, tuple(m for m in rebound[v] if m < v
                                                           and m not in self.forwarded)))
                reads.update(m for m in rebound[v] if m < v)
                reads.add(v)
            elif plan.alias_of.get(v, v) == v:
                header.append(f"{d(v)} = _zeros_like({v})")
                reads.add(v)
        # Then in program order, each bound to its source's adjoint so that writes through either
        # array reach both: aliases and views (a view to the same view of it), the fields and
        # items of aggregates, and aggregates built here (holding the very arrays they were
        # built from).
        # A view of a view taken again in the reverse pass (lazy) is itself such a view when
        # it is used (array_names._lazy_views counts its uses as its base's); unused, its adjoint
        # is never read and has nothing to be bound to here (seed 20261532 #1592).
        unbound = set(plan.lazy_views or {})
        for s in ir.walk(self.fn.body):
            v = s.target if isinstance(s, ir.Assign) and s.target in plan.active else None
            if v is not None and is_float_array(self.types.get(v)) \
                    and view_base(s.expr, self.types) in unbound:
                unbound.add(v)
                continue
            if v in self.built:
                header.append(f"{d(v)} = {self.built_tangent(s, reads)}")
            elif v in self.sourced:
                src, k = self.sourced[v]
                header.append(f"{d(v)} = {d(src)}" + ("" if k is None else f"[{k}]"))
            elif v is not None and is_float_array(self.types.get(v)) and v not in rebound \
                    and plan.alias_of.get(v, v) != v and v not in (plan.loop_views or {}) \
                    and v not in (plan.lazy_views or {}):
                header.append(f"{d(v)} = {self.adjoint_view(s, reads)}")
        header += [f"{d(v)} = {self.zero(self.types[v])}" for v in scalars]
        return header

    def built_tangent(self, s, reads):
        """The tangent of an aggregate built here: array parts (and parts holding arrays) share
        the adjoints of what was passed in; the rest start at zero (the constructor's adjoint
        hands them back)."""
        t = self.types[s.target]
        items = s.expr.items if isinstance(s.expr, ir.MakeTuple) else s.expr.args
        parts = []
        for k, (a, e) in enumerate(zip(items, t)):
            if (is_float_array(e) or holds_arrays(e)) and isinstance(a, ir.Name) \
                    and a.id in self.plan.active:
                parts.append(self.names.d(a.id))
            else:
                parts.append(self.tangent_zero(e, f"{s.target}[{k}]", reads, s.target))
        return self.aggregate_of(t, parts)

    def adjoint_view(self, s, reads):
        """The adjoint of ``s.target`` as a view of its source's adjoint."""
        d, e = self.names.d, s.expr
        if isinstance(e, ir.Atom):
            return d(e.a.id)
        if isinstance(e, ir.Index):
            reads.update(a.id for a in ir.index_atoms(e.index) if isinstance(a, ir.Name))
            return f"{d(e.a.id)}[{', '.join(i.src() for i in e.index)}]"
        if isinstance(e, ir.Attr) or e.name == "transpose":
            return f"{d(e.a.id if isinstance(e, ir.Attr) else e.obj.id)}.T"
        reads.add(s.target)      # reshape, ravel
        return f"{d(e.obj.id)}.reshape({s.target}.shape)"

    def tangents(self, reads):
        tangents = []
        for p, m in zip(self.fn.params, self.mask):
            t = self.types.get(p)
            d = self.names.d(p)
            if not m or not (is_float(t) or is_float_array(t) or is_aggregate(t)):
                tangents.append("None")
            elif p in self.plan.active:
                # Scalar tangents have the argument's own type (the vjp declares it).
                # A reassigned argument's adjoint restarts at -0.0 (reset_zero); + 0.0 makes
                # a tangent that received nothing +0.0 again.
                z = " + 0.0" if self.sites.get(p) else ""
                tangents.append(d if is_float_array(t) or is_aggregate(t) else
                                (f"float({d}{z})" if t == nbt.float64 else f"_np.{t}({d}{z})"))
            elif is_aggregate(t):
                tangents.append(self.tangent_zero(t, p, reads, p))
            elif is_float_array(t):
                tangents.append(f"_zeros_like({p})")
                reads.add(p)
            else:
                tangents.append(self.zero(t))
        return tangents


def forwardable(fn, types, plan):
    """Scalar adjoints that can be assigned rather than accumulated.

    A float variable with one assignment and one reading statement, both in the same block,
    receives exactly one contribution per definition: the reader's. Its adjoint is then
    assigned by the reader (``_d9 = _g * a``), and its definition needs no reset. This removes
    the ``0.0 + g`` additions LLVM may not fold (signed zeros) from nearly every temporary.
    Returns (names, {id(reader): names}).
    """
    block, readers, sites = {}, {}, {}

    def visit(stmts, k):
        for s in stmts:
            block[id(s)] = k
            for name in stmt_reads(s):
                readers.setdefault(name, []).append(s)
            if isinstance(s, ir.Assign):
                sites.setdefault(s.target, []).append(s)
            if isinstance(s, ir.If):
                visit(s.body, id(s.body))
                visit(s.orelse, id(s.orelse))
            elif isinstance(s, ir.For):
                sites.setdefault(s.var, []).append(s)
                visit(s.body, id(s.body))
            elif isinstance(s, ir.While):
                visit(s.cond, id(s.cond))
                visit(s.body, id(s.body))

    visit(fn.body, id(fn.body))
    aliased = set(plan.alias_of) | set(plan.alias_of.values())
    names, by_reader = set(), {}
    for v, rs in readers.items():
        t = types.get(v)
        # Arrays too (a temporary array's adjoint assigned, not zeros plus an add), unless it
        # shares its adjoint with an alias.
        if v not in plan.active or v in fn.params or not (
                is_float(t) or is_float_array(t) and v not in aliased):
            continue
        unique = {id(r): r for r in rs}
        if len(unique) != 1 or len(sites.get(v, ())) != 1:
            continue
        reader = next(iter(unique.values()))
        if block[id(reader)] != block[id(sites[v][0])] or not isinstance(reader, (ir.Assign, ir.Store)):
            continue
        if is_float_array(t) and not (isinstance(reader, ir.Assign)
                                      and not isinstance(reader.expr, ir.Index)
                                      and getattr(plan.calls.get(id(reader.expr)), "kind", None) != "struct"
                                      and not isinstance(reader.expr, ir.MakeTuple)
                                      and part_of(sites[v][0].expr, types) is None):
            continue      # element-wise contributions (d[i] += g) accumulate; field aliases too
        names.add(v)
        by_reader.setdefault(id(reader), set()).add(v)
    return names, by_reader
