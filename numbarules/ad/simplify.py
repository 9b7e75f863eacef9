"""Clean-ups of generated kernel source, so that ``nr.code`` reads like hand-written Numba.

The emitter declares variables before the code that sets them (an adjoint starts at zero, a
residual is defined before the branch that may set it); where the next top-level statement that
mentions such a name simply assigns it, the declaration is dead and dropped here. Numba would
drop it too (its IR is in SSA form and dead stores go), so this changes what a reader sees, not
the machine code. Only declarations by a constant are dropped (``_d5 = 0.0``, ``_n2 = 0``): the
emitter writes them as zeros of the variable's own type, so dropping one changes no variable's
type in Numba's unification of its assignments.

The pass works on the source text: ``ast`` finds the lines, and the lines are deleted from the
text, so comments (``# line 12: ...``) and formatting stay as emitted.
"""

import ast


def drop_dead_inits(source):
    """``source`` (one or more ``def`` statements) without the dead constant declarations."""
    tree = ast.parse(source)
    dead = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            dead |= _dead_in(node.body)
    if not dead:
        return source
    lines = source.split("\n")
    return "\n".join(line for k, line in enumerate(lines, 1) if k not in dead)


def _dead_in(body):
    """Line numbers of the dead declarations among ``body``'s top-level statements: ``v = c``
    with ``c`` a constant, where the next top-level statement that mentions ``v`` is ``v = e``
    with ``e`` not reading ``v``, or where nothing after it mentions ``v``. A loop, a branch or
    any other statement mentioning ``v`` keeps the declaration (it may read it)."""
    mentions = [_names(stmt) for stmt in body]
    dead = set()
    for i, stmt in enumerate(body):
        name = _constant_declaration(stmt)
        if name is None:
            continue
        for j in range(i + 1, len(body)):
            if name not in mentions[j]:
                continue
            later = body[j]
            if _assigned_name(later) == name and name not in _names(later.value):
                dead.add(stmt.lineno)
            break
        else:
            dead.add(stmt.lineno)
    return dead


def _constant_declaration(stmt):
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and stmt.lineno == stmt.end_lineno
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, (bool, int, float))):
        return stmt.targets[0].id
    return None


def _assigned_name(stmt):
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
            and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    return None


def _names(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
