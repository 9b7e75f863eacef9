"""What we compile of the user's code for the CPU: method bodies (per method and argument
types), ``nr.jit`` functions, the plain Python helpers they call, and the namespaces they are
compiled in (plain helpers swapped for compiled ones, NumPy as numbarules compiles it).
``cuda/methods.py`` is the device's counterpart. Each compile is a node of the engine (cache)."""

import dis
import inspect

from . import numba_glue, pickling, registry
from .cache import compiled_of, counted, owned
from .errors import CompilationError, DispatchError
from .lattice import fmt_sig, from_numba, source_location


def resolve_call(f, context, argtypes):
    """The dispatcher a compiled call of generic function ``f`` at ``argtypes`` jumps to."""
    sig = tuple(from_numba(a) for a in argtypes)
    try:
        method = f.resolve(sig)
    except DispatchError as exc:
        numba_glue.pending_errors().append(exc)
        raise numba_glue.TypingError(str(exc)) from None
    return specialize(method, argtypes, context)


def specialize(method, argtypes, context=None):
    """The dispatcher of ``method`` compiled for ``argtypes`` (compiling it if needed)."""
    compiled = compiled_of(method)
    disp = compiled.get(tuple(argtypes))
    if disp is None:
        disp = compiled[tuple(argtypes)] = owned(_prepare(method.func), repr(method),
                                                 method.function, persist=("method", method))
    if context is not None and numba_glue.being_typed(context, disp, argtypes):
        return disp                 # a recursive call: the template types it
    if numba_glue.has_overload(disp, argtypes):
        counted("hits")
        return disp
    try:
        numba_glue.compile_for(disp, argtypes)
    except numba_glue.NumbaError as exc:
        pending = numba_glue.pending_errors()
        if not pending:
            pending.append(compile_error(method.func, f"method {method!r}", argtypes, exc))
        raise numba_glue.TypingError(str(pending[-1])) from None
    return disp


_CPU_ADVICE = "Method bodies and nr.jit functions must be Numba-compilable (nopython mode)."


def compile_error(func, what, argtypes, exc, target="", advice=_CPU_ADVICE):
    """The CompilationError for ``func`` (a method body, an nr.jit function, a helper) that Numba
    could not compile for ``argtypes``: where it is defined, Numba's reason, what to do.
    ``target``: " for the device" (cuda.methods), empty for the CPU."""
    file, line = source_location(func)
    sig = fmt_sig(tuple(from_numba(a) for a in argtypes))
    return CompilationError(
        f"{what} defined at {file}:{line} could not be compiled{target} at {sig}:\n"
        f"{numba_glue.error_text(exc)}\n{advice}",
        function=func, argtypes=argtypes, file=file, line=line)


def boundary_error(exc, func=None, args=()):
    pending = numba_glue.pending_errors()
    if pending:
        err = pending[0]
        pending.clear()
        where = [ln.strip() for ln in numba_glue.error_text(exc).splitlines()
                 if ln.strip().startswith("File ") and "<numbarules " not in ln]
        if where and isinstance(err, DispatchError) and "Called from" not in err.args[0] \
                and "File " not in err.args[0]:
            err.args = (f"{err.args[0]}\nCalled from {where[-1]}",)
        return err
    if func is not None:
        return compile_error(func, f"nr.jit function {func.__qualname__}", args, exc)
    return None


# --- nr.jit and plain helpers ------------------------------------------------------------------

def jit(func=None, **options):
    """``numba.njit`` plus backedges: recompiled when a generic function it relies on changes.

    Plain Python functions it calls are compiled alongside (with backedges too).
    """
    if func is None:
        return lambda fn: jit(fn, **options)
    if options.get("cache"):
        raise ValueError("nr.jit does not take cache=True: Numba's cache ignores dispatch decisions "
                         "and would load stale code (numbarules' own disk cache is keyed safely)")
    return _jit(func, options, _options_key(options), internal=False)


def _jit(func, options, key, internal):
    """The nr.jit dispatcher of ``func``, held by ``func`` under ``key``. ``internal``: only
    compiled code calls it (a helper our kernels call), so Numba makes no wrappers for it."""
    prepared, fill = _prepare_deferred(func)
    disp = owned(prepared, func.__qualname__, None, options,
                 persist=("jit", func, sorted(options.items(), key=repr), internal),
                 python=not internal, cfunc=not internal)
    # held by the function, before its callees are swapped in: they may call it back
    registry.table(func, "_nr_jit")[key] = disp
    # what the AD engine differentiates when generated code calls this dispatcher (targets.
    # source_of): the user's function, whose names resolve in its own globals, not the copy
    # Numba compiles (NumPy's stand-ins and helpers swapped in)
    disp._nr_source = func
    fill()

    def before(d, args):
        numba_glue.pending_errors().clear()

    disp.before_compile = before
    if not internal:
        # pickled as the user's function and options (pickling.py): Numba's own reduction
        # would carry the prepared copy, whose globals hold our stand-ins for NumPy
        disp.reduce = lambda: pickling.reduce_jit(disp, func, options)
    disp.on_error = lambda d, args, exc: boundary_error(
        exc, func, numba_glue.typeof_args(d, args))
    return disp


def is_plain(value):
    """A pure-Python function Numba cannot call as it is (so we compile it alongside)."""
    return inspect.isfunction(value) and not numba_glue.numba_types_value(value)


