"""The normalised IR the AD transform works on, and its printer back to Python source.

After normalisation every operation has its own named result (A-normal form): operands are
atoms (a variable name or a constant), control flow is structured (``If``, ``For`` over a range
with bounds evaluated once, ``While``), and the body has one exit: a final ``Return``. ``break``,
``continue`` and early ``return`` have become flags and guarded blocks.

Nodes are immutable; passes build new data rather than annotate these.
"""

from dataclasses import dataclass, field, replace
from typing import Any, Tuple


@dataclass(frozen=True)
class Name:
    id: str

    def src(self):
        return self.id


@dataclass(frozen=True)
class Const:
    value: Any

    def src(self):
        v = self.value
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            # repr gives the undefined names inf / nan; the generated namespace has math
            return "_math.nan" if v != v else ("_math.inf" if v > 0 else "-_math.inf")
        return repr(v)


@dataclass(frozen=True)
class Slice:
    """``lower:upper:step`` inside an index; each part an atom (``Const(None)`` when omitted)."""
    lower: Any
    upper: Any
    step: Any

    def src(self):
        part = lambda a: "" if a == Const(None) else a.src()   # noqa: E731
        text = f"{part(self.lower)}:{part(self.upper)}"
        return text if self.step == Const(None) else f"{text}:{part(self.step)}"

    def parts(self):
        return (self.lower, self.upper, self.step)


def index_atoms(index):
    """The atoms an index reads: its scalar positions and the bounds of its slices."""
    out = []
    for i in index:
        out.extend(i.parts() if isinstance(i, Slice) else (i,))
    return tuple(out)


def has_slice(index):
    return any(isinstance(i, Slice) for i in index)


# --- expressions: one operation on atoms --------------------------------------------------------

@dataclass(frozen=True)
class Atom:
    """A copy: ``t = a``."""
    a: Any

    def atoms(self):
        return (self.a,)


@dataclass(frozen=True)
class BinOp:
    op: str            # one of + - * / // % ** & | ^ < <= > >= == !=
    a: Any
    b: Any

    def atoms(self):
        return (self.a, self.b)


@dataclass(frozen=True)
class UnaryOp:
    op: str            # - + not
    a: Any

    def atoms(self):
        return (self.a,)


@dataclass(frozen=True)
class Call:
    func: Any          # the resolved Python object being called
    fname: str         # the name it has in the generated module's namespace
    args: Tuple
    kwargs: Tuple = ()  # ((name, atom), ...)

    def atoms(self):
        return tuple(self.args) + tuple(a for _, a in self.kwargs)


@dataclass(frozen=True)
class MethodCall:
    """``obj.name(args)``: array methods such as ``x.copy()``."""
    obj: Any
    name: str
    args: Tuple = ()

    def atoms(self):
        return (self.obj,) + tuple(self.args)


@dataclass(frozen=True)
class Index:
    """``a[i, j]`` with scalar indices or slices (arrays), or a constant index (tuples)."""
    a: Any
    index: Tuple

    def atoms(self):
        return (self.a,) + index_atoms(self.index)


@dataclass(frozen=True)
class Attr:
    a: Any
    attr: str

    def atoms(self):
        return (self.a,)


@dataclass(frozen=True)
class MakeTuple:
    items: Tuple

    def atoms(self):
        return tuple(self.items)


# --- statements ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Assign:
    target: str
    expr: Any
    line: int = 0


@dataclass(frozen=True)
class Store:
    """``a[i, j] = v``."""
    array: str
    index: Tuple
    value: Any
    line: int = 0


@dataclass(frozen=True)
class If:
    test: Any
    body: Tuple
    orelse: Tuple
    line: int = 0


@dataclass(frozen=True)
class For:
    """``for var in range(start, stop, step)``; the bounds are atoms evaluated before the loop."""
    var: str
    start: Any
    stop: Any
    step: Any
    body: Tuple
    line: int = 0
    id: int = 0
    snapshots: Any = None   # nr.checkpointed(range(...), snapshots=k): the atom k (revolve.py)
    parallel: bool = False  # for ... in numba.prange(...): iterations independent (Numba's rule)


@dataclass(frozen=True)
class While:
    """``while True: <cond>; if not test: break; <body>`` with ``cond`` free of side effects."""
    cond: Tuple
    test: Any
    body: Tuple
    line: int = 0
    id: int = 0


@dataclass(frozen=True)
class Return:
    value: Any
    line: int = 0


@dataclass(frozen=True)
class Function:
    name: str
    params: Tuple
    body: Tuple            # ends with a Return
    file: str
    firstline: int
    source_lines: Tuple = field(default=(), compare=False)


# --- printing --------------------------------------------------------------------------------

def expr_src(e):
    if isinstance(e, (Name, Const)):
        return e.src()
    if isinstance(e, Atom):
        return e.a.src()
    if isinstance(e, BinOp):
        return f"{e.a.src()} {e.op} {e.b.src()}"
    if isinstance(e, UnaryOp):
        return f"{e.op} {e.a.src()}" if e.op == "not" else f"{e.op}{e.a.src()}"
    if isinstance(e, Call):
        parts = [a.src() for a in e.args] + [f"{k}={a.src()}" for k, a in e.kwargs]
        return f"{e.fname}({', '.join(parts)})"
    if isinstance(e, MethodCall):
        return f"{e.obj.src()}.{e.name}({', '.join(a.src() for a in e.args)})"
    if isinstance(e, Index):
        return f"{e.a.src()}[{', '.join(i.src() for i in e.index)}]"
    if isinstance(e, Attr):
        return f"{e.a.src()}.{e.attr}"
    if isinstance(e, MakeTuple):
        inner = ", ".join(a.src() for a in e.items)
        return f"({inner},)" if len(e.items) == 1 else f"({inner})"
    raise TypeError(f"not an IR expression: {e!r}")


