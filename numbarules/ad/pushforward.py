"""Forward mode: the tangent (pushforward) kernel of one specialization, as readable source.

``generate(fn, types, active, calls, name, mask)`` writes

    def jvp_<name>(<params>, <tangents of the differentiated params>):
        ...                       # each statement of the normalised primal, followed by the
        ...                       # statement computing its result's tangent
        return (<result>, <its tangent>)

Forward mode needs no tape: every tangent is computed right after the value it is the tangent
of, from the operands' values and tangents, which are still live (the normalised IR never reads
a statement's own target). Control flow is the primal's own. Arrays have tangent arrays: a view
of an array has the same view of its tangent (``d_v = d_x[1:3]``), a store writes the stored
value's tangent at the same index, so aliasing and arrays rebound in loops need nothing more.

Tangents exist for the *active* variables (varied and useful, as for the reverse pass:
``dataflow._activity``); any other operand contributes nothing. An active variable assigned
from inactive operands (``s = 0.0``, ``z = np.zeros(n)``) gets a zero tangent of its type.

Calls are planned by the caller (``tangent_kernels``): a scalar rule's partials, a forward rule
(``nr.frule``), a reverse rule of a scalar result (its pullback at 1.0, dotted with the
tangents), or a callee's own tangent kernel.
"""

from dataclasses import dataclass

from numba import types as nbt

from ..errors import UnsupportedSyntaxError
from . import ir, partials
from .dataflow import where
from .emit import derivative_name
from .kinds import differentiable, is_array, is_float_struct, is_float_tuple
from ..structs import Tangent


@dataclass(frozen=True)
class TangentCall:
    """How the tangent kernel treats one call whose result is active.

    kind: ``struct`` (a struct built: its Tangent from the fields' tangents), ``identity`` (float(x)), ``nondiff`` (zero tangent), ``alloc`` (a new array: zeros),
    ``full`` (np.full(shape, v): np.full(shape, dv)), ``scalar`` (a scalar rule's partials:
    ``name`` the compiled partials or ``inline`` their expressions), ``frule`` (``name`` returns
    the value and its tangent from the arguments and their tangents), ``pullback`` (``name`` is
    the vjp of a reverse rule with a float result), ``derived`` (``name`` is the callee's
    tangent kernel; ``mask`` the arguments it takes tangents of), ``split`` (the primal call,
    then ``name``, the callee's kernel returning the tangent alone)."""
    kind: str
    name: str = None
    with_result: bool = False
    inline: object = None
    mask: tuple = ()
    tangents: tuple = ()        # pullback: the Numba types of the rule's tangents (None: none)


def generate(fn, types, active, calls, name, mask):
    return _Emitter(fn, types, active, calls).kernel(name, mask)


