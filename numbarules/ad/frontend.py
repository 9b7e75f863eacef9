"""Read a Python function and normalise it into the IR of ``ir.py``.

- Source: ``inspect.getsource`` + ``ast.parse``; every free name is resolved through the
  function's closure cells, globals and builtins (functions defined inside functions and in
  notebooks work).
- A-normal form: one operation per assignment, each with a fresh temporary ``_tN``; augmented
  assignment is expanded; ``and``/``or`` and conditional expressions become ``If`` statements.
- ``for`` loops over ``range`` keep their bounds in temporaries evaluated once. A loop that can
  ``break`` (or ``return``) becomes a ``While`` over an explicit counter.
- ``break``, ``continue`` and early ``return`` become flags (``_brkN``, ``_cntN``, ``_ret``) and
  the statements after them are guarded, so the body has one exit, a final ``Return``.

Anything outside this language raises ``UnsupportedSyntaxError`` naming the file, the line and
the construct, with a hint.
"""

import ast
import dataclasses
import builtins
import inspect
import itertools
import textwrap

import numba
import numpy as np

from ..errors import NumbarulesError, UnsupportedSyntaxError
from ..primitives import arrays
from . import ir

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
           ast.MatMult: "@"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
_UNOPS = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not"}


class Source:
    """A function's parsed source and the namespace its free names resolve in."""

    def __init__(self, func):
        self.func = func
        code = getattr(func, "__code__", None)
        if code is None:
            raise UnsupportedSyntaxError(f"{func!r} has no Python source to differentiate")
        self.file = code.co_filename
        self.firstline = code.co_firstlineno
        try:
            text = textwrap.dedent(inspect.getsource(func))
        except (OSError, TypeError) as exc:
            raise UnsupportedSyntaxError(
                f"cannot read the source of {func.__qualname__} ({self.file}:{self.firstline}): "
                f"{exc}. Define it in a file, or give it a rule with nr.rrule") from None
        self.lines = text.splitlines()
        tree = ast.parse(text)
        self.node = _find_function(tree, func)
        if not same_code(self.node, func):
            raise UnsupportedSyntaxError(
                f"the source of {func.__qualname__} ({self.file}:{self.firstline}) is not the "
                f"code the function runs: the file changed after it was loaded, or a decorator "
                f"wraps the function. Reload the module (importlib.reload), or differentiate "
                f"the function the decorator wraps")
        self.namespace = dict(func.__globals__)
        for name, cell in zip(code.co_freevars, func.__closure__ or ()):
            try:
                self.namespace[name] = cell.cell_contents
            except ValueError:   # an empty cell: a name bound later in the enclosing function
                pass

    def line(self, node):
        return self.firstline + getattr(node, "lineno", 1) - 1

    def error(self, node, what, hint):
        line = self.line(node)
        text = ""
        idx = getattr(node, "lineno", 1) - 1
        if 0 <= idx < len(self.lines):
            text = "\n    " + self.lines[idx].strip()
        return UnsupportedSyntaxError(
            f'{what} is not supported by numbarules AD\n  File "{self.file}", line {line}, in '
            f"{self.func.__qualname__}{text}\n{hint}", )

    def resolve(self, name):
        if name in self.namespace:
            return self.namespace[name]
        return getattr(builtins, name, _MISSING)


_MISSING = object()