def _prepare(func):
    """``func`` with the plain Python functions it names replaced by their nr.jit versions."""
    prepared, fill = _prepare_deferred(func)
    fill()
    return prepared


def global_names(func):
    """The global names ``func`` (and the functions defined in it) load.

    Global loads only: ``co_names`` also holds attribute names, and ``np.concatenate`` inside a
    module-level ``def concatenate`` must not make the function call itself."""
    names = set()
    stack = [func.__code__]
    while stack:
        code = stack.pop()
        names.update(i.argval for i in dis.get_instructions(code)
                     if i.opname in ("LOAD_GLOBAL", "LOAD_NAME"))
        stack += [c for c in code.co_consts if inspect.iscode(c)]
    return names


def _prepare_deferred(func):
    """(``func`` rebuilt over its own copy of its globals, a function that swaps the plain
    Python functions it names for their nr.jit versions in that copy).

    The swap is deferred so that the caller can register the compiled version of ``func`` first:
    a plain function that calls itself (or one that calls it back) then finds it, instead of
    preparing the same function again forever.
    """
    names = global_names(func)
    from .primitives import arrays     # not at the top: importing numbarules.primitives registers
    #                                    every built-in rule, once the core modules are loaded
    glb = func.__globals__
    swaps = {n: glb[n] for n in names if n in glb and is_plain(glb[n])}
    # NumPy as numbarules compiles it (np.max(x, axis): primitives/arrays.py), swapped at once
    numpy = any(arrays.for_numba(glb[n]) is not glb[n] for n in names if n in glb)
    cells = func.__closure__ or ()
    cell_swaps = [i for i, c in enumerate(cells) if is_plain(_cell_value(c))]
    cell_numpy = {i: arrays.for_numba(_cell_value(c)) for i, c in enumerate(cells)}
    cell_numpy = {i: v for i, v in cell_numpy.items() if v is not _cell_value(cells[i])}
    if not swaps and not cell_swaps and not numpy and not cell_numpy:
        return func, lambda: None
    live, glb = glb, dict(glb)
    closure = tuple(_new_cell(c.cell_contents) if i in cell_swaps else
                    _new_cell(cell_numpy[i]) if i in cell_numpy else c
                    for i, c in enumerate(cells)) or None
    new = _rebuilt(func, glb, closure)

    def fill():
        glb.update({n: helper(v) for n, v in swaps.items()})
        for i in cell_swaps:
            closure[i].cell_contents = helper(closure[i].cell_contents)

    def refresh():
        # The copy of the globals must not freeze them: a global the module rebinds later
        # (K = 3.0) is what the next compile sees, as under numba.njit. numba_glue.Dispatcher
        # calls this before each compile. (Swapped helpers keep their compiled versions.)
        for k, v in live.items():
            if k not in swaps:
                glb[k] = arrays.for_numba(v)
    refresh()
    new._nr_refresh = refresh
    return new, fill


def swapped(func, swap):
    """``func`` over a copy of its globals and closure in which each value it names is
    ``swap(value)`` (``func`` itself when nothing changes): how a target's compile sees the
    names a function calls (cuda.methods.prepare)."""
    glb = func.__globals__
    swaps = {n: swap(glb[n]) for n in global_names(func) if n in glb}
    swaps = {n: v for n, v in swaps.items() if v is not glb[n]}
    cells = func.__closure__ or ()
    values = [_cell_value(c) for c in cells]
    new_values = [swap(v) if v is not None else v for v in values]
    if not swaps and all(a is b for a, b in zip(new_values, values)):
        return func
    closure = tuple(c if new is old else _new_cell(new)
                    for c, old, new in zip(cells, values, new_values)) or None
    return _rebuilt(func, dict(glb, **swaps), closure)


def _rebuilt(func, glb, closure):
    new = type(func)(func.__code__, glb, func.__name__, func.__defaults__, closure)
    new.__qualname__ = func.__qualname__
    new.__module__ = func.__module__
    return new


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:   # an empty cell
        return None


def _new_cell(value):
    return (lambda: value).__closure__[0]


def helper(func):
    """The compiled version of a plain Python function that compiled code calls (one per
    function, held by it; not callable from Python)."""
    return jit_helper(func, _HELPER)


_HELPER = ("helper",)


def jit_helper(func, key):
    """A compiled helper of ``func`` held under ``key`` (function_values: one per set of the
    values it captures, which its compiled code freezes)."""
    disp = registry.table(func, "_nr_jit").get(key)
    return disp if disp is not None else _jit(func, {}, key, internal=True)


def partials(func):
    """The compiled partial derivatives of a scalar rule: NumPy's error model always (a pole
    gives inf, as in JAX: d/dx sqrt(x) at 0), whatever the kernel calling it. Numba would
    otherwise compile it with the error model of the first caller (flags are inherited), and
    the forward kernels keep Python's, where dividing by zero raises."""
    made = registry.table(func, "_nr_jit")
    disp = made.get(_PARTIALS)
    if disp is None:
        disp = _jit(func, {"error_model": "numpy"}, _PARTIALS, internal=True)
    return disp


_PARTIALS = ("partials",)


def _options_key(options):
    return tuple(sorted(options.items(), key=repr))
