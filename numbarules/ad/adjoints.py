"""Adjoint templates: the reverse of one statement, an operation or a call, as source lines.

Each template reads the adjoint ``g`` of the statement's result and adds its contributions to the
operands' adjoints (``d_a += g * b``); ``Adjoints`` is the part of the code generator
(``codegen._Gen``) that picks the template for a statement (``adjoint``, ``call_adjoint``) and
seeds the adjoints.
The pure per-operation rules (``_binop_adjoint``, ``_quotient_adjoint``, ``_matmul_adjoint``) and
the shape checks of a rule's tangents are module functions.
"""

from numba import types as nbt

from . import ir, partials
from .kinds import (holds_arrays, is_aggregate, is_float, is_float_array, is_float_struct,
                    is_float_tuple)


class Adjoints:
    """The statement templates of the reverse sweep (a mixin of codegen._Gen)."""

    def seed(self, s, out):
        """The adjoint flowing into ``s``'s target; reset it when the target is written again."""
        if self.seed_as:
            return self.seed_as
        d = self.names.d(s.target)
        if s.target in self.forwarded:
            return d         # assigned afresh by its single reader, just before in this sweep
        t = self.types.get(s.target)
        if is_float_array(t) or holds_arrays(t):
            return d         # bound once (their arrays are shared): their adjoints are never reset
        # A parameter is written once before the body runs: a write in the body is its second.
        writes = len(self.sites.get(s.target, ())) + (s.target in self.fn.params)
        if writes > 1 or id(s) in self.plan.in_loop:
            g = self.names.fresh("_g")
            out.add(f"{g} = {d}")
            out.add(f"{d} = {self.reset_zero(self.types[s.target])}")
            return g
        return d

    def adjoint(self, s, out):
        e, plan = s.expr, self.plan
        act = lambda a: isinstance(a, ir.Name) and a.id in plan.active   # noqa: E731
        d = self.names.d

        def src(a):
            if isinstance(a, ir.Name):
                out.read(a.id)
            return a.src()

        # Taken (and reset) even when no operand is active: an overwritten variable's adjoint
        # must not leak into its previous value (c = 0.0 inside a loop).
        g = self.seed(s, out)
        t = self.types.get(s.target)
        if isinstance(e, ir.Atom):
            if act(e.a) and is_aggregate(t):
                out.add(f"{d(e.a.id)} = _tmerge({d(e.a.id)}, {g})")
                self.release_part(s, out)
            elif act(e.a) and not is_float_array(t):
                out.add(f"{d(e.a.id)} += {g}")
        elif isinstance(e, ir.MakeTuple):
            self.hand_back(e.items, t, g, out, act)
        elif isinstance(e, ir.BinOp) and id(e) in plan.quotients:
            for line in _quotient_adjoint(e.a, e.b, src(ir.Name(s.target)), src, g, d):
                out.add(line)
        elif isinstance(e, ir.BinOp):
            for line in _binop_adjoint(e.op, e.a, e.b, act, src, g,
                                       self.accumulator(t, d, src), self.rank):
                out.add(line)
        elif isinstance(e, ir.UnaryOp):
            if act(e.a) and e.op == "-":
                out.add(f"{d(e.a.id)} -= {g}")
        elif isinstance(e, ir.Index):
            ta = self.types.get(e.a.id) if isinstance(e.a, ir.Name) else None
            if act(e.a) and is_float_tuple(ta) and not isinstance(e.index[0], ir.Const):
                out.add(f"{d(e.a.id)} = _tadd_at({d(e.a.id)}, {src(e.index[0])}, {g})")
            elif act(e.a) and is_float_tuple(ta):
                self.part_adjoint(s, e.a.id, ta, e.index[0].value, g, out)
            elif act(e.a) and s.target not in self.views:   # a view shares its base's adjoint
                idx = ", ".join(src(i) for i in e.index)
                out.add(f"{d(e.a.id)}[{idx}] += {g}")
        elif isinstance(e, ir.Attr):
            ts = self.types.get(e.a.id) if isinstance(e.a, ir.Name) else None
            if act(e.a) and is_float_struct(ts):
                self.part_adjoint(s, e.a.id, ts, ts.instance_class._fields.index(e.attr), g, out)
        elif isinstance(e, ir.MethodCall):
            if e.name == "copy" and act(e.obj):
                out.add(f"{d(e.obj.id)} += {g}")
            elif e.name in ("ravel", "flatten") and act(e.obj) and s.target not in self.views:
                out.add(f"{d(e.obj.id)} += {g}.reshape({src(e.obj)}.shape)")
        elif isinstance(e, ir.Call):
            self.call_adjoint(s, e, out, act, src, g)

    def part_adjoint(self, s, v, tv, k, g, out):
        """The adjoint of reading part ``k`` of aggregate ``v`` (a field, a constant index): a
        float hands its adjoint to that part; an array shares it already (adjoint_header); an
        aggregate hands its floats back (its arrays are shared)."""
        t = self.types.get(s.target)
        d = self.names.d(v)
        if is_float(t):
            out.add(f"{d} = {self.with_part(v, tv, k, f'{d}[{k}] + {g}')}")
        elif is_aggregate(t):
            out.add(f"{d} = {self.with_part(v, tv, k, f'_tmerge({d}[{k}], {g})')}")
            self.release_part(s, out)

    def release_part(self, s, out):
        """After an aggregate bound to a part of another handed its floats back, they restart at
        zero where the statement runs again (in a loop); its arrays stay shared."""
        if s.target in self.sourced and id(s) in self.plan.in_loop:
            d = self.names.d(s.target)
            out.add(f"{d} = _tfloats_zeroed({d})")

    def hand_back(self, items, t, g, out, act):
        """The adjoint of building aggregate ``t`` from ``items``: each item gets its part back
        (arrays, shared with the built tangent, have it already)."""
        d = self.names.d
        for k, a in enumerate(items):
            if not act(a) or is_float_array(self.types.get(a.id)):
                continue
            if is_aggregate(self.types.get(a.id)):
                out.add(f"{d(a.id)} = _tmerge({d(a.id)}, {g}[{k}])")
            else:
                out.add(f"{d(a.id)} += {g}[{k}]")

    def rank(self, x):
        t = self.types.get(x.id) if isinstance(x, ir.Name) else None
        return t.ndim if is_float_array(t) or isinstance(t, nbt.Array) else 0

    def accumulator(self, result_type, d, src):
        """How a contribution reaches operand x of an operation whose result has
        ``result_type``: summed over the axes NumPy broadcast x along, if any."""
        def acc(x, sign, expr):
            if is_float_array(result_type):
                # A scalar operand was broadcast everywhere; an array one may have been too,
                # even at the same rank (a (1, n) row against (m, n)): _ub returns its input
                # unchanged when the shapes agree.
                expr = f"_np.sum({expr})" if self.rank(x) == 0 else f"_ub({expr}, {src(x)})"
            return f"{d(x.id)} {sign}= {expr}"
        return acc

    def call_adjoint(self, s, e, out, act, src, g):
        d = self.names.d
        cp = self.calls[id(e)]
        if cp.kind in ("alloc", "nondiff") or not any(act(a) for a in e.args):
            return
        if cp.kind == "full":
            if act(e.args[1]):
                out.add(f"{d(e.args[1].id)} += _np.sum({g})")
            return
        if cp.kind == "identity":
            out.add(f"{d(e.args[0].id)} += {g}")
            return
        if cp.kind == "struct":
            # fields hand their tangent back; array fields share it (see built_tangent)
            self.hand_back(e.args, self.types.get(s.target), g, out, act)
            return
        args = [src(a) for a in e.args]
        if cp.kind == "scalar":
            extra = [s.target] if cp.with_result else []
            if cp.with_result:
                out.read(s.target)
            pv = self.names.fresh("_p") if cp.inline is None else None
            if pv is not None:
                out.add(f"{pv} = {cp.name}({', '.join(args + extra)})")
            for k, a in enumerate(e.args):
                if act(a):
                    p = (f"{pv}[{k}]" if cp.inline is None else
                         partials.factor(cp.inline, k, args + extra))
                    if len(e.args) == 1:   # element-wise of one argument: same shape
                        out.add(f"{d(a.id)} += {g} * {p}")
                    else:
                        out.add(self.accumulator(self.types.get(s.target), d, src)(
                            a, "+", f"{g} * {p}"))
            return
        if cp.kind == "derived":
            # Checkpointing: re-run the callee's forward from its saved inputs, then its pullback
            # (calling the two directly, not the fused vjp, keeps recursive pullbacks typeable).
            r = self.names.fresh("_r")
            if self.device is not None:
                # Device code: the callee's one-function vjp (its tapes live in its own frame);
                # its results are shifted by one (the value first) and it reports its tape need.
                out.add(f"{r} = vjp_{cp.name}({', '.join(args)}, {g})")
                out.add(f"_need = max(_need, {r}[{len(e.args) + 1}])")
                out.add(f"{r} = {r}[1:{len(e.args) + 1}]")
            elif id(e) in self.kept:
                self.changes_residuals |= cp.changes_residuals   # its pullback restores them
                out.read(self.kept[id(e)])
                out.add(f"{r} = bwd_{cp.name}({self.kept[id(e)]}, {g})")
            elif self.rule_site(e):
                site = self.rule_site(e)
                parts = self.taped_residuals(cp)
                if self.fusing:
                    pass
                elif parts is not None:
                    for j in reversed(range(len(parts))):
                        self.pop(out, f"{site}_{j}", parts[j])
                    out.add(f"{site} = ({''.join(f'{site}_{j}, ' for j in range(len(parts)))})")
                else:
                    self.changes_residuals = True
                    out.add(f"{site} = _l{site}.pop()")
                    out.read(f"_l{site}")
                out.add(f"{r} = bwd_{cp.name}({site}, {g})")
            else:
                out.add(f"{r} = bwd_{cp.name}(fwd_{cp.name}({', '.join(args)})[1], {g})")
            for k, a in enumerate(e.args):
                if act(a) and cp.mask[k]:
                    ta = self.types.get(a.id)
                    if cp.checked:
                        # A rule's tangent of the wrong shape could broadcast silently.
                        for line in shape_checks(f"{r}[{k}]", src(a), ta, cp.tangents[k],
                                                 cp.checked, f"tangent {k}"):
                            out.add(line)
                    if is_aggregate(ta):
                        # arrays added in place, floats into a new tangent
                        out.add(f"{d(a.id)} = _tadd({d(a.id)}, {r}[{k}])")
                    else:
                        out.add(f"{d(a.id)} += {r}[{k}]")
            return
        raise AssertionError(cp.kind)