def same_code(node, func):
    """Whether ``node`` (a def or lambda read from ``func``'s file) compiles to the code
    ``func`` runs. The source is read from the file when asked (``inspect.getsource``): a file
    edited after it was imported would otherwise be differentiated in place of the code the
    process runs, and a decorator's wrapper (``functools.wraps``) would be differentiated as
    the function it wraps. The bytecode itself differs between compiles of the same text (and
    free variables of a closure become globals when the def is compiled alone), so the
    constants, names, variables and arity are compared."""
    if isinstance(node, ast.Lambda):
        module = ast.Expression(body=node)
        mode = "eval"
    else:
        node = ast.FunctionDef(name=node.name, args=node.args, body=node.body,
                               decorator_list=[], returns=None, type_comment=None,
                               type_params=[])
        module = ast.Module(body=[node], type_ignores=[])
        mode = "exec"
    try:
        code = compile(ast.fix_missing_locations(module), func.__code__.co_filename, mode,
                       dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    made = next((c for c in code.co_consts if hasattr(c, "co_code")), None)
    own = func.__code__
    return made is not None and \
        _code_shape(made, own.co_freevars) == _code_shape(own, own.co_freevars)


def _code_shape(code, free):
    """What ``same_code`` compares of a code object (nested code objects by their shape too);
    ``free``: the enclosing scope's names, globals when the def is compiled alone."""
    consts = tuple(_code_shape(c, free) if hasattr(c, "co_code") else (type(c), c)
                   for c in code.co_consts)
    names = tuple(n for n in code.co_names if n not in free)
    return (code.co_name, code.co_argcount, code.co_kwonlyargcount, consts, names,
            code.co_varnames)


def _find_function(tree, func):
    """The def (or lambda) of ``func`` in its source: by name, else by first line; never a guess."""
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    named = [n for n in defs if n.name == func.__name__]
    if len(named) == 1:
        return named[0]
    first = lambda n: min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])])  # noqa: E731
    top = [n for n in defs if first(n) == 1]
    if len(named) > 1 or (not named and len(top) == 1):
        by_line = [n for n in (named or top) if first(n) == 1]
        if len(by_line) == 1:
            return by_line[0]
    lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == 1]
    if func.__name__ == "<lambda>" and len(lambdas) == 1:
        return lambdas[0]
    raise UnsupportedSyntaxError(
        f"cannot tell which definition in the source of {func.__qualname__} is the function "
        f"(it may be renamed, or share its line with another lambda); define it with def")


class _Loop:
    def __init__(self, ident, brk, cnt):
        self.id, self.brk, self.cnt = ident, brk, cnt


def normalize(func):
    """The IR of ``func`` and the namespace (name -> object) its generated code runs in."""
    src = Source(func)
    node = src.node
    args = node.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise src.error(node, "a signature with *args, **kwargs or keyword-only parameters",
                        "Hint: differentiate a function of plain positional parameters (with "
                        "defaults if you like).")
    params = tuple(a.arg for a in args.args)
    body = [ast.Return(value=node.body, lineno=node.lineno)] if isinstance(node, ast.Lambda) \
        else list(node.body)
    body = _strip_docstring(body)
    norm = _Normalizer(src, params, body)
    stmts = _version_rebindings(params, norm.function_body(body), norm.taken)
    fn = ir.Function(func.__name__, params, tuple(stmts), src.file, src.firstline,
                     tuple(src.lines))
    return fn, norm.namespace


def _surely_returns(stmts):
    """Whether every path through ``stmts`` ends in a ``return`` (loops may run zero times)."""
    for s in stmts:
        if isinstance(s, ast.Return):
            return True
        if isinstance(s, ast.If) and _surely_returns(s.body) and _surely_returns(s.orelse):
            return True
    return False


def _strip_docstring(body):
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


