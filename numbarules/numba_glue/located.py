"""Run-time errors of compiled code at the user's line, at no run-time cost.

Numba gives an exception raised in compiled code a traceback frame only when the ``raise`` was
lowered with a source location: a ``raise`` statement in the function. Its own implementations
(broadcasting, ``np.dot``, ``reshape``, bounds checks) raise through the call convention with
no location, so ``C + B`` with shapes that do not broadcast fails with no line at all.

Our compiles (``_RecordingCompiler``) lower with ``LocatingLower`` and a ``LocatingCallConv``
on their own copy of the target context (Numba makes one per compile, ``_make_subtarget``): an
exception raised while lowering a statement, through that statement's builder, gets the
statement's location. For generated kernels the location is the user's line the statement came
from: ``targets.exec_source`` registers, per generated file, the line each ``# line N`` comment
explains (``register_lines``). Plain ``@numba.njit`` code is compiled as before, and
subroutines Numba compiles and caches for everyone (``compile_subroutine``) are lowered with
their own builder, so they never carry a line of ours.
"""

import linecache
import os
import re
import weakref

from numba.core import callconv, ir, lowering, typed_passes
from numba.core.compiler_machinery import register_pass

from ..errors import CompilationError

_NAMED_AT = re.compile(r'\nFile "[^"]*", line \d+, ?$')

#: generated file name -> (user's file, user's function, {generated line: user's line})
_LINES = {}


def register_lines(filename, user_file, function, source):
    """Map the lines of generated ``source`` (compiled as ``filename``) to the user's lines
    their ``# line N: ...`` comments name; lines before the first comment map to none."""
    table, current = {}, None
    for k, text in enumerate(source.splitlines(), start=1):
        stripped = text.strip()
        if stripped.startswith("# line "):
            number = stripped[len("# line "):].split(":", 1)[0]
            current = int(number) if number.isdigit() else None
        elif stripped.startswith("def "):
            current = None
        elif current is not None and stripped:
            table[k] = current
    _LINES[filename] = (user_file, function, table)


def forget_lines(filename):
    _LINES.pop(filename, None)


def user_loc(here):
    """(the user's location, function name) of statement location ``here``, or None: generated
    code maps to the line its ``# line`` comment names; glue with no user line behind it (an
    entry, a rule's wrapper) to none."""
    if not isinstance(here, ir.Loc) or not here.filename:
        return None
    mapped = _LINES.get(here.filename)
    if mapped is not None:
        user_file, function, table = mapped
        line = table.get(here.line)
        return None if line is None else (ir.Loc(user_file, line), function)
    if here.filename.startswith("<"):
        return None
    return here, None


class LocatingCallConv(callconv.CPUCallConv):
    """Numba's CPU call convention (the same ABI) whose user exceptions default to the location
    of the statement being lowered."""

    def _where(self, builder, loc, func_name):
        low = getattr(self.context, "nr_lowerer", None)
        low = low() if low is not None else None
        if loc is not None or low is None or builder is not getattr(low, "builder", None):
            return loc, func_name
        found = user_loc(low.loc)
        return found if found is not None else (loc, func_name)

    def set_static_user_exc(self, builder, exc, exc_args=None, loc=None, func_name=None):
        loc, func_name = self._where(builder, loc, func_name)
        if exc_args and isinstance(exc_args[0], str) and _NAMED_AT.search(exc_args[0]) \
                and (loc is not None or "<numbarules " in exc_args[0]):
            # Numba's broadcasting error names the statement it read from errors.loc_info,
            # which the array expression's own compile has just overwritten with its line 1
            where = f'\nFile "{loc.filename}", line {loc.line}, ' if loc is not None else ""
            exc_args = (_NAMED_AT.sub(where, exc_args[0]),) + tuple(exc_args[1:])
        return super().set_static_user_exc(builder, exc, exc_args, loc=loc,
                                           func_name=func_name)

    def set_dynamic_user_exc(self, builder, exc, exc_args, nb_types, loc=None, func_name=None):
        loc, func_name = self._where(builder, loc, func_name)
        return super().set_dynamic_user_exc(builder, exc, exc_args, nb_types, loc=loc,
                                            func_name=func_name)


