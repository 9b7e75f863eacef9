"""The user's function as the frontend reads it: its source and AST node (``inspect`` +
``ast.parse``, checked against the running code object), its file and lines, and every free name
resolved through its closure cells, globals and builtins."""

import ast
import builtins
import inspect
import linecache
import textwrap

from ..errors import UnsupportedSyntaxError


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
        try:
            tree = ast.parse(text)
            self.node = _find_function(tree, func)
        except (SyntaxError, UnsupportedSyntaxError):
            # inspect gives a lambda the lines of the statement it starts on, which may not
            # parse alone (the header of a for or a try); read it from its whole file instead
            text = _lambda_text(func) if func.__name__ == "<lambda>" else None
            if text is None:
                raise
            tree = ast.parse(text, mode="eval")
            self.node = tree.body
        self.lines = text.splitlines()
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
        return getattr(builtins, name, MISSING)


MISSING = object()


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


def _lambda_text(func):
    """The text of lambda ``func`` cut from its file (parenthesised), or None when no lambda on
    its line compiles to its code."""
    code = func.__code__
    whole = "".join(linecache.getlines(code.co_filename))
    try:
        tree = ast.parse(whole)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda) and node.lineno == code.co_firstlineno \
                and same_code(node, func):
            return "(" + ast.get_source_segment(whole, node) + ")"
    return None


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