class _Emitter:
    def __init__(self, fn, types, active, calls):
        self.fn, self.types, self.active, self.calls = fn, types, active, calls
        self.taken = set(types) | set(fn.params)
        self.names = {}
        self.uses_math = False
        self.tangent_classes = {}     # namespace name -> Tangent[S], for struct tangents

    # --- names and zeros ----------------------------------------------------------------------

    def d(self, v):
        """The tangent variable of ``v`` (``d_x``; ``_d5`` for the temporary ``_t5``)."""
        name = self.names.get(v)
        if name is None:
            name = self.names[v] = derivative_name(v, self.taken)
        return name

    def fresh(self, base):
        """A new variable name of the kernel's own (``_ex1``, ``_ex2``, ...)."""
        k = 1
        while f"{base}{k}" in self.taken:
            k += 1
        self.taken.add(f"{base}{k}")
        return f"{base}{k}"

    def tangent(self, atom):
        """The tangent of an operand, or None where it has none (inactive, a constant)."""
        if isinstance(atom, ir.Name) and atom.id in self.active:
            return self.d(atom.id)
        return None

    def zero(self, t, like):
        """Source of a zero tangent for a value of type ``t`` (``like``: source of the value)."""
        if is_array(t):
            return f"_np.zeros_like({like})"
        if isinstance(t, nbt.Float):
            return "0.0" if t.bitwidth == 64 else "_np.float32(0.0)"
        if is_float_tuple(t):
            items = [self.zero(e, f"{like}[{k}]") for k, e in enumerate(t)]
            return "(" + "".join(i + ", " for i in items) + ")"
        if is_float_struct(t):
            fields = t.instance_class._nr_fields
            items = [self.zero(e, f"{like}.{name}") for name, e in zip(fields, t)]
            return f"{self.tangent_class(t.instance_class)}({', '.join(items)})"
        return "None"

    def tangent_class(self, struct):
        """The namespace name of ``Tangent[struct]`` (tangent_kernels binds it)."""
        name = f"_Tangent_{struct.__name__}"
        while self.tangent_classes.get(name, Tangent[struct]) is not Tangent[struct]:
            name += "_"
        self.tangent_classes[name] = Tangent[struct]
        return name

    def tangent_or_zero(self, atom):
        found = self.tangent(atom)
        if found is not None:
            return found
        if isinstance(atom, ir.Const):
            return "0.0" if isinstance(atom.value, float) else "None"
        return self.zero(self.types.get(atom.id), atom.id)

    def refuse(self, s, what, hint):
        raise UnsupportedSyntaxError(f"{what} in forward mode (nr.jvp)\n{where(self.fn, s.line)}\n"
                                     f"Hint: {hint}")

    # --- the kernel -------------------------------------------------------------------------

    def kernel(self, name, mask, tangent_only=False):
        """``tangent_only``: the kernel returns the result's tangent alone (``nr.hvp``
        differentiates it: the value's computation is then not active, and one float result
        lets the reverse mode fuse a reduction loop)."""
        self.tangent_only = tangent_only
        params = list(self.fn.params)
        tangent_params = [self.d(p) for p, m in zip(params, mask) if m]
        # an argument that is not differentiated but shares an active array's alias class (a
        # name rebound to it in a loop): its contents carry no tangent
        body = [f"    {self.d(p)} = {self.zero(self.types.get(p), p)}"
                for p, m in zip(params, mask) if p in self.active and not m]
        body += self.block(self.fn.body, 1)
        head = f"def jvp_{name}({', '.join(params + tangent_params)}):"
        return "\n".join([head] + body) + "\n"

    def block(self, stmts, indent):
        out = []
        for s in stmts:
            out += self.statement(s, indent)
        return out or ["    " * indent + "pass"]

    def statement(self, s, indent):
        pad = "    " * indent
        mark = f"  # line {s.line}" if getattr(s, "line", 0) else ""
        if isinstance(s, ir.Assign):
            lines = self.assign(s)
            return [pad + lines[0] + mark] + [pad + line for line in lines[1:]]
        if isinstance(s, ir.Store):
            index = ", ".join(i.src() for i in s.index)
            lines = [f"{s.array}[{index}] = {s.value.src()}{mark}"]
            if s.array in self.active:
                lines.append(f"{self.d(s.array)}[{index}] = {self.tangent_or_zero(s.value)}")
            return [pad + line for line in lines]
        if isinstance(s, ir.If):
            out = [f"{pad}if {s.test.src()}:{mark}"] + self.block(s.body, indent + 1)
            if s.orelse:
                out += [f"{pad}else:"] + self.block(s.orelse, indent + 1)
            return out
        if isinstance(s, ir.For):
            return ([f"{pad}for {s.var} in {ir.range_src(s.start, s.stop, s.step)}:{mark}"]
                    + self.block(s.body, indent + 1))
        if isinstance(s, ir.While):
            return ([f"{pad}while True:{mark}"] + self.block(s.cond, indent + 1)
                    + [f"{pad}    if not {s.test.src()}:", f"{pad}        break"]
                    + self.block(s.body, indent + 1))
        if isinstance(s, ir.Return):
            value = s.value.src()
            if getattr(self, "tangent_only", False):
                return [f"{pad}return {self.tangent_or_zero(s.value)}{mark}"]
            return [f"{pad}return ({value}, {self.tangent_or_zero(s.value)}){mark}"]
        raise TypeError(f"not an IR statement: {s!r}")

    # --- assignments ------------------------------------------------------------------------

    def assign(self, s):
        primal = f"{s.target} = {ir.expr_src(s.expr)}"
        if s.target not in self.active:
            return [primal]
        e, t = s.expr, s.target
        if isinstance(e, ir.Call):
            return self.call(s, primal)
        value = self.expression(s, e)
        if value is None:
            value = self.zero(self.types.get(t), t)
        return [primal, f"{self.d(t)} = {value}"]

    def expression(self, s, e):
        """The source of the tangent of ``s.target = e`` (None: zero)."""
        t = s.target
        arr = is_array(self.types.get(t))
        D = self.tangent
        if isinstance(e, ir.Atom):
            return D(e.a)
        if isinstance(e, ir.UnaryOp):
            da = D(e.a)
            if da is None or e.op == "not":
                return None
            if e.op == "-":
                return f"-{da}"
            return f"{da}.copy()" if arr else da
        if isinstance(e, ir.BinOp):
            return self.binop(s, e, arr)
        if isinstance(e, ir.Index):
            da = D(e.a)
            if da is None:
                return None
            return f"{da}[{', '.join(i.src() for i in e.index)}]"
        if isinstance(e, ir.Attr):
            da = D(e.a)
            if da is None:
                return None
            if e.attr == "T" and is_array(self.types.get(e.a.id)):
                return f"{da}.T"
            if is_float_struct(self.types.get(e.a.id)):
                return f"{da}.{e.attr}"         # Tangent[S] has S's fields
            self.refuse(s, f"the attribute .{e.attr} of a differentiated value",
                        "read the arrays' elements or use the NumPy function.")
        if isinstance(e, ir.MethodCall):
            da = D(e.obj)
            if da is None:
                return None
            if e.name in ("copy", "reshape", "ravel", "flatten", "transpose"):
                return f"{da}.{e.name}({', '.join(a.src() for a in e.args)})"
            self.refuse(s, f"the array method .{e.name}()",
                        "call the NumPy function instead, if numbarules has a rule for it.")
        if isinstance(e, ir.MakeTuple):
            items = [self.tangent_or_zero(a) for a in e.items]
            return "(" + "".join(i + ", " for i in items) + ")"
        self.refuse(s, f"the expression {ir.expr_src(e)}", "rewrite it with arithmetic.")

    def binop(self, s, e, arr):
        a, b, op, t = e.a, e.b, e.op, s.target
        da, db = self.tangent(a), self.tangent(b)
        if da is None and db is None:
            return None
        A, B = a.src(), b.src()
        if op in ("+", "-"):
            if da is not None and db is not None:
                return f"{da} {op} {db}"
            if db is None:
                # a fresh array of the result's shape (the result is a new array; its tangent
                # must not share the operand's)
                return f"_spread({da}, {t})" if arr else da
            neg = db if op == "+" else f"-{db}"
            return f"_spread({neg}, {t})" if arr else neg
        if op == "*":
            terms = ([f"{da} * {B}"] if da is not None else []) + \
                    ([f"{A} * {db}"] if db is not None else [])
            return " + ".join(terms)
        if op == "/":
            if db is None:
                return f"{da} / {B}"
            if da is None:
                return f"-({t} * {db}) / {B}"
            return f"({da} - {t} * {db}) / {B}"
        if op == "**":
            terms = []
            if da is not None:
                if isinstance(b, ir.Const) and b.value == 2:
                    terms.append(f"{da} * (2.0 * {A})")
                elif isinstance(b, ir.Const) and b.value != 0:
                    terms.append(f"{da} * ({b.value!r} * {A} ** {b.value - 1!r})")
                elif not (isinstance(b, ir.Const) and b.value == 0):
                    terms.append(f"{da} * _pow_da({A}, {B})")
            if db is not None:
                terms.append(f"{db} * _pow_db({A}, {B})")
            return " + ".join(terms) or None
        if op == "%":
            floor = "_np.floor" if arr else "_math.floor"
            terms = ([da] if da is not None else []) + \
                    ([f"-({floor}({A} / {B}) * {db})"] if db is not None else [])
            text = " + ".join(terms)
            return f"_spread({text}, {t})" if arr else text
        if op == "@":
            terms = ([f"{da} @ {B}"] if da is not None else []) + \
                    ([f"{A} @ {db}"] if db is not None else [])
            return " + ".join(terms)
        if op == "//":
            return None
        self.refuse(s, f"the operator {op}", "rewrite it with arithmetic.")

    # --- calls ------------------------------------------------------------------------------

    def elementwise_loop(self, s, cp, dt):
        """The tangent of an element-wise function of arrays (and scalars), ``t = f(a, b)``: a
        loop over the flattened result calling the scalar rule's partials per element, each
        array operand broadcast to the result (``_fit``, which has a reverse rule). Written into
        the kernel rather than called, so that the reverse mode can differentiate the kernel
        again (nr.hvp)."""
        t = s.target
        ys, out, i, p = (self.fresh(b) for b in ("_ey", "_edy", "_ei", "_ep"))
        lines, elems, tangents = [], [], []
        unary = len(s.expr.args) == 1
        for k, a in enumerate(s.expr.args):
            da = self.tangent(a)
            if isinstance(a, ir.Name) and is_array(self.types.get(a.id)):
                # (an operand of the result's shape is itself: _fit returns it, no copy)
                xs = self.fresh("_ex")
                lines.append(f"{xs} = {a.src() if unary else f'_fit({a.src()}, {t})'}.ravel()")
                elems.append(f"{xs}[{i}]")
                if da is not None:
                    ds = self.fresh("_edx")
                    lines.append(f"{ds} = {da if unary else f'_fit({da}, {t})'}.ravel()")
                    tangents.append((k, f"{ds}[{i}]"))
            else:
                elems.append(a.src())
                if da is not None:
                    tangents.append((k, da))
        extra = [f"{ys}[{i}]"] if cp.with_result else []
        if cp.inline is not None:
            self.uses_math = True
            terms = [f"{partials.factor(cp.inline, k, elems + extra)} * {d}"
                     for k, d in tangents]
            body = [f"    {out}[{i}] = {' + '.join(terms) or '0.0'}"]
        else:
            terms = [f"{p}[{k}] * {d}" for k, d in tangents]
            body = [f"    {p} = {cp.name}({', '.join(elems + extra)})",
                    f"    {out}[{i}] = {' + '.join(terms) or '0.0'}"]
        # ravel() walks every array in C order (a copy for another layout), so the result is
        # filled flat and reshaped: ravel() of a Fortran-ordered result would be a copy, and
        # the tangent written into it lost (the fuzzer's find, group "layouts")
        return lines + [f"{ys} = {t}.ravel()",
                        f"{out} = _np.empty({ys}.shape[0], {ys}.dtype)",
                        f"for {i} in range({out}.shape[0]):"] + body + [
                        f"{dt} = {out}.reshape({t}.shape)"]

    def dot_terms(self, g, d, kind):
        """``_vdot`` terms of a rule's tangent ``g`` (of Numba type ``kind``) with the argument's
        tangent ``d``, one per float or array leaf of a struct or tuple (fields read by name):
        the reverse mode differentiates these kernels again, and ``_vdot`` has rules for
        floats and arrays only."""
        if kind is None or isinstance(kind, nbt.NoneType):
            return []
        if isinstance(kind, nbt.BaseTuple):
            names = getattr(getattr(kind, "instance_class", None), "_fields", None)
            return [term for k, part in enumerate(kind)
                    for acc in [f".{names[k]}" if names else f"[{k}]"]
                    for term in self.dot_terms(f"{g}{acc}", f"{d}{acc}", part)]
        return [f"_vdot({g}, {d})"]

    def call(self, s, primal):
        e, t = s.expr, s.target
        dt = self.d(t)
        cp = self.calls[id(e)]
        arr = is_array(self.types.get(t))
        args = [a.src() for a in e.args]
        if cp.kind == "struct":
            t_type = self.types.get(t)
            items = [self.tangent_or_zero(a) if differentiable(ft) else "None"
                     for a, ft in zip(e.args, t_type)]
            return [primal, f"{dt} = {self.tangent_class(t_type.instance_class)}({', '.join(items)})"]
        if cp.kind == "identity":
            # float(k) of an int has a zero of the result's type, not the int's None: the
            # variable may become active later (a loop adding an active value to it)
            da = self.tangent(e.args[0])
            return [primal, f"{dt} = {da if da is not None else self.zero(self.types.get(t), t)}"]
        if cp.kind in ("nondiff", "alloc"):
            return [primal, f"{dt} = {self.zero(self.types.get(t), t)}"]
        if cp.kind == "full":
            value = e.args[1] if len(e.args) > 1 else dict(e.kwargs).get("fill_value")
            dv = self.tangent(value) if value is not None else None
            if dv is None:
                return [primal, f"{dt} = {self.zero(self.types.get(t), t)}"]
            return [primal, f"{dt} = _spread({dv}, {t})"]
        if cp.kind == "scalar":
            extra = [t] if cp.with_result else []
            if arr:
                # element by element: partials are written for scalars
                return [primal] + self.elementwise_loop(s, cp, dt)
            terms = []
            lines = [primal]
            if cp.inline is not None:
                self.uses_math = True
                for k, a in enumerate(e.args):
                    da = self.tangent(a)
                    if da is not None:
                        terms.append(f"{partials.factor(cp.inline, k, args + extra)} * {da}")
            else:
                p = f"_p{dt}"
                lines.append(f"{p} = {cp.name}({', '.join(args + extra)})")
                for k, a in enumerate(e.args):
                    da = self.tangent(a)
                    if da is not None:
                        terms.append(f"{p}[{k}] * {da}")
            if not terms:
                return lines + [f"{dt} = {self.zero(self.types.get(t), t)}"]
            return lines + [f"{dt} = {' + '.join(terms)}"]
        if cp.kind == "frule":
            tangents = [self.tangent_or_zero(a) for a in e.args]
            return [f"{t}, {dt} = {cp.name}({', '.join(args + tangents)})"]
        if cp.kind == "pullback":
            r = f"_r{dt}"
            lines = [f"{r} = {cp.name}({', '.join(args + ['1.0'])})", f"{t} = {r}[0]"]
            terms = [term for k, a in enumerate(e.args) if self.tangent(a) is not None
                     for term in self.dot_terms(f"{r}[{k + 1}]", self.tangent(a),
                                                cp.tangents[k])]
            return lines + [f"{dt} = {' + '.join(terms) if terms else '0.0'}"]
        if cp.kind == "derived":
            tangents = [self.tangent(a) for a, m in zip(e.args, cp.mask) if m]
            return [f"{t}, {dt} = {cp.name}({', '.join(args + tangents)})"]
        if cp.kind == "split":
            # the primal call, then the callee's tangent-only kernel: no pair of arrays bound
            # (tangent_kernels.specialize's for_reverse)
            tangents = [self.tangent(a) for a, m in zip(e.args, cp.mask) if m]
            return [primal, f"{dt} = {cp.name}({', '.join(args + tangents)})"]
        raise AssertionError(f"unknown call plan {cp.kind}")
