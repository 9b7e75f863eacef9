"""A scalar rule's partial derivatives written into the kernel instead of called.

A scalar rule (``nr.scalar_rule``) is a Python function returning the partials as a tuple. The
reverse pass may call it compiled (``_p = _partials_sin(x)``; ``d_x += g * _p[0]``): that is
one more Numba dispatcher to compile in every process, 15-45 ms before a first gradient
(docs/numba-internals.md, "What compiling costs"). When the function is one expression that
means the same in every kernel, the reverse pass writes that expression at the call instead
(``d_x += g * math.cos(x)``), which compiles nothing of its own and reads like hand-written code.

The same in every kernel: partials are compiled with NumPy's error model (a pole gives inf, as
in JAX), the kernels that call them mostly with Python's (dividing by zero raises). So only
expressions that cannot divide by zero are written in: ``+ - *``, a division by a constant,
comparisons, conditional expressions and the ``math`` functions that never raise in compiled
code. ``1.0 / x`` (log) keeps the compiled call.
"""

import ast
import copy
import inspect
import math
import textwrap
import weakref

from .source import same_code

#: math functions compiled code evaluates without raising (a domain error gives nan or inf)
_MATH_FUNCTIONS = frozenset({
    "sin", "cos", "tan", "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "tanh",
    "sinh", "cosh", "atan", "asin", "acos", "atan2", "erf", "erfc", "fabs", "copysign",
    "hypot", "floor", "ceil", "isnan", "isinf", "isfinite"})
_MATH_CONSTANTS = frozenset({"pi", "e", "inf", "tau"})
_ARITH = (ast.Add, ast.Sub, ast.Mult)

_MEMO = weakref.WeakKeyDictionary()


def inline_form(func):
    """``(params, (expr, ...))``: the parameter names and one ``ast`` expression per partial,
    when ``func`` is a single ``return`` of a tuple (or of conditional expressions choosing
    between tuples) built from what ``_allowed`` accepts; else None."""
    try:
        return _MEMO[func]
    except KeyError:
        pass
    except TypeError:           # not weakly referenceable
        return _form(func)
    form = _MEMO[func] = _form(func)
    return form


def _form(func):
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    fn = tree.body[0]
    if not same_code(fn, func):      # the file changed after it was loaded
        return None
    args = fn.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
        return None
    params = tuple(a.arg for a in args.args)
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]                 # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    parts = _components(body[0].value)
    if parts is None or not all(_allowed(p, params) for p in parts):
        return None
    if "math" in params or not _uses_module_math(func) or not _agrees(func, params, parts):
        return None
    return params, tuple(parts)


_POINTS = (0.3, -1.7, 2.5, 0.0, 1.0, -0.6)


def _agrees(func, params, parts):
    """The expressions give what ``func`` returns at a few points (the same floats)."""
    n = len(params)
    compiled = [compile(ast.Expression(ast.fix_missing_locations(p)), "<partial>", "eval")
                for p in parts]
    for k in range(len(_POINTS)):
        point = tuple(_POINTS[(k + i) % len(_POINTS)] for i in range(n))
        env = dict(zip(params, point), math=math)
        try:
            want = func(*point)
            got = tuple(eval(c, {"__builtins__": {}}, env) for c in compiled)  # noqa: S307
        except Exception:   # noqa: BLE001 - a user's partials failing in Python: keep the call
            return False
        if not isinstance(want, tuple) or len(want) != len(got) or any(
                not (a == b or (a != a and b != b)) for a, b in zip(want, got)):
            return False
    return True


def _uses_module_math(func):
    """``math`` in the function's globals is the math module (what the kernels name math)."""
    return func.__globals__.get("math", math) is math


def _components(e):
    """The partials of a tuple expression, one expression each: ``(a, b) if c else (u, v)``
    gives ``a if c else u`` and ``b if c else v``."""
    if isinstance(e, ast.Tuple):
        return list(e.elts) if not any(isinstance(x, ast.Starred) for x in e.elts) else None
    if isinstance(e, ast.IfExp):
        body, orelse = _components(e.body), _components(e.orelse)
        if body is None or orelse is None or len(body) != len(orelse):
            return None
        return [ast.IfExp(test=e.test, body=b, orelse=o) for b, o in zip(body, orelse)]
    return None


def _allowed(e, params):
    if isinstance(e, ast.Constant):
        return type(e.value) in (int, float, bool)
    if isinstance(e, ast.Name):
        return e.id in params
    if isinstance(e, ast.Attribute):
        return _is_math(e.value) and e.attr in _MATH_CONSTANTS
    if isinstance(e, ast.UnaryOp):
        return isinstance(e.op, (ast.USub, ast.UAdd, ast.Not)) and _allowed(e.operand, params)
    if isinstance(e, ast.BinOp):
        if isinstance(e.op, _ARITH):
            return _allowed(e.left, params) and _allowed(e.right, params)
        if isinstance(e.op, ast.Div):       # by a nonzero constant only (see the docstring)
            return _allowed(e.left, params) and _nonzero_constant(e.right)
        return False
    if isinstance(e, ast.Compare):
        return all(_allowed(x, params) for x in [e.left] + e.comparators)
    if isinstance(e, ast.BoolOp):
        return all(_allowed(x, params) for x in e.values)
    if isinstance(e, ast.IfExp):
        return all(_allowed(x, params) for x in (e.test, e.body, e.orelse))
    if isinstance(e, ast.Call):
        return (isinstance(e.func, ast.Attribute) and _is_math(e.func.value)
                and e.func.attr in _MATH_FUNCTIONS and not e.keywords
                and all(_allowed(a, params) for a in e.args))
    return False


def _is_math(e):
    return isinstance(e, ast.Name) and e.id == "math"


def _nonzero_constant(e):
    """A constant expression (numbers, math constants, math functions of them) that is not 0."""
    if any(isinstance(n, ast.Name) and n.id != "math" for n in ast.walk(e)):
        return False
    if not _allowed(e, ()):
        return False
    try:
        value = eval(compile(ast.Expression(e), "<partial>", "eval"), {"math": math})  # noqa: S307
    except (ArithmeticError, ValueError):
        return False
    return isinstance(value, (int, float)) and value != 0 and math.isfinite(value)


def factor(form, k, args):
    """``source`` as a factor of a product: parenthesised unless it is a name, a number or a
    call (a product is parenthesised too: ``g * (a * b)`` rounds as the helper did)."""
    text = source(form, k, args)
    top = ast.parse(text, mode="eval").body
    if isinstance(top, (ast.Name, ast.Constant, ast.Call, ast.Attribute, ast.Subscript)) \
            and not (isinstance(top, ast.Constant) and str(top.value).startswith("-")):
        return text
    return f"({text})"


def source(form, k, args):
    """The source of partial ``k`` of ``form`` (``inline_form``) at argument sources ``args``
    (parenthesised as Python needs)."""
    params, parts = form
    subst = {p: ast.parse(a, mode="eval").body for p, a in zip(params, args)}

    class Substitute(ast.NodeTransformer):
        def visit_Name(self, node):
            return subst.get(node.id, node)

    expr = Substitute().visit(copy.deepcopy(parts[k]))
    return ast.unparse(expr)
