"""Generic functions, methods and Julia's resolution rule.

Resolution (plum's shape): collect the applicable methods, keep the one more specific than all
others. A method is more specific than another when its signature is a subtype, position by
position. No applicable method is ``NoMethodError``; several maximal ones are ``AmbiguityError``,
never a silent tie-break.

This module owns the method tables. What happens to compiled code when a table changes is the
cache's business: it registers itself as the backend (``set_backend``) and is told about every
change (``backend.method_changed``), under the compiler lock.
"""

import inspect
import itertools

from . import numba_glue
from .errors import AmbiguityError, NoMethodError, SignatureError
from .lattice import LatticeMeta, annotation_type, as_lattice, fmt_sig, issubtype, meet, source_location, typeof

_backend = None


def set_backend(backend):
    """Install the object that compiles specializations (numbarules.cache does this on import)."""
    global _backend
    _backend = backend


def backend():
    return _backend


class Method:
    """One method of a generic function: a signature of lattice types and a Python body."""

    # __dict__: the compiled specializations of the method live on it (numbarules.registry)
    __slots__ = ("function", "signature", "func", "params", "file", "line", "__weakref__",
                 "__dict__")

    def __init__(self, function, signature, func, params):
        self.function = function
        self.signature = tuple(signature)
        self.func = func
        self.params = tuple(params)
        self.file, self.line = source_location(func)

    def __repr__(self):
        inner = ", ".join(f"{p}::{t!r}" for p, t in zip(self.params, self.signature))
        return f"{self.function.__name__}({inner})"

    def where(self):
        return f"{self.file}:{self.line}"

    def _nr_fingerprint(self):
        # What the disk cache compares: the signature and the body (line numbers aside).
        return ("method", repr(self), self.func)


def more_specific(a, b):
    """Signature ``a`` is strictly more specific than ``b`` (``a <: b`` and not equal)."""
    return (len(a) == len(b) and a != b
            and all(issubtype(x, y) for x, y in zip(a, b)))


def applicable(sig, call):
    return len(sig) == len(call) and all(issubtype(c, s) for c, s in zip(call, sig))


class GenericFunction:
    """A function with several methods, dispatched on the types of all its arguments.

    Call it from Python (compiled once per argument types, then a direct jump into machine code),
    from methods, ``nr.jit`` and ``@numba.njit`` functions (dispatched at compile time), or pass it
    as an argument to compiled code.
    """

    _ids = itertools.count()

    def __new__(cls, func=None):
        # Each generic function gets a class of its own so that ``__call__`` can be the compiled
        # trampoline itself (a C-level call), not a Python method in front of it.
        own = type(cls.__name__, (cls,), {"__module__": cls.__module__})
        return object.__new__(own)

    def __init__(self, func):
        self._named(func.__name__, func.__qualname__, func.__module__, func.__doc__)
        self.__wrapped__ = func
        self._add(func, None)

    def _named(self, name, qualname, module, doc):
        self.__name__ = name
        self.__qualname__ = qualname
        self.__module__ = module
        self.__doc__ = doc
        self.id = next(self._ids)
        self.world = 0
        # The table and its resolution cache are swapped together, so a resolution racing a
        # method definition can never cache an old answer in the new table.
        self._table = ((), {})

    @classmethod
    def blank(cls, name, qualname, module, doc=None):
        """A generic function with no methods yet (a pickled one arriving: see pickling)."""
        f = cls.__new__(cls)
        f._named(name, qualname, module, doc)
        return f

    def __reduce__(self):
        # its name, methods and rules; never compiled code (pickling.py)
        from . import pickling
        return pickling.reduce_generic(self)

    def __setstate__(self, state):
        from . import pickling
        pickling.apply_generic_state(self, state)
        if "__wrapped__" not in self.__dict__ and self._table[0]:
            self.__wrapped__ = self._table[0][0].func

    def __repr__(self):
        n = len(self._table[0])
        return f"<generic function {self.__qualname__} with {n} method{'s' * (n != 1)}>"

    def __call__(self, *args):
        # Only reached before the first call installs the trampoline (see _backend.install_call).
        _backend.install_call(self)
        return type(self).__call__(*args)

    @property
    def _numba_type_(self):
        return _backend.numba_type(self)

    def _nr_fingerprint(self):
        # Its name only: which method runs, and that method's body, are decisions the disk
        # cache records and checks separately.
        # (a process multiprocessing spawns runs the main script as __mp_main__: the same code)
        module = "__main__" if self.__module__ == "__mp_main__" else self.__module__
        return ("generic", module, self.__qualname__)

    # --- the method table ---------------------------------------------------------------------

    @property
    def methods(self):
        return list(self._table[0])

    def method(self, *types):
        """``@f.method`` (types from annotations) or ``@f.method(T1, T2)``; returns ``f``."""
        if len(types) == 1 and inspect.isfunction(types[0]) and not isinstance(types[0], LatticeMeta):
            self._add(types[0], None)
            return self

        def decorate(func):
            self._add(func, types)
            return self
        return decorate

    def _add(self, func, types):
        method = _make_method(self, func, types)
        with numba_glue.LOCK:
            methods = self._table[0]
            old = next((m for m in methods if m.signature == method.signature), None)
            self._table = (tuple(m for m in methods if m is not old) + (method,), {})
            self.world += 1
            if _backend is not None:
                _backend.method_changed(self, old, method)
        return method

    # --- resolution ---------------------------------------------------------------------------

    def which(self, *args):
        """The method a call with these arguments (values or lattice types) would run."""
        return self.resolve(tuple(a if isinstance(a, LatticeMeta) else typeof(a) for a in args))

    def resolve(self, sig):
        """The most specific method for a tuple of lattice types, or a DispatchError."""
        methods, cache = self._table
        hit = cache.get(sig)
        if hit is None:
            hit = cache[sig] = _resolve(self, methods, sig)
        return hit

    def arities(self):
        return sorted({len(m.signature) for m in self._table[0]})


