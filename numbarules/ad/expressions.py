"""Expressions into A-normal form: the expression half of the frontend's normaliser (a mixin of
``frontend._Normalizer``), one operation per temporary. Calls are resolved to the objects they
name (dotted module attributes included), keyword arguments moved to their positions, array
methods turned into the NumPy functions they are, and what the language leaves out refused with
the file, the line and a hint."""

import ast
import copy
import inspect
import re

import numpy as np

from ..errors import NumbarulesError
from ..primitives import arrays
from . import ir
from .source import MISSING

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
           ast.MatMult: "@"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
_UNOPS = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not"}


_HINT_EXPR = ("Hint: use arithmetic, comparisons, math functions, element indexing and calls; "
              "write a rule (nr.rrule) for code outside that.")


class Expressions:
    """``expr(node)`` -> an IR atom; statements go to ``self.out`` through ``self.emit``."""

    known = {}      # {parameter: function passed as a value} (frontend._Normalizer sets it)

    def expr(self, e):
        line = self.src.line(e)
        method = getattr(self, "e_" + type(e).__name__, None)
        if method is None:
            raise self.src.error(e, f"the expression '{type(e).__name__}'", _HINT_EXPR)
        return method(e, line)

    def e_Constant(self, e, line):
        if not isinstance(e.value, (int, float, bool)) and e.value is not None:
            raise self.src.error(e, f"the constant {e.value!r}", _HINT_EXPR)
        return ir.Const(e.value)

    def e_Name(self, e, line):
        if e.id in self.locals:
            return ir.Name(e.id)
        value = self.src.resolve(e.id)
        if value is MISSING:
            raise self.src.error(e, f"the undefined name '{e.id}'", "")
        if isinstance(value, (bool, int, float)):
            return ir.Const(value)
        self.namespace[e.id] = value
        return ir.Name(e.id)

    def e_Lambda(self, e, line):
        """A lambda passed on as a value (``solve(lambda y, p: -p * y, y0, p)``): compiled code
        makes no closures, so one that reads no local variable is made a function of the
        module, compiled and passed like a global function."""
        a = e.args
        params = {p.arg for p in a.args}
        captured = sorted({n.id for n in ast.walk(e.body) if isinstance(n, ast.Name)}
                          & (self.locals - params))
        if captured:
            names = ", ".join(captured)
            raise self.src.error(
                e, f"a lambda that reads the local variable{'s' if len(captured) > 1 else ''} "
                f"{names}", f"Hint: make {names} parameter(s) of the lambda and pass them to "
                f"the function that calls it (solve(lambda y, p: -p * y, y0, p)).")
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            raise self.src.error(e, "a lambda with defaults, *args or keywords",
                                 "Hint: use a lambda of plain positional parameters.")
        node = copy.deepcopy(e)
        ast.increment_lineno(node, self.src.firstline - 1)
        code = compile(ast.fix_missing_locations(ast.Expression(body=node)), self.src.file,
                       "eval")
        name = f"_lambda_{line}_{e.col_offset}"
        self.namespace[name] = eval(code, dict(self.src.namespace))  # noqa: S307 - user's code
        return ir.Name(name)

    def e_BinOp(self, e, line):
        op = _BINOPS.get(type(e.op))
        if op is None:
            raise self.src.error(e, f"the operator {type(e.op).__name__}", _HINT_EXPR)
        a, b = self.expr(e.left), self.expr(e.right)
        return self.emit(ir.BinOp(op, a, b), line)

    def e_UnaryOp(self, e, line):
        op = _UNOPS.get(type(e.op))
        if op is None:
            raise self.src.error(e, f"the operator {type(e.op).__name__}", _HINT_EXPR)
        a = self.expr(e.operand)
        if op == "+":
            return a
        if op == "not" and isinstance(a, ir.Const):
            return ir.Const(not a.value)
        return self.emit(ir.UnaryOp(op, a), line)

    def e_Compare(self, e, line):
        ops = [_CMPOPS.get(type(o)) for o in e.ops]
        if None in ops:
            raise self.src.error(e, "the comparison 'is' / 'in'", _HINT_EXPR)
        left = self.expr(e.left)
        if len(ops) == 1:
            right = self.expr(e.comparators[0])
            if isinstance(left, ir.Const) and isinstance(right, ir.Const) \
                    and None not in (left.value, right.value):
                return ir.Const(_COMPARE[ops[0]](left.value, right.value))   # `if 3 < 2:`
            return self.emit(ir.BinOp(ops[0], left, right), line)
        # a < b < c  ->  (a < b) and (b < c), b evaluated once, c only if needed
        result = next(self.fresh)
        self.chain(result, left, list(zip(ops, e.comparators)), line)
        return ir.Name(result)

    def chain(self, result, left, rest, line):
        op, right_node = rest[0]
        right = self.expr(right_node)
        self.out.append(ir.Assign(result, ir.BinOp(op, left, right), line))
        if len(rest) > 1:
            saved, self.out = self.out, []
            self.chain(result, right, rest[1:], line)
            body, self.out = self.out, saved
            self.out.append(ir.If(self.snapshot(result, line), tuple(body), (), line))

    def snapshot(self, result, line):
        """A single-assignment copy of ``result`` to branch on: the branch reassigns ``result``,
        and the reverse pass must replay the branch on the value tested, not the new one."""
        self.rebound.add(result)
        return self.emit(ir.Atom(ir.Name(result)), line)

    def e_BoolOp(self, e, line):
        # Python semantics: the value of the first operand that decides, later ones not evaluated.
        result = next(self.fresh)
        first = self.expr(e.values[0])
        self.out.append(ir.Assign(result, ir.Atom(first), line))
        self.boolop_rest(result, isinstance(e.op, ast.And), e.values[1:], line)
        return ir.Name(result)

    def boolop_rest(self, result, is_and, values, line):
        if not values:
            return
        saved, self.out = self.out, []
        nxt = self.expr(values[0])
        self.out.append(ir.Assign(result, ir.Atom(nxt), line))
        self.boolop_rest(result, is_and, values[1:], line)
        body, self.out = self.out, saved
        test = self.snapshot(result, line)
        if is_and:
            self.out.append(ir.If(test, tuple(body), (), line))
        else:
            self.out.append(ir.If(test, (), tuple(body), line))

    def e_IfExp(self, e, line):
        test = self.pin(self.expr(e.test), line)
        result = next(self.fresh)
        self.rebound.add(result)
        saved, self.out = self.out, []
        a = self.expr(e.body)
        self.out.append(ir.Assign(result, ir.Atom(a), line))
        body, self.out = self.out, []
        b = self.expr(e.orelse)
        self.out.append(ir.Assign(result, ir.Atom(b), line))
        orelse, self.out = self.out, saved
        self.out.append(ir.If(test, tuple(body), tuple(orelse), line))
        return ir.Name(result)

    def e_Tuple(self, e, line):
        return self.emit(ir.MakeTuple(tuple(self.expr(x) for x in e.elts)), line)

    def e_Subscript(self, e, line):
        arr, index = self.subscript(e)
        return self.emit(ir.Index(arr, index), line)

    def subscript(self, e):
        if not isinstance(e.value, ast.Name):
            base = self.expr(e.value)
        else:
            base = self.expr(e.value)
        sl = e.slice
        parts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        index = tuple(self.slice(p) if isinstance(p, ast.Slice) else self.expr(p) for p in parts)
        if not isinstance(base, ir.Name):
            raise self.src.error(e, "indexing a constant", _HINT_EXPR)
        return base, index

    def slice(self, p):
        """``a:b:c`` with its bounds pinned: a view's adjoint is bound to the same slice of its
        base's adjoint when the pullback starts, so the bounds must not change after the read."""
        line = self.src.line(p)
        bound = lambda b: ir.Const(None) if b is None else self.pin(self.expr(b), line)  # noqa: E731
        return ir.Slice(bound(p.lower), bound(p.upper), bound(p.step))

    def e_Attribute(self, e, line):
        dotted = _dotted(e)
        if dotted and dotted.split(".")[0] not in self.locals:
            value = self.resolve_dotted(e, dotted)
            if isinstance(value, (bool, int, float)):
                return ir.Const(value)
            alias = _alias(dotted)
            self.namespace[alias] = value
            return ir.Name(alias)
        base = self.expr(e.value)
        return self.emit(ir.Attr(base, e.attr), line)

    def resolve_dotted(self, node, dotted):
        head, *rest = dotted.split(".")
        value = self.src.resolve(head)
        if value is MISSING:
            raise self.src.error(node, f"the undefined name '{head}'", "")
        for k, part in enumerate(rest):
            value = getattr(value, part, MISSING)
            if value is MISSING:
                prefix = ".".join([head] + rest[:k])
                raise self.src.error(node, f"'{dotted}' ({prefix} has no attribute '{part}')",
                                     "Hint: check the spelling.")
        return value

    def global_array(self, node):
        """Whether ``node`` names a module-level NumPy array (``K`` or ``cfg.K``)."""
        dotted = _dotted(node)
        if not dotted or dotted.split(".")[0] in self.locals:
            return False
        try:
            return isinstance(self.resolve_dotted(node, dotted), np.ndarray)
        except NumbarulesError:
            return False

    def e_Call(self, e, line):
        if any(isinstance(a, ast.Starred) for a in e.args):
            raise self.src.error(e, "a call with *args", _HINT_EXPR)
        fn = e.func
        if isinstance(fn, ast.Attribute) and (
                not (_dotted(fn) and _dotted(fn).split(".")[0] not in self.locals)
                or self.global_array(fn.value)):
            # a method of a local value, or of a module-level array (K.copy()): not a function
            obj = self.expr(fn.value)
            args = tuple(self.expr(a) for a in e.args)
            if fn.attr in _ARRAY_METHODS and [k.arg for k in e.keywords] in ([], ["axis"]):
                # x.sum(axis=0) is np.sum(x, 0): one rule serves both spellings
                args += tuple(self.expr(k.value) for k in e.keywords)
                func = _ARRAY_METHODS[fn.attr]
                self.namespace["_np"] = np
                return self.emit(ir.Call(func, f"_np.{func.__name__}", (obj,) + args), line)
            if e.keywords:
                raise self.src.error(e, f"keyword arguments to .{fn.attr}()", _HINT_EXPR)
            if fn.attr in _MUTATING_METHODS:
                raise self.src.error(e, f"the in-place array method .{fn.attr}()",
                                     "Hint: write the elements with an assignment (x[:] = v, "
                                     "x[i] = ...) or use the function that returns a new array "
                                     "(np.sort(x)).")
            if fn.attr == "view" and not args:
                # (Numba's own typing crashes on it with a bare ValueError)
                raise self.src.error(e, "x.view() without a dtype (Numba compiles only x.view(dtype))",
                                     "Hint: for a view of the whole array write x[:].")
            return self.emit(ir.MethodCall(obj, fn.attr, args), line)
        dotted = _dotted(fn)
        known = self.known
        family = self.tangent_family(fn)
        if family is not None:
            # nr.Tangent[S](...) (a rule's pullback differentiated for a second derivative)
            value, dotted = family, re.sub(r"\W", "_", f"_{family.__name__}")
            self.namespace[dotted] = value
        elif dotted in known:
            # a function passed as an argument: the specialization is keyed on it
            value = known[dotted]
            dotted = f"_fn_{dotted}"
            self.namespace[dotted] = value
        elif dotted is None or dotted.split(".")[0] in self.locals:
            raise self.src.error(e, "calling a local variable",
                                 "Hint: call functions by their global name, or pass them as "
                                 "arguments (a parameter called as a function).")
        else:
            value = self.resolve_dotted(e, dotted)
        if isinstance(value, np.ufunc) and (len(e.args) > value.nin or any(
                k.arg in ("out", "where") for k in e.keywords)):
            # np.add(a, b, out) writes its result into out and returns it: a write the
            # analysis would not see (a silently wrong gradient)
            raise self.src.error(e, f"the output argument of np.{value.__name__}",
                                 f"Hint: assign the result instead (out[:] = "
                                 f"np.{value.__name__}(...)).")
        if value is np.array and len(e.args) == 1 and not e.keywords \
                and isinstance(e.args[0], (ast.List, ast.Tuple)):
            return self.array_literal(e, line)
        if value in _SEQUENCE_FUNCTIONS:
            return self.sequence_call(e, value, line)
        if value in _VIEW_FUNCTIONS and e.args and not e.keywords:
            # np.transpose(x) is x.T, np.reshape(x, s) is x.reshape(s): views (see analysis)
            obj, *rest = [self.expr(a) for a in e.args]
            if value is np.transpose and not rest:
                return self.emit(ir.Attr(obj, "T"), line)
            if value is not np.transpose:
                return self.emit(ir.MethodCall(obj, value.__name__, tuple(rest)), line)
        if value in (min, max) and len(e.args) > 2 and not e.keywords:
            # min(a, b, c) -> min(min(a, b), c): the scalar rule is binary
            inner = ast.Call(func=e.func, args=e.args[:-1], keywords=[], lineno=e.lineno)
            return self.e_Call(ast.Call(func=e.func, args=[inner, e.args[-1]], keywords=[],
                                        lineno=e.lineno), line)
        head = dotted.split(".")[0]
        if "." in dotted and inspect.isfunction(value):
            fname = _alias(dotted)      # a Python function: it may be swapped for a compiled one
            self.namespace[fname] = value
        else:
            fname = dotted
            if head in self.src.namespace:
                self.namespace[head] = self.src.namespace[head]
        args = tuple(self.expr(a) for a in e.args)
        kwargs = tuple((k.arg, self.expr(k.value)) for k in e.keywords)
        if any(k is None for k, _ in kwargs):
            raise self.src.error(e, "a call with **kwargs", _HINT_EXPR)
        if value is np.dot and len(args) == 2 and not kwargs:
            return self.emit(ir.BinOp("@", args[0], args[1]), line)
        args, kwargs = _positional(value, args, kwargs)
        args = self.with_defaults(value, fname, args, kwargs)
        return self.emit(ir.Call(value, fname, args, kwargs), line)

    def tangent_family(self, fn):
        """``Tangent[S]`` when ``fn`` is the expression ``nr.Tangent[S]`` (``S`` a global name),
        else None."""
        if not (isinstance(fn, ast.Subscript) and _dotted(fn.value) and _dotted(fn.slice)):
            return None
        if _dotted(fn.value).split(".")[0] in self.locals:
            return None
        from ..structs import Tangent
        try:
            family = self.resolve_dotted(fn.value, _dotted(fn.value))
            cls = self.resolve_dotted(fn.slice, _dotted(fn.slice))
        except NumbarulesError:
            return None
        return Tangent[cls] if family is Tangent else None

    def with_defaults(self, func, fname, args, kwargs):
        """``args`` with the defaults of the parameters a call of a Python function leaves out:
        its derivative is specialised on every argument."""
        py = getattr(func, "py_func", func)
        if kwargs or not inspect.isfunction(py) or not py.__defaults__:
            return args
        module = getattr(py, "__module__", None) or ""
        if module.split(".")[0] in ("numpy", "scipy", "numba") \
                or module == "numbarules.primitives.numpy_names":
            # NumPy's functions and our stand-ins for them (the namespace of a compiled helper,
            # methods.helper, holds arrays.NUMPY): their defaults are no compiled call's
            return args

        params = list(inspect.signature(py).parameters.values())
        out = list(args)
        for p in params[len(args):]:
            if p.default is inspect.Parameter.empty or p.kind != p.POSITIONAL_OR_KEYWORD:
                return args
            if isinstance(p.default, (bool, int, float)) or p.default is None:
                out.append(ir.Const(p.default))
            else:
                name = f"_default_{_alias(fname)}_{p.name}"
                self.namespace[name] = p.default
                out.append(ir.Name(name))
        return tuple(out)

    def array_literal(self, e, line):
        """``np.array([a, b, c])`` (or nested rows of equal length) -> a new array of the
        elements' common type, written element by element: ``_t = np.empty(shape, dtype);
        _t[0] = a; ...``, which both modes differentiate as writes into a new array."""
        def shape_of(node):
            if not isinstance(node, (ast.List, ast.Tuple)):
                return ()
            if not node.elts:
                raise self.src.error(e, "np.array of an empty list", _HINT_EXPR)
            inner = [shape_of(x) for x in node.elts]
            if any(s != inner[0] for s in inner):
                raise self.src.error(e, "np.array of rows of different lengths", _HINT_EXPR)
            return (len(node.elts),) + inner[0]

        def leaves(node, at):
            if isinstance(node, (ast.List, ast.Tuple)):
                for k, x in enumerate(node.elts):
                    yield from leaves(x, at + (k,))
            else:
                yield at, node

        shape = shape_of(e.args[0])
        items = [(at, self.expr(x)) for at, x in leaves(e.args[0], ())]
        self.namespace["_np"] = np
        self.namespace["_element_dtype"] = arrays.element_dtype
        dtype = self.emit(ir.Call(arrays.element_dtype, "_element_dtype",
                                  tuple(atom for _, atom in items)), line)
        dims = ir.Const(shape[0]) if len(shape) == 1 else self.emit(
            ir.MakeTuple(tuple(ir.Const(n) for n in shape)), line)
        out = self.emit(ir.Call(np.empty, "_np.empty", (dims, dtype)), line)
        for at, atom in items:
            self.out.append(ir.Store(out.id, tuple(ir.Const(k) for k in at), atom, line))
        return out

    def sequence_call(self, e, func, line):
        """``np.concatenate((a, b, c), axis)`` -> ``concat(concat(a, b, axis), c, axis)``, and
        ``np.stack`` likewise over ``expand_dims``: the rules take arrays, not a tuple of them
        (a tuple of arrays has no tangent type here)."""
        seq = e.args[0] if e.args else None
        keywords = [k.arg for k in e.keywords]
        if not isinstance(seq, (ast.Tuple, ast.List)) or not seq.elts or len(e.args) > 2 \
                or keywords not in ([], ["axis"]) or len(e.args) == 2 and keywords:
            raise self.src.error(e, f"np.{func.__name__} of anything but a literal tuple of "
                                    f"arrays and an axis", _HINT_EXPR)
        axis_node = e.args[1] if len(e.args) == 2 else (e.keywords[0].value if e.keywords else None)
        axis = self.expr(axis_node) if axis_node is not None else ir.Const(0)
        items = [self.expr(x) for x in seq.elts]
        if func is np.stack:
            self.namespace["_nr_expand_dims"] = arrays.new_axis
            items = [self.emit(ir.Call(arrays.new_axis, "_nr_expand_dims", (x, axis)), line)
                     for x in items]
        self.namespace["_nr_concatenate"] = arrays.join
        acc = items[0]
        if len(items) == 1:
            return self.emit(ir.MethodCall(acc, "copy", ()), line)
        for x in items[1:]:
            acc = self.emit(ir.Call(arrays.join, "_nr_concatenate", (acc, x, axis)), line)
        return acc

    def check_local(self, node):
        if node.id not in self.locals:
            raise self.src.error(node, f"assigning the global '{node.id}'", "")


_ARRAY_METHODS = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min}
_VIEW_FUNCTIONS = (np.transpose, np.reshape, np.ravel)
_SEQUENCE_FUNCTIONS = (np.concatenate, np.stack)

#: Array methods that write into the array (Numba compiles these): refused, as writes the
#: analysis would not see.
_MUTATING_METHODS = {"fill", "sort", "partition", "put", "itemset", "resize", "setfield",
                     "byteswap"}


def _positional(func, args, kwargs):
    """Keyword arguments moved into their positions where the signature allows (np.sum(x,
    axis=0) -> np.sum(x, 0)), so rules, which match positional types, see them."""
    if not kwargs:
        return args, kwargs
    try:
        params = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return args, kwargs
    names = dict(kwargs)
    out = list(args)
    for p in params[len(args):]:
        if p not in names:
            break
        out.append(names.pop(p))
    if names:
        return args, kwargs
    return tuple(out), ()


def _alias(dotted):
    return dotted.replace(".", "_")


def _dotted(e):
    parts = []
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    if isinstance(e, ast.Name):
        parts.append(e.id)
        return ".".join(reversed(parts))
    return None
