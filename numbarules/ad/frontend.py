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
import itertools

import numba

from . import ir
from .expressions import _BINOPS, _HINT_EXPR, Expressions, _dotted
from .renaming import _version_rebindings
from .source import Source


class _Loop:
    def __init__(self, ident, brk, cnt):
        self.id, self.brk, self.cnt = ident, brk, cnt


def normalize(func, known=None):
    """The IR of ``func`` and the namespace (name -> object) its generated code runs in.

    ``known``: {parameter: function} for parameters that are functions the specialization is
    keyed on (``function_values.known``): calls of them are calls of that function by name."""
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
    norm = _Normalizer(src, params, body, known or {})
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


class _Normalizer(Expressions):
    def __init__(self, src, params, body, known):
        self.src = src
        self.params = params
        # (a parameter the body rebinds is no longer the function the call was specialised on)
        self.known = {p: f for p, f in known.items() if p not in _assigned_names(body)}
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
                parallel = snapshots is None and self.resolve_dotted(it, loop_fn) is numba.prange
                self.out.append(ir.For(s.target.id, start, stop, step, tuple(body), line, ident,
                                       snapshots, parallel))
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
