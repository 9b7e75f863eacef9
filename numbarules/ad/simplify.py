"""Clean-ups of generated kernel source, so that ``nr.code`` reads like hand-written Numba.

The emitter declares variables before the code that sets them (an adjoint starts at zero, a
residual is defined before the branch that may set it) and leaves adjoint stores that nothing
reads (``d_s = -0.0`` after the last use). Where no later statement can read such a value, the
assignment is dropped here. Numba would drop it too (its IR is in SSA form and dead stores go),
so this changes what a reader sees, not the machine code.

Only assignments of a constant, a negated constant or a name are dropped, and an assignment to
a variable of the user's function only in the declarations before the first statement of the
user's code (its ``# line`` comment): Numba types a variable by unifying all its assignments,
and the emitter's declarations are zeros of the variable's own type, so dropping one changes no
type, while dropping the user's own ``t = 0.0`` before ``t = n`` could turn ``t`` into an int.

The pass works on the source text: ``ast`` finds the lines, and the lines are deleted from the
text, so comments (``# line 12: ...``) and formatting stay as emitted.
"""

import ast
import re

_LINE_COMMENT = re.compile(r"\s*# line \d+")


def drop_dead_inits(source, primal=frozenset()):
    """``source`` (one or more ``def`` statements) without its dead simple assignments.
    ``primal``: the names of the user's function's variables."""
    tree = ast.parse(source)
    lines = source.split("\n")
    dead = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            first = next((k for k in range(node.lineno, node.end_lineno + 1)
                          if _LINE_COMMENT.match(lines[k - 1])), node.end_lineno + 1)
            dead |= _dead_in(node.body, lambda stmt, name: name not in primal
                             or stmt.lineno < first)
    if not dead:
        return source
    return "\n".join(line for k, line in enumerate(lines, 1) if k not in dead)


def _dead_in(body, may_drop):
    """Line numbers of the dead assignments among ``body``'s top-level statements: ``v = c``
    with ``c`` a constant, a negated constant or a name, that ``may_drop(stmt, v)`` allows and
    whose value no statement after it can read (see ``_reads_before_set``)."""
    dead = set()
    for i, stmt in enumerate(body):
        name = _simple_assignment(stmt)
        if name is not None and may_drop(stmt, name) \
                and not _reads_before_set(body[i + 1:], name):
            dead.add(stmt.lineno)
    return dead


def _reads_before_set(stmts, name):
    """Whether running ``stmts`` may read the value ``name`` has before them. Scanned in order:
    ``name = e`` (``e`` not reading it) ends the scan; a loop or a branch whose every path sets
    ``name`` before reading it, or does not mention it, lets the value through to what follows
    (a loop may run zero times); anything else that mentions ``name`` may read it."""
    for stmt in stmts:
        if name not in _names(stmt):
            continue
        if _sets_first(stmt, name):
            return False
        if isinstance(stmt, ast.If) or isinstance(stmt, (ast.For, ast.While)) and not stmt.orelse:
            header = stmt.iter if isinstance(stmt, ast.For) else stmt.test
            if name in _names(header) or isinstance(stmt, ast.For) and name in _names(stmt.target):
                return True
            if any(_reads_before_set(part, name) for part in _parts(stmt)):
                return True
            continue
        return True
    return False


def _parts(stmt):
    return (stmt.body, stmt.orelse) if isinstance(stmt, ast.If) else (stmt.body,)


def _sets_first(stmt, name):
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == name
            and name not in _names(stmt.value))


def _simple_assignment(stmt):
    """The target of ``v = c`` / ``v = -c`` / ``v = w`` on one line, else None."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and stmt.lineno == stmt.end_lineno):
        return None
    value = stmt.value
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, (ast.USub, ast.UAdd)):
        value = value.operand
    if isinstance(value, ast.Constant) and isinstance(value.value, (bool, int, float)) \
            or isinstance(stmt.value, ast.Name):
        return stmt.targets[0].id
    return None


def _names(node):
    # kept on the node: every dead-store candidate scans the statements after it (quadratic
    # walks cost 50-70 ms of a first gradient before)
    got = getattr(node, "_nr_names", None)
    if got is None:
        got = node._nr_names = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
    return got