class _Normalizer:
    def __init__(self, src, params, body):
        self.src = src
        self.params = params
        self.locals = set(params) | _assigned_names(body)
        taken = self.locals | {n.id for n in ast.walk(ast.Module(body=body, type_ignores=[]))
                               if isinstance(n, ast.Name)}
        self.taken = taken
        self.rebound = set()      # temporaries assigned in more than one place
        self.fresh = (f"_t{i}" for i in itertools.count(1) if f"_t{i}" not in taken)
        self.loop_ids = itertools.count(1)
        self.namespace = {}
        self.loops = []
        self.out = []
        last = body[-1] if body else None
        early = any(isinstance(n, ast.Return) for s in body[:-1] for n in ast.walk(s)) or (
            last is not None and not isinstance(last, ast.Return)
            and any(isinstance(n, ast.Return) for n in ast.walk(last)))
        self.ret_flag = "_ret" if early else None

    # --- blocks and control flow ------------------------------------------------------------

    def function_body(self, body):
        if not any(isinstance(n, ast.Return) and n.value is not None
                   for s in body for n in ast.walk(s)):
            raise self.src.error(self.src.node, "a function that returns no value",
                                 "Hint: nr.grad differentiates a function that returns a number.")
        stmts = []
        if self.ret_flag:
            stmts.append(ir.Assign(self.ret_flag, ir.Atom(ir.Const(False))))
        stmts += self.block(body)
        if self.ret_flag:
            if not _surely_returns(body):
                # Falling off the end returns None, as in Python (kernels turns a None into an
                # error where the function otherwise returns a float: see no_value).
                last = body[-1]
                line = self.src.firstline + getattr(last, "end_lineno", last.lineno) - 1
                saved, self.out = self.out, stmts
                fell = self.emit(ir.UnaryOp("not", ir.Name(self.ret_flag)), line)
                self.out = saved
                stmts.append(ir.If(fell, (ir.Assign("_rv", ir.Atom(ir.Const(None)), line),), (),
                                   line))
            stmts.append(ir.Return(ir.Name("_rv")))
        return stmts

    def block(self, stmts):
        out = []
        for k, s in enumerate(stmts):
            out += self.stmt(s)
            flags = self.exit_flags(s)
            if flags and k + 1 < len(stmts):
                rest = self.block(stmts[k + 1:])
                if rest:
                    saved, self.out = self.out, out
                    go = self.guard(flags, s)
                    self.out = saved
                    out.append(ir.If(go, tuple(rest), (), self.src.line(s)))
                break
        return out

    def guard(self, flags, node):
        """Emit ``go = not (f1 or f2 ...)`` and return its atom."""
        line = self.src.line(node)
        acc = ir.Name(flags[0])
        for f in flags[1:]:
            acc = self.emit(ir.BinOp("|", acc, ir.Name(f)), line)
        return self.emit(ir.UnaryOp("not", acc), line)

    def exit_flags(self, s):
        flags = []
        if self.ret_flag and any(isinstance(n, ast.Return) for n in ast.walk(s)):
            flags.append(self.ret_flag)
        if self.loops:
            loop = self.loops[-1]
            if loop.brk and _contains(s, ast.Break):
                flags.append(loop.brk)
            if loop.cnt and _contains(s, ast.Continue):
                flags.append(loop.cnt)
        return flags

    def stmt(self, s):
        saved, self.out = self.out, []
        try:
            method = getattr(self, "s_" + type(s).__name__, None)
            if method is None:
                raise self.src.error(s, f"the statement '{type(s).__name__}'", _HINT_STMT)
            method(s)
            return self.out
        finally:
            self.out = saved

    def sub_block(self, stmts):
        saved, self.out = self.out, []
        try:
            return tuple(self.block(stmts))
        finally:
            self.out = saved

    def s_Expr(self, s):
        if isinstance(s.value, ast.Constant):
            return   # a docstring or a bare constant
        raise self.src.error(s, "an expression statement (a call whose result is discarded)",
                             "Hint: assign the result, or move side effects out of the "
                             "differentiated function.")

    def s_Pass(self, s):
        pass

    def s_Assign(self, s):
        line = self.src.line(s)
        if len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            self.assign_expr(s.targets[0].id, s.value, line)
            return
        target = s.targets[0]
        if len(s.targets) == 1 and isinstance(target, (ast.Tuple, ast.List)) \
                and isinstance(s.value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(s.value.elts):
            # a, b = b, a: every right-hand side first, then the targets, with no tuple between.
            values = [self.pin(self.expr(v), line) for v in s.value.elts]
            for elt, value in zip(target.elts, values):
                self.assign_target(elt, value, line)
            return
        value = self.expr(s.value)
        for target in s.targets:
            self.assign_target(target, value, line)

    def s_AnnAssign(self, s):
        if s.value is None:
            return
        self.assign_target(s.target, self.expr(s.value), self.src.line(s))

    def s_AugAssign(self, s):
        line = self.src.line(s)
        op = _BINOPS.get(type(s.op))
        if op is None:
            raise self.src.error(s, f"the operator {type(s.op).__name__}", _HINT_EXPR)
        if isinstance(s.target, ast.Name):
            self.check_local(s.target)
            rhs = self.expr(s.value)
            new = self.emit(ir.BinOp(op, ir.Name(s.target.id), rhs), line)
            self.out.append(ir.Assign(s.target.id, ir.Atom(new), line))
            return
        if isinstance(s.target, ast.Subscript):
            arr, index = self.subscript(s.target)
            rhs = self.expr(s.value)
            old = self.emit(ir.Index(arr, index), line)
            new = self.emit(ir.BinOp(op, old, rhs), line)
            self.out.append(ir.Store(arr.id, index, new, line))
            return
        raise self.src.error(s, "augmented assignment to this target", _HINT_STMT)

    def assign_expr(self, name, value, line):
        # The final operation is assigned to the variable directly, unless it reads the variable
        # it overwrites (s = s + t): then it goes to a temporary that is copied, so that no
        # statement reads its own target and each adjoint template stays free of aliasing.
        atom = self.expr(value)
        last = self.out[-1] if self.out else None
        if (isinstance(atom, ir.Name) and isinstance(last, ir.Assign) and last.target == atom.id
                and atom.id.startswith("_t") and atom.id not in self.rebound
                and name not in {a.id for a in last.expr.atoms() if isinstance(a, ir.Name)}):
            self.out[-1] = ir.Assign(name, last.expr, last.line)
            return
        self.out.append(ir.Assign(name, ir.Atom(atom), line))

    def assign_target(self, target, value, line):
        if isinstance(target, ast.Name):
            self.out.append(ir.Assign(target.id, ir.Atom(value), line))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for k, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred):
                    raise self.src.error(target, "starred assignment", _HINT_STMT)
                item = self.emit(ir.Index(value, (ir.Const(k),)), line)
                self.assign_target(elt, item, line)
        elif isinstance(target, ast.Subscript):
            arr, index = self.subscript(target)
            self.out.append(ir.Store(arr.id, index, value, line))
        else:
            raise self.src.error(target, f"assignment to {type(target).__name__}",
                                 "Hint: structs are immutable; build a new one instead.")

    def s_If(self, s):
        test = self.pin(self.expr(s.test), self.src.line(s))
        if isinstance(test, ir.Const):
            # A constant test: only one side can run. Numba prunes the other before typing, so
            # its variables would have no types; take the live side here, as Numba does.
            self.out.extend(self.sub_block(s.body if test.value else s.orelse))
            return
        self.out.append(ir.If(test, self.sub_block(s.body), self.sub_block(s.orelse),
                              self.src.line(s)))

    def s_Return(self, s):
        line = self.src.line(s)
        value = ir.Const(None) if s.value is None else self.expr(s.value)
        if self.ret_flag is None:
            self.out.append(ir.Return(value, line))
        else:
            self.out.append(ir.Assign("_rv", ir.Atom(value), line))
            self.out.append(ir.Assign(self.ret_flag, ir.Atom(ir.Const(True)), line))

    def s_Break(self, s):
        self.out.append(ir.Assign(self.loops[-1].brk, ir.Atom(ir.Const(True)), self.src.line(s)))

    def s_Continue(self, s):
        self.out.append(ir.Assign(self.loops[-1].cnt, ir.Atom(ir.Const(True)), self.src.line(s)))

    def s_For(self, s):
        line = self.src.line(s)
        it = s.iter
        snapshots = self.checkpoint_marker(s)
        if snapshots is not None:
            it = it.args[0]
        loop_fn = _dotted(it.func) if isinstance(it, ast.Call) else None
        if not (loop_fn is not None and loop_fn.split(".")[0] not in self.locals
                and self.resolve_dotted(it, loop_fn) in (range, numba.prange)
                and 1 <= len(it.args) <= 3 and not it.keywords):
            raise self.src.error(s, "a for loop over something other than range(...)",
                                 "Hint: loop over indices, e.g. `for i in range(len(x))`.")
        if not isinstance(s.target, ast.Name):
            raise self.src.error(s, "a for loop with a non-name target", _HINT_STMT)
        if s.orelse:
            raise self.src.error(s, "for ... else", _HINT_STMT)
        bounds = [self.expr(a) for a in it.args]
        start, stop, step = ([ir.Const(0)] + bounds + [ir.Const(1)])[:3] if len(bounds) == 1 else \
            (bounds + [ir.Const(1)])[:3]
        start, stop, step = (self.pin(b, line) for b in (start, stop, step))
        if isinstance(step, ir.Const) and step.value == 0:
            raise self.src.error(s, "range() with step 0", "")
        ident = next(self.loop_ids)
        has_break = _contains(s, ast.Break, top=True)
        has_return = self.ret_flag is not None and any(isinstance(n, ast.Return) for n in ast.walk(s))
        loop = _Loop(ident, f"_brk{ident}" if has_break else None,
                     f"_cnt{ident}" if _contains(s, ast.Continue, top=True) else None)
        if snapshots is not None:
            if has_break or has_return:
                raise self.src.error(s, "break or return inside a checkpointed loop",
                                     "Hint: the reverse schedule replays whole steps; compute a "
                                     "flag and skip the step's work instead.")
            if self.loops:
                raise self.src.error(s, "a checkpointed loop inside another loop",
                                     "Hint: checkpoint the outer (time) loop.")
            snapshots = self.pin(self.expr(snapshots), line)
        self.loops.append(loop)
        try:
            if not (has_break or has_return):
                body = self.loop_prologue(loop, line) + list(self.sub_block(s.body))
                self.out.append(ir.For(s.target.id, start, stop, step, tuple(body), line, ident,
                                       snapshots))
                return
            # A loop that can stop early: count with an explicit variable so the reverse pass can
            # replay exactly the iterations that ran.
            k = f"_k{ident}"
            self.out.append(ir.Assign(k, ir.Atom(start), line))
            if loop.brk:
                self.out.append(ir.Assign(loop.brk, ir.Atom(ir.Const(False)), line))
            saved, self.out = self.out, []
            if isinstance(step, ir.Const):
                test = self.emit(ir.BinOp("<" if step.value > 0 else ">", ir.Name(k), stop), line)
            else:
                up = self.emit(ir.BinOp("<", ir.Name(k), stop), line)
                down = self.emit(ir.BinOp(">", ir.Name(k), stop), line)
                positive = self.emit(ir.BinOp(">", step, ir.Const(0)), line)
                test = self.select(positive, up, down, line)
            test = self.and_not_flags(test, loop, line)
            cond = self.out
            self.out = saved
            body = [ir.Assign(s.target.id, ir.Atom(ir.Name(k)), line),
                    ir.Assign(k, ir.BinOp("+", ir.Name(k), step), line)]
            body += self.loop_prologue(loop, line) + list(self.sub_block(s.body))
            self.out.append(ir.While(tuple(cond), test, tuple(body), line, ident))
        finally:
            self.loops.pop()

    def checkpoint_marker(self, s):
        """For ``for t in nr.checkpointed(range(...), snapshots=k)``: the expression k (16 when
        left out), else None."""
        it = s.iter
        name = _dotted(it.func) if isinstance(it, ast.Call) else None
        if name is None or name.split(".")[0] in self.locals:
            return None
        from ..checkpoint import checkpointed
        if self.resolve_dotted(it, name) is not checkpointed:
            return None
        args = list(it.args) + [k.value for k in it.keywords if k.arg == "snapshots"]
        if len(it.args) not in (1, 2) or len(args) > 2 or any(
                k.arg != "snapshots" for k in it.keywords):
            raise self.src.error(s, "nr.checkpointed with other arguments than (range(...), "
                                    "snapshots=k)", "")
        return args[1] if len(args) == 2 else ast.Constant(16)

    def s_While(self, s):
        line = self.src.line(s)
        if s.orelse:
            raise self.src.error(s, "while ... else", _HINT_STMT)
        if isinstance(s.test, ast.Constant) and not s.test.value:
            return              # `while False:` never runs (Numba prunes it, types nothing in it)
        ident = next(self.loop_ids)
        loop = _Loop(ident, f"_brk{ident}" if _contains(s, ast.Break, top=True) else None,
                     f"_cnt{ident}" if _contains(s, ast.Continue, top=True) else None)
        if loop.brk:
            self.out.append(ir.Assign(loop.brk, ir.Atom(ir.Const(False)), line))
        saved, self.out = self.out, []
        test = self.and_not_flags(self.expr(s.test), loop, line)
        cond, self.out = self.out, saved
        self.loops.append(loop)
        try:
            body = self.loop_prologue(loop, line) + list(self.sub_block(s.body))
        finally:
            self.loops.pop()
        self.out.append(ir.While(tuple(cond), test, tuple(body), line, ident))

    def loop_prologue(self, loop, line):
        return [ir.Assign(loop.cnt, ir.Atom(ir.Const(False)), line)] if loop.cnt else []

    def and_not_flags(self, test, loop, line):
        for flag in (loop.brk, self.ret_flag if self.ret_flag else None):
            if flag:
                nf = self.emit(ir.UnaryOp("not", ir.Name(flag)), line)
                test = self.emit(ir.BinOp("&", self.as_bool(test, line), nf), line)
        return test

    def as_bool(self, atom, line):
        return self.emit(ir.Call(bool, "bool", (atom,)), line)

    def select(self, test, a, b, line):
        t = next(self.fresh)
        self.rebound.add(t)
        self.out.append(ir.If(test, (ir.Assign(t, ir.Atom(a), line),),
                              (ir.Assign(t, ir.Atom(b), line),), line))
        return ir.Name(t)

    def pin(self, atom, line):
        """An atom that no later statement can change: a constant, a temporary, or a fresh copy
        of a user variable (loop bounds and branch tests are read again by the reverse pass)."""
        if isinstance(atom, ir.Const) or (atom.id not in self.locals and atom.id not in self.rebound):
            return atom
        return self.emit(ir.Atom(atom), line)

    # --- expressions --------------------------------------------------------------------------

    def emit(self, expr, line):
        t = next(self.fresh)
        self.out.append(ir.Assign(t, expr, line))
        return ir.Name(t)

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
        if value is _MISSING:
            raise self.src.error(e, f"the undefined name '{e.id}'", "")
        if isinstance(value, (bool, int, float)):
            return ir.Const(value)
        self.namespace[e.id] = value
        return ir.Name(e.id)

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
        if value is _MISSING:
            raise self.src.error(node, f"the undefined name '{head}'", "")
        for k, part in enumerate(rest):
            owner, value = value, getattr(value, part, _MISSING)
            if value is _MISSING:
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
        if dotted is None or dotted.split(".")[0] in self.locals:
            raise self.src.error(e, "calling a local variable",
                                 "Hint: call functions by their global name.")
        value = self.resolve_dotted(e, dotted)
        if isinstance(value, np.ufunc) and (len(e.args) > value.nin or any(
                k.arg in ("out", "where") for k in e.keywords)):
            # np.add(a, b, out) writes its result into out and returns it: a write the
            # analysis would not see (a silently wrong gradient)
            raise self.src.error(e, f"the output argument of np.{value.__name__}",
                                 f"Hint: assign the result instead (out[:] = "
                                 f"np.{value.__name__}(...)).")
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

    def with_defaults(self, func, fname, args, kwargs):
        """``args`` with the defaults of the parameters a call of a Python function leaves out:
        its derivative is specialised on every argument."""
        py = getattr(func, "py_func", func)
        if kwargs or not inspect.isfunction(py) or not py.__defaults__:
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