class LocatingLower(lowering.Lower):
    def __init__(self, context, *args, **kwargs):
        super().__init__(context, *args, **kwargs)
        if isinstance(self.context, _LocatedContext):     # the lowerer's own copy of it
            # weakly: the context outlives the compile (an array expression's kernel compiled
            # with it stays in Numba's process-wide cache of subroutines), and a lowerer holds
            # its function's whole LLVM and Numba IR (150,000 Python objects per fuzz program
            # were kept alive; docs/numba-internals.md, "The garbage collector")
            self.context.nr_lowerer = weakref.ref(self)


def code_generation_error(exc):
    """A CompilationError for ``exc``, which Numba's compile raised though it is none of
    Numba's errors (its lowering asserts or raises NotImplementedError on code its typing
    accepted, and new-style errors let these out raw, with no location), at the innermost
    statement of generated or user code that was being typed or lowered. ``numba_failure`` keeps
    its text (the fuzzer counts these as the engine's failures, not as refusals)."""
    loc = _failing_loc(exc)
    found = user_loc(loc)
    reason = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if found is not None:
        here, function = found
        text = linecache.getline(here.filename, here.line).strip()
        where = f'  File "{here.filename}", line {here.line}, in {function or "?"}' + \
            (f"\n    {text}" if text else "")
    else:
        here, function = loc, None
        where = f"  in numbarules' generated code ({getattr(loc, 'filename', '?')}, line " \
                f"{getattr(loc, 'line', '?')})"
    if "layout 'A'" in reason or _raised_in(exc, "array_to_array"):
        hint = ("Hint: a name bound to arrays of two layouts (C on one path, F on another: a "
                "column of a Fortran array, a transpose) has Numba's layout 'A', and Numba cannot "
                "allocate or store into a result of that layout. Give every binding one layout "
                "(np.ascontiguousarray(...) where it is first bound).")
    else:
        hint = ("Hint: if numba.njit compiles the function for these arguments, this is a "
                "numbarules bug: please report it with this message.")
    err = CompilationError(f"Numba typed this code but could not generate machine code for it "
                           f"({reason})\n{where}\n{hint}",
                           file=getattr(here, "filename", None), line=getattr(here, "line", None))
    err.numba_failure = reason      # the text only: the traceback holds whole compiles alive
    return err


def _failing_loc(exc):
    """The location of the innermost statement of ours or the user's that Numba was typing
    (a call constraint's ``loc``) or lowering (``inst.loc``) when ``exc`` was raised; statements of
    Numba's own implementations (a typed list's ``append``) are skipped."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        names = tb.tb_frame.f_locals
        for loc in (getattr(names.get("inst"), "loc", None),
                    getattr(names.get("self"), "loc", None), names.get("loc")):
            if isinstance(loc, ir.Loc) and loc.filename \
                    and not loc.filename.startswith(_NUMBA_DIR) and user_loc(loc) is not None:
                found = loc
                break
        tb = tb.tb_next
    return found


def _raised_in(exc, name):
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == name:
            return True
        tb = tb.tb_next
    return False


@register_pass(mutates_CFG=True, analysis_only=False)
class LocatingLowering(typed_passes.NativeLowering):
    _name = "numbarules_native_lowering"

    @property
    def lowering_class(self):
        return LocatingLower


class _LocatedContext:
    """Mixed into the class of a compile's own copy of the CPU target context: Numba's
    ``CPUContext.call_conv`` is a property that makes a new call convention at each use."""

    nr_lowerer = None

    @property
    def call_conv(self):
        return LocatingCallConv(self)


_CLASSES = {}
_NUMBA_DIR = os.path.dirname(os.path.dirname(lowering.__file__))


def locate_errors(compiler_state, pipeline):
    """Give a compile of ours (its state, its nopython pipeline) located run-time errors."""
    ctx = compiler_state.targetctx
    base = type(ctx)
    if not isinstance(ctx, _LocatedContext) and type(ctx.call_conv) is callconv.CPUCallConv:
        cls = _CLASSES.get(base)
        if cls is None:
            cls = _CLASSES[base] = type(f"Located{base.__name__}", (_LocatedContext, base), {})
        ctx.__class__ = cls     # this compile's copy only (compiler._make_subtarget)
    pipeline.passes = [(LocatingLowering if cls is typed_passes.NativeLowering else cls, what)
                       for cls, what in pipeline.passes]