def _resolve(f, methods, sig):
    found = [m for m in methods if applicable(m.signature, sig)]
    if len(found) == 1:
        return found[0]
    best = [m for m in found if all(o is m or more_specific(m.signature, o.signature) for o in found)]
    if len(best) == 1:
        return best[0]
    if not found:
        raise _no_method(f, methods, sig)
    maximal = [m for m in found if not any(more_specific(o.signature, m.signature) for o in found)]
    raise _ambiguity(f, maximal, sig)


def _no_method(f, methods, sig):
    call = f"{f.__name__}{fmt_sig(sig)}"
    lines = [f"no method of {f.__name__} matches the call {call}."]
    close = sorted((m for m in methods if len(m.signature) == len(sig)),
                   key=lambda m: -sum(issubtype(c, s) for c, s in zip(sig, m.signature)))
    others = [m for m in methods if len(m.signature) != len(sig)]
    if close or others:
        lines.append("Closest candidates:")
        lines += [f"  {m!r} at {m.where()}" for m in (close + others)[:6]]
    else:
        lines.append(f"{f.__name__} has no methods.")
    params = ", ".join(f"a{i}: {t!r}" for i, t in enumerate(sig))
    lines.append(f"Add one with\n  @{f.__name__}.method\n  def {f.__name__}({params}): ...")
    return NoMethodError("\n".join(lines), function=f, argtypes=sig, candidates=close)


def _ambiguity(f, maximal, sig):
    fix = tuple(_meet_all([m.signature[i] for m in maximal]) or sig[i] for i in range(len(sig)))
    lines = [f"{f.__name__}{fmt_sig(sig)} is ambiguous: none of these methods is more specific "
             f"than the others:"]
    lines += [f"  {m!r} at {m.where()}" for m in maximal]
    params = ", ".join(f"a{i}: {t!r}" for i, t in enumerate(fix))
    lines.append(f"Resolve it by defining the method for the intersection, e.g.\n"
                 f"  @{f.__name__}.method\n  def {f.__name__}({params}): ...")
    return AmbiguityError("\n".join(lines), function=f, argtypes=sig, candidates=maximal,
                          suggestion=fix)


def _meet_all(ts):
    out = ts[0]
    for t in ts[1:]:
        out = meet(out, t) if out is not None else None
    return out


def _make_method(f, func, types):
    if not inspect.isfunction(func):
        raise SignatureError(f"{f.__name__}: a method must be a Python function, not {func!r}",
                             function=func)
    params = list(inspect.signature(func).parameters.values())
    file, line = source_location(func)
    where = f"{func.__qualname__} ({file}:{line})"
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise SignatureError(
                f"method {where}: parameter '{p.name}' is {p.kind.description}; methods take "
                f"plain positional parameters only", function=func, parameter=p.name,
                file=file, line=line)
        if p.default is not p.empty:
            raise SignatureError(
                f"method {where}: parameter '{p.name}' has a default value; define a separate "
                f"method with fewer parameters instead", function=func, parameter=p.name,
                file=file, line=line)
    if types:
        if len(types) != len(params):
            raise SignatureError(
                f"method {where}: {len(types)} types given for {len(params)} parameters",
                function=func, file=file, line=line)
        try:
            sig = tuple(as_lattice(t) for t in types)
        except TypeError as exc:
            raise SignatureError(f"method {where}: {exc}", function=func, file=file,
                                 line=line) from None
    else:
        sig = tuple(annotation_type(func, p.name, p.annotation) for p in params)
    return Method(f, sig, func, [p.name for p in params])


def generic(func):
    """Make a generic function whose first method is ``func`` (types from its annotations)."""
    return GenericFunction(func)


def which(f, *args):
    """``nr.which(f, *args)``: the method ``f(*args)`` would run."""
    return f.which(*args)