def _assigned_names(body):
    names = set()
    for s in body:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
    return names


def _contains(s, kind, top=False):
    """Whether ``s`` holds a ``kind`` node that belongs to the loop ``s`` is (or is in)."""
    stack = list(ast.iter_child_nodes(s)) if top else [s]
    while stack:
        n = stack.pop()
        if isinstance(n, kind):
            return True
        if isinstance(n, (ast.For, ast.While, ast.FunctionDef, ast.Lambda)):
            continue   # a break inside a nested loop belongs to that loop
        stack.extend(ast.iter_child_nodes(n))
    return False


_HINT_STMT = ("Hint: numbarules differentiates assignments, if/elif/else, for over range, while, "
              "break, continue and return; write a rule (nr.rrule) for code outside that.")
_HINT_EXPR = ("Hint: use arithmetic, comparisons, math functions, element indexing and calls; "
              "write a rule (nr.rrule) for code outside that.")


def _version_rebindings(params, stmts, taken):
    """Give each top-level rebinding of a variable its own name (``x = x.copy()`` -> ``x_2``).

    Only variables bound exclusively by top-level assignments are versioned (straight-line code,
    so every read sees exactly one binding). Each array then has one binding, and scalars that
    are rebound need no saving in the reverse pass.
    """
    top, nested = {}, set()
    for s in stmts:
        if isinstance(s, ir.Assign):
            top[s.target] = top.get(s.target, 0) + 1
    for s in ir.walk(stmts):
        if isinstance(s, (ir.If, ir.For, ir.While)):
            for sub in ir.walk(s.body if not isinstance(s, ir.If) else s.body + s.orelse):
                if isinstance(sub, ir.Assign):
                    nested.add(sub.target)
            if isinstance(s, ir.While):
                nested.update(x.target for x in ir.walk(s.cond) if isinstance(x, ir.Assign))
            if isinstance(s, ir.For):
                nested.add(s.var)
    candidates = {v for v, n in top.items() if v not in nested and (n > 1 or v in params)}
    if not candidates:
        return stmts
    used = set(taken) | set(params)
    current, out = {}, []
    for s in stmts:
        s = _rename(s, current)
        if isinstance(s, ir.Assign) and s.target in candidates:
            if s.target in current or s.target in params:
                k = 2
                while f"{s.target}_{k}" in used:
                    k += 1
                new = f"{s.target}_{k}"
                used.add(new)
            else:
                new = s.target
            current[s.target] = new
            s = dataclasses.replace(s, target=new)
        out.append(s)
    return out