def shape_checks(tangent, arg, arg_type, tangent_type, label, what, messages=None):
    """Lines raising RuleError where an array of ``tangent`` (a rule's output) has another shape
    than the array at the same place of ``arg``: NumPy would broadcast it without a word.
    With ``messages`` (a dict to fill with name -> message, for the namespace): calls of
    ``runtime._rule_shape`` instead (code the reverse mode differentiates again: a rule's vjp;
    the message a global name, as the AD reads no string constants)."""
    if tangent_type is None or isinstance(tangent_type, nbt.NoneType):
        return []
    if is_float_array(arg_type):
        message = f"{label}: {what} has another shape than the argument"
        if messages is not None:
            name = f"_shape_message_{len(messages)}"
            messages[name] = message
            return [f"_shape_ok = _rule_shape({tangent}, {arg}, {name})"]
        return [f"if {tangent}.shape != {arg}.shape:",
                f"    raise _RuleError({message!r}, {tangent}.shape, {arg}.shape)"]
    if is_aggregate(arg_type) and isinstance(tangent_type, nbt.BaseTuple):
        names = getattr(getattr(arg_type, "instance_class", None), "_fields", None)
        return [line for k, (a, t) in enumerate(zip(arg_type, tangent_type))
                for line in shape_checks(f"{tangent}[{k}]", f"{arg}[{k}]", a, t, label,
                                         f"{what} ({names[k] if names else k})", messages)]
    return []


