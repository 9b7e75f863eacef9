"""How numbarules objects cross process boundaries: pickle, cloudpickle, Dask workers.

What travels is what the user wrote, never compiled code: a generic function as its name, its
methods' Python functions with their signatures, and its rules; an ``nr.jit`` function as its
Python function and options; a gradient object as the function and ``argnums``. The receiving
process compiles its own kernels, or loads them from the persistent cache (``diskcache``: its
keys are fingerprints of that Python code, equal in both processes), so a worker sharing the
client's cache directory compiles nothing.

Identity. Each object carries a token (made where it was first pickled). A process that receives
a token it has seen gets the object it already has, with the methods and rules the sender had
added (a method defined on the client after the first submission reaches the workers, and only
what it changes is recompiled, through the usual backedges). A generic function importable in
the receiving process by module and name is that module's object. Objects compare by the
fingerprint of their Python code (``fingerprints.fingerprint``), so sending the same function again
(cloudpickle copies a notebook's functions anew each time) reuses what was compiled.

Source. The AD frontend reads a function's source (``inspect.getsource``). A function defined in a
notebook or a ``__main__`` script arrives by value, and its file may not exist where it lands:
its lines travel with it and are put in ``linecache`` there (``register_sources``), which is where
``inspect`` looks first for a file that is not on disk.

Compiled tables hung on user functions are ``registry.Local`` dicts, which pickle empty.
"""

import importlib
import inspect
import linecache
import os
import sys
import uuid
import weakref

_PROCESS = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
_tokens = iter(range(1, sys.maxsize))
_LIVE = weakref.WeakValueDictionary()      # token -> the object it names in this process


def token(obj):
    """The token naming ``obj`` across processes (made on first use)."""
    found = obj.__dict__.get("_nr_pickle_token")
    if found is None:
        found = f"{_PROCESS}:{next(_tokens)}"
        object.__setattr__(obj, "_nr_pickle_token", found)
        _LIVE[found] = obj
    return found


def _adopt(obj, tok):
    object.__setattr__(obj, "_nr_pickle_token", tok)
    _LIVE[tok] = obj
    return obj