def _rename(s, names):
    """``s`` with the variables it reads renamed by ``names`` (targets unchanged)."""
    if not names:
        return s
    atom = lambda a: ir.Name(names[a.id]) if isinstance(a, ir.Name) and a.id in names else a  # noqa: E731
    if isinstance(s, ir.Assign):
        return dataclasses.replace(s, expr=_rename_expr(s.expr, atom))
    if isinstance(s, ir.Store):
        return dataclasses.replace(s, array=names.get(s.array, s.array),
                                   index=_rename_index(s.index, atom), value=atom(s.value))
    if isinstance(s, ir.If):
        return dataclasses.replace(s, test=atom(s.test),
                                   body=tuple(_rename(x, names) for x in s.body),
                                   orelse=tuple(_rename(x, names) for x in s.orelse))
    if isinstance(s, ir.For):
        return dataclasses.replace(s, start=atom(s.start), stop=atom(s.stop), step=atom(s.step),
                                   snapshots=None if s.snapshots is None else atom(s.snapshots),
                                   body=tuple(_rename(x, names) for x in s.body))
    if isinstance(s, ir.While):
        return dataclasses.replace(s, test=atom(s.test),
                                   cond=tuple(_rename(x, names) for x in s.cond),
                                   body=tuple(_rename(x, names) for x in s.body))
    if isinstance(s, ir.Return):
        return dataclasses.replace(s, value=atom(s.value))
    return s


def _rename_index(index, atom):
    return tuple(ir.Slice(*map(atom, i.parts())) if isinstance(i, ir.Slice) else atom(i)
                 for i in index)


def _rename_expr(e, atom):
    if isinstance(e, ir.Atom):
        return ir.Atom(atom(e.a))
    if isinstance(e, ir.BinOp):
        return dataclasses.replace(e, a=atom(e.a), b=atom(e.b))
    if isinstance(e, ir.UnaryOp):
        return dataclasses.replace(e, a=atom(e.a))
    if isinstance(e, ir.Call):
        return dataclasses.replace(e, args=tuple(map(atom, e.args)),
                                   kwargs=tuple((k, atom(v)) for k, v in e.kwargs))
    if isinstance(e, ir.MethodCall):
        return dataclasses.replace(e, obj=atom(e.obj), args=tuple(map(atom, e.args)))
    if isinstance(e, ir.Index):
        return dataclasses.replace(e, a=atom(e.a), index=_rename_index(e.index, atom))
    if isinstance(e, ir.Attr):
        return dataclasses.replace(e, a=atom(e.a))
    if isinstance(e, ir.MakeTuple):
        return ir.MakeTuple(tuple(map(atom, e.items)))
    return e