def stmt_lines(s, indent, hook=None):
    """Python source lines for one statement. ``hook(stmt, indent)`` may add lines before it."""
    pad = "    " * indent
    out = list(hook(s, indent)) if hook else []
    if isinstance(s, Assign):
        out.append(f"{pad}{s.target} = {expr_src(s.expr)}")
    elif isinstance(s, Store):
        out.append(f"{pad}{s.array}[{', '.join(i.src() for i in s.index)}] = {s.value.src()}")
    elif isinstance(s, If):
        out.append(f"{pad}if {s.test.src()}:")
        out += block_lines(s.body, indent + 1, hook)
        if s.orelse:
            out.append(f"{pad}else:")
            out += block_lines(s.orelse, indent + 1, hook)
    elif isinstance(s, For):
        out.append(f"{pad}for {s.var} in {range_src(s.start, s.stop, s.step)}:")
        out += block_lines(s.body, indent + 1, hook)
    elif isinstance(s, While):
        out.append(f"{pad}while True:")
        out += block_lines(s.cond, indent + 1, hook)
        out.append(f"{pad}    if not {s.test.src()}:")
        out.append(f"{pad}        break")
        out += block_lines(s.body, indent + 1, hook)
    elif isinstance(s, Return):
        out.append(f"{pad}return {s.value.src()}")
    else:
        raise TypeError(f"not an IR statement: {s!r}")
    return out


def block_lines(stmts, indent, hook=None):
    out = []
    for s in stmts:
        out += stmt_lines(s, indent, hook)
    if not stmts:
        out.append("    " * indent + "pass")
    return out


def function_source(fn, name=None):
    """``fn`` printed back as Python; each statement's first line ends with ``# line N``, its
    line in the user's source (errors in the printed code are traced back through it)."""
    marker = "\0"
    lines, pending = [f"def {name or fn.name}({', '.join(fn.params)}):"], None
    for text in block_lines(fn.body, 1, lambda s, indent: [f"{marker}{s.line}"] if s.line else []):
        if text.startswith(marker):
            pending = text[1:]
            continue
        if pending:
            text, pending = f"{text}  # line {pending}", None
        lines.append(text)
    return "\n".join(lines) + "\n"


def user_line(source, generated_line):
    """The user's line that line ``generated_line`` of ``function_source`` output came from."""
    lines = source.splitlines()
    for k in range(min(generated_line, len(lines)) - 1, -1, -1):
        head, sep, tail = lines[k].rpartition("  # line ")
        if sep and tail.isdigit():
            return int(tail)
    return None


def blocks(stmts):
    """``stmts`` and every statement list nested in it (branch sides, loop bodies, while
    conditions), outermost first."""
    yield stmts
    for s in stmts:
        if isinstance(s, If):
            yield from blocks(s.body)
            yield from blocks(s.orelse)
        elif isinstance(s, For):
            yield from blocks(s.body)
        elif isinstance(s, While):
            yield from blocks(s.cond)
            yield from blocks(s.body)


def statements_after(block, node, parts=None):
    """The statements that may run after ``node`` in ``block``, in order: the rest of its
    block, each enclosing loop again (its next iteration: the loop statement itself), the rest
    of the block around that, out to the block's end; None where ``node`` is not in it.
    ``parts(s)``: the statement blocks inside ``s`` and whether ``s`` is a loop; this IR's by
    default (``parts_of``), Python's ``ast`` for generated source (ad/outline.py)."""
    parts = parts or parts_of
    for k, s in enumerate(block):
        if s is node:
            return list(block[k + 1:])
        inner_blocks, loop = parts(s)
        for part in inner_blocks:
            inner = statements_after(part, node, parts)
            if inner is not None:
                return inner + ([s] if loop else []) + list(block[k + 1:])
    return None


def parts_of(s):
    """(the statement blocks inside ``s``, whether ``s`` is a loop)."""
    if isinstance(s, If):
        return [s.body, s.orelse], False
    if isinstance(s, While):
        return [s.cond, s.body], True
    if isinstance(s, For):
        return [s.body], True
    return [], False


def walk(stmts):
    """Every statement, depth first, in program order."""
    for s in stmts:
        yield s
        if isinstance(s, If):
            yield from walk(s.body)
            yield from walk(s.orelse)
        elif isinstance(s, For):
            yield from walk(s.body)
        elif isinstance(s, While):
            yield from walk(s.cond)
            yield from walk(s.body)


def map_statements(stmts, f):
    """``stmts`` with every statement ``s`` (nested ones too, innermost first) replaced by
    ``f(s)``."""
    out = []
    for s in stmts:
        if isinstance(s, If):
            s = replace(s, body=map_statements(s.body, f), orelse=map_statements(s.orelse, f))
        elif isinstance(s, For):
            s = replace(s, body=map_statements(s.body, f))
        elif isinstance(s, While):
            s = replace(s, cond=map_statements(s.cond, f), body=map_statements(s.body, f))
        out.append(f(s))
    return tuple(out)


def range_src(start, stop, step):
    """``range(...)`` over IR values as written by hand: ``range(n)`` for ``range(0, n, 1)``."""
    a, b, c = start.src(), stop.src(), step.src()
    if c != "1":
        return f"range({a}, {b}, {c})"
    return f"range({b})" if a == "0" else f"range({a}, {b})"


def affine_src(start, j, step):
    """``start + j * step`` as written by hand: ``j`` for start 0 and step 1."""
    a, c = start.src(), step.src()
    term = j if c == "1" else f"{j} * {c}"
    return term if a == "0" else f"{a} + {term}"