def _quotient_adjoint(a, b, q, src, g, d):
    """Lines for the adjoint of the scalar ``q = a / b`` (b active; a active or a float constant),
    written with the quotient: d_a = g / b, d_b = -(g / b) q = -g q q / a. Divisions cost 4-5x a
    multiplication; this takes one where the textbook form takes two (a active) or none where it
    takes one (a = 1.0: 1 / r in pair potentials)."""
    if isinstance(a, ir.Const):
        c = a.value
        if c == 0.0:
            return []       # 0 / b is constant (b != 0); at b == 0 the value is already nan
        scaled = f"{g} * ({q} * {q})" if c == 1.0 else f"{g} * ({q} * {q}) / {c!r}"
        return [f"{d(b.id)} -= {scaled}"]
    return [f"_q = {g} / {src(b)}",
            f"{d(a.id)} += _q",
            f"{d(b.id)} -= _q * {q}"]


def _binop_adjoint(op, a, b, act, src, g, acc, ndim):
    """Lines for the adjoint of ``t = a <op> b``; ``acc(x, sign, expr)`` writes one contribution
    (reduced to x's shape when NumPy broadcast it), ``ndim(x)`` is an operand's rank (0: scalar)."""
    lines = []
    if op == "+":
        lines += [acc(x, "+", g) for x in (a, b) if act(x)]
    elif op == "-":
        if act(a):
            lines.append(acc(a, "+", g))
        if act(b):
            lines.append(acc(b, "-", g))
    elif op == "*":
        if act(a):
            lines.append(acc(a, "+", f"{g} * {src(b)}"))
        if act(b):
            lines.append(acc(b, "+", f"{g} * {src(a)}"))
    elif op == "/":
        if act(a):
            lines.append(acc(a, "+", f"{g} / {src(b)}"))
        if act(b):
            lines.append(acc(b, "-", f"{g} * {src(a)} / ({src(b)} * {src(b)})"))
    elif op == "**":
        # JAX's conventions where a formula gives 0 * inf: d/da is 0 where b == 0, and d/db
        # takes log(a) as 0 where a == 0 (runtime._pow_da, _pow_db; element-wise on arrays).
        if act(a):
            if isinstance(b, ir.Const) and b.value == 2:
                lines.append(acc(a, "+", f"{g} * 2.0 * {src(a)}"))
            elif isinstance(b, ir.Const) and b.value != 0:
                lines.append(acc(a, "+", f"{g} * ({b.value!r} * {src(a)} ** {b.value - 1!r})"))
            else:
                lines.append(acc(a, "+", f"{g} * _pow_da({src(a)}, {src(b)})"))
        if act(b):
            lines.append(acc(b, "+", f"{g} * _pow_db({src(a)}, {src(b)})"))
    elif op == "%":
        if act(a):
            lines.append(acc(a, "+", g))
        if act(b):
            floor = "_math.floor" if ndim(a) == 0 and ndim(b) == 0 else "_np.floor"
            lines.append(acc(b, "-", f"{g} * {floor}({src(a)} / {src(b)})"))
    elif op == "@":
        lines += _matmul_adjoint(a, b, act, src, g, acc, ndim)
    elif op == "//":
        pass   # piecewise constant: zero almost everywhere
    return lines


def _matmul_adjoint(a, b, act, src, g, acc, ndim):
    """C = A @ B: dA = dC @ B^T, dB = A^T @ dC, spelled out per rank (vectors have no .T).

    The products with a transpose are runtime's ``_matmul_nt`` / ``_matmul_tn``: BLAS reads the
    transposed operand where it lies (a C-contiguous copy of it first doubled the product's
    time), and Numba's product for a Fortran-ordered operand, a compile of its own, comes from
    Numba's disk cache."""
    na, nb = ndim(a), ndim(b)
    A, B = src(a), src(b)
    if na == 2 and nb == 2:
        da, db = f"_matmul_nt({g}, {B})", f"_matmul_tn({A}, {g})"
    elif na == 2 and nb == 1:
        da, db = f"_np.outer({g}, {B})", f"_matmul_tn({A}, {g})"
    elif na == 1 and nb == 2:
        da, db = f"{B} @ {g}", f"_np.outer({A}, {g})"
    else:
        da, db = f"{g} * {B}", f"{g} * {A}"
    lines = []
    if act(a):
        lines.append(acc(a, "+", da))
    if act(b):
        lines.append(acc(b, "+", db))
    return lines