def same_code(a, b):
    """Whether two functions (or rule implementations, or None) compile to the same code: the
    same object, or equal fingerprints of their bytecode and everything they read."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    from . import fingerprints
    fa = fingerprints.fingerprint(a)
    return fa is not None and fa == fingerprints.fingerprint(b)


# --- source lines ------------------------------------------------------------------------------

class Sources:
    """What travels beside a function so that the receiver differentiates what the sender
    would: the source lines of the functions that travel by value (keyed by file name) and those
    functions, and the generic functions they reach (with their methods and rules, which the
    receiver adds to its own: a module the worker imports has only the methods defined in it,
    not those the client added since). Unpickled, the lines are registered with ``linecache``
    and each function gets its file name back (cloudpickle names every code object it copies
    ``<dynamic-code>``)."""

    def __init__(self, files, funcs, generics=()):
        self.files, self.funcs, self.generics = files, funcs, generics

    @classmethod
    def of(cls, roots, cloud, skip=None):
        from . import methods, numba_glue
        from .dispatch import GenericFunction
        files, funcs, generics, seen, stack = {}, [], [], set(), list(roots)
        while stack:
            fn = stack.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            if isinstance(fn, GenericFunction):
                if fn is not skip:
                    generics.append(fn)      # its own reduction carries what it reaches
                continue
            if numba_glue.is_dispatcher(fn):
                fn = getattr(fn, "_nr_source", None) or getattr(fn, "py_func", None)
            if not inspect.isfunction(fn) or _library(fn):
                continue
            if _travels_by_value(fn, cloud):
                name = fn.__code__.co_filename
                if name not in files:
                    files[name] = tuple(linecache.getlines(name, fn.__globals__))
                funcs.append(fn)
            reached = [fn.__globals__.get(n) for n in methods.global_names(fn)]
            for cell in fn.__closure__ or ():
                try:
                    reached.append(cell.cell_contents)
                except ValueError:
                    pass
            stack += [v for v in reached if inspect.isfunction(v) or numba_glue.is_dispatcher(v)
                      or isinstance(v, GenericFunction)]
        return cls({k: v for k, v in files.items() if v},
                   tuple((fn, fn.__code__.co_filename) for fn in funcs), tuple(generics))

    def __reduce__(self):
        return (register_sources, (self.files, self.funcs, self.generics))


_LIBRARY_ROOTS = {"numpy", "scipy", "numba", "llvmlite", "math", "builtins", "numbarules",
                  "dask", "distributed", "cloudpickle"}


def _library(fn):
    return (fn.__module__ or "").split(".")[0] in _LIBRARY_ROOTS


def register_sources(files, funcs=(), generics=()):
    """Make ``inspect.getsource`` find these lines (file name -> lines) in this process, and give
    each of ``funcs`` (function, file name) its file name back."""
    for name, lines in files.items():
        lines = list(lines)
        if linecache.getlines(name) != lines:
            # mtime None: linecache.checkcache leaves the entry alone (it cannot stat the file)
            linecache.cache[name] = (sum(map(len, lines)), None, lines, name)
    from . import fingerprints
    for fn, name in funcs:
        if fn.__code__.co_filename != name:
            fn.__code__ = _renamed(fn.__code__, name)
        if fingerprints.ref(fn) is None:
            fingerprints.name_arrival(fn)
    return Sources(files, funcs, generics)


def _renamed(code, name):
    consts = tuple(_renamed(c, name) if inspect.iscode(c) else c for c in code.co_consts)
    return code.replace(co_filename=name, co_consts=consts)


def _importable(module, qualname, load=False, main=False):
    """The object ``module.qualname`` names here, or None. ``__main__`` only with ``main`` (the
    standard pickle names what it holds; cloudpickle copies it, since another process's
    ``__main__`` is another script)."""
    if module == "__main__" and not main:
        return None
    mod = sys.modules.get(module)
    if mod is None and load:
        try:
            mod = importlib.import_module(module)
        except Exception:   # noqa: BLE001 - not importable here: the object arrives by value
            return None
    if mod is None:
        return None
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


# --- generic functions -------------------------------------------------------------------------

class _Defined:
    """A method's function or a rule's implementation named by where it was defined: the
    generic function of an importable module, the kind of entry and its signature. A method's
    function is shadowed in its module by the generic function (``@f.method`` returns ``f``), and
    rules are usually all named ``_``, so pickle could not name them; the receiving process
    imports the module and takes its own."""

    def __init__(self, module, qualname, kind, signature, digest):
        self.where = (module, qualname, kind, signature)
        self.digest = digest

    def resolve(self):
        from . import rules
        module, qualname, kind, signature = self.where
        owner = _importable(module, qualname, load=True, main=True)
        if kind == "method":
            found = [m.func for m in getattr(owner, "methods", ()) if m.signature == signature]
        else:
            found = [r.impl for r in rules.entries(owner)
                     if r.kind == kind and r.signature == signature]
        if not found:
            raise LookupError(f"{module}.{qualname} has no {kind} for {signature!r} in this "
                              f"process")
        return checked(found[0], self.digest, f"the {kind} of {qualname} for {signature!r}")


def _portable(func, f, kind, signature, cloud):
    """``func`` itself where pickle can name it or it travels by value (a notebook's,
    ``__main__``'s, a module's that cloudpickle copies), else where it was defined
    (``_Defined``)."""
    if not inspect.isfunction(func) or _travels_by_value(func, cloud) \
            or "<locals>" in func.__qualname__ \
            or _importable(func.__module__, func.__qualname__, main=True) is func \
            or _importable(f.__module__, f.__qualname__, main=True) is not f \
            or func.__module__ != f.__module__:
        return func
    from . import fingerprints
    return _Defined(f.__module__, f.__qualname__, kind, signature, fingerprints.fingerprint(func))


def checked(func, digest, what):
    """``func``, when its fingerprint here is ``digest`` (the sender's); else an error: the
    receiver would compute with other code than the sender differentiated (its copy of the
    module was edited, or the sender changed a global of it after importing it)."""
    from . import fingerprints
    from .errors import NumbarulesError
    if digest is not None and fingerprints.fingerprint(func) != digest:
        raise NumbarulesError(
            f"{what} ({func.__module__}) is not, in this process, the code the sending process "
            f"has: the module differs here (edited since, or a global of it changed in the "
            f"sender after the import). Make the module the same in both processes, or define "
            f"the function where it travels by value (a notebook, __main__, or "
            f"cloudpickle.register_pickle_by_value(module))")
    return func


def _cloudpickling():
    """Whether cloudpickle (or Numba's copy of it) is the pickler calling us: it copies
    ``__main__``'s functions by value, where the standard pickle names them. ``__reduce__`` is not
    told which pickler calls it; cloudpickle's ``Pickler.dump`` is a Python frame above us."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").endswith("cloudpickle"):
            return True
        frame = frame.f_back
    return False


def _travels_by_value(fn, cloud):
    """Whether the pickler at work copies ``fn`` by value rather than naming it (``cloud``:
    ``_cloudpickling()``, asked once per object pickled)."""
    if not cloud:
        return False
    module = fn.__module__ or ""
    if module == "__main__" or module not in sys.modules or "<locals>" in fn.__qualname__:
        return True
    cp = sys.modules.get("cloudpickle.cloudpickle")
    registered = getattr(cp, "_is_registered_pickle_by_value", None)
    try:
        return bool(registered and registered(sys.modules[module]))
    except Exception:   # noqa: BLE001 - a private helper of cloudpickle's
        return False


def _resolved(func):
    return func.resolve() if isinstance(func, _Defined) else func


def reduce_generic(f):
    from . import rules
    cloud = _cloudpickling()
    methods = tuple((_portable(m.func, f, "method", m.signature, cloud), m.signature)
                    for m in f.methods)
    entries = tuple((r.kind, r.signature, _portable(r.impl, f, r.kind, r.signature, cloud),
                     r.uses_result, r.file, r.line) for r in rules.entries(f))
    roots = [m.func for m in f.methods] + [r.impl for r in rules.entries(f)
                                           if inspect.isfunction(r.impl)]
    # The state is applied after the shell is memoised, so a method that calls its own generic
    # function (recursion) pickles a reference to the shell, not the function again.
    return (generic_shell, (token(f), f.__module__, f.__qualname__, f.__name__, f.__doc__,
                            not cloud),
            (Sources.of(roots, cloud, skip=f), methods, entries))


def generic_shell(tok, module, qualname, name, doc, by_name=False):
    """The generic function ``tok`` names here: one seen before, the module's own, or a new one
    with no methods yet (``apply_generic_state`` adds them)."""
    from .dispatch import GenericFunction
    f = _LIVE.get(tok)
    if f is None:
        found = _importable(module, qualname, load=True, main=by_name)
        if isinstance(found, GenericFunction):
            f = found
        else:
            from . import fingerprints
            f = GenericFunction.blank(name, qualname, module, doc)
            fingerprints.name_arrival(f)
        _adopt(f, tok)
    return f


def apply_generic_state(f, state):
    """Add the methods and rules the sender had that this process lacks or has in another form
    (each change goes through the backedges: only what it affects is recompiled)."""
    from . import rules
    _, methods, entries = state
    for func, sig in methods:
        func = _resolved(func)
        old = next((m for m in f.methods if m.signature == sig), None)
        if old is None or not same_code(old.func, func):
            f._add(func, sig)
    for kind, sig, impl, uses_result, file, line in entries:
        impl = _resolved(impl)
        family = rules._family(rules.Rule(kind, f, sig))
        old = next((r for r in rules.entries(f) if r.signature == sig
                    and rules._family(r) == family), None)
        if old is not None and old.kind == kind and old.uses_result == uses_result \
                and same_code(old.impl, impl):
            continue
        rules.register(rules.Rule(kind, f, sig, impl, uses_result, file, line))


# --- nr.jit functions and gradient objects --------------------------------------------------------

def reduce_jit(disp, func, options):
    cloud = _cloudpickling()
    return (jit_function, (Sources.of([func], cloud), token(disp), func, options,
                           _named_digest(func, cloud)))


def jit_function(sources, tok, func, options, digest=None):
    from . import methods
    from .errors import NumbarulesError
    try:
        checked(func, digest, func.__qualname__)
    except NumbarulesError as exc:
        return Refused(str(exc))        # as gradient() does: the error comes with the call
    disp = _LIVE.get(tok)
    if disp is not None and same_code(getattr(disp, "_nr_source", None), func):
        return disp
    from . import fingerprints
    disp = methods.jit(func, **options)
    if fingerprints.ref(disp) is None:
        fingerprints.name_arrival(disp)
    return _adopt(disp, tok)


def _named_digest(func, cloud):
    """The fingerprint of a function pickle names rather than copies (checked where it lands),
    else None."""
    if not inspect.isfunction(func) or _travels_by_value(func, cloud):
        return None
    from . import fingerprints
    return fingerprints.fingerprint(func)


class Refused:
    """What a gradient object or ``nr.jit`` function becomes where its function is not the
    sender's code: calling it raises the error that says so."""

    def __init__(self, message):
        self.message = message

    def __call__(self, *args, **kwargs):
        from .errors import NumbarulesError
        raise NumbarulesError(self.message)

    def __reduce__(self):
        return (Refused, (self.message,))


def reduce_gradient(g):
    cloud = _cloudpickling()
    return (gradient, (Sources.of([g.f], cloud), token(g), g.f, g.argnums, g.with_value,
                       g.flags, _named_digest(g.f, cloud)))


def gradient(sources, tok, f, argnums, with_value, flags, digest=None):
    from . import api
    from .errors import NumbarulesError
    try:
        checked(f, digest, getattr(f, "__qualname__", repr(f)))
    except NumbarulesError as exc:
        # raised when called, as an error of the call: a process pool's worker that failed to
        # unpickle its task would die instead of reporting it
        return Refused(str(exc))
    g = _LIVE.get(tok)
    if g is not None and (g.argnums, g.with_value, g.flags) == (
            argnums, with_value, flags) and same_code(g.f, f):
        return g
    return _adopt(api.Gradient(f, argnums, with_value, flags), tok)
