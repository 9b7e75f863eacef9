"""Fingerprints of what compiled code freezes, and names that find an object in another process.

The disk cache's keys (diskcache.py) and the pickled functions of pickling.py both need to say
"this is the same code, reading the same values": ``fingerprint`` hashes a value as compiled
code sees it, ``ref`` / ``resolve_ref`` name a function or object by module and qualname.
"""

import dis
import enum
import hashlib
import importlib
import inspect
import sys
import types as pytypes
import weakref

import numpy as np

from . import numba_glue


# Numba freezes what compiled code reads: a global, a closure cell, a module attribute
# (``cfg.K``), a class attribute and an omitted argument's default become compile-time constants
# (arrays included, by contents), and the AD frontend resolves dotted names (``cfg.params.K``) to
# constants in the code it generates. A fingerprint therefore follows every attribute chain the
# bytecode reads from a global, a cell or a default, through modules, classes and other objects,
# and hashes the value it ends on. A module or class that code holds on to whole (``m = cfg``, a
# struct class called as a constructor) has its attributes hashed for every attribute name the
# code reads. A value whose contents cannot be hashed soundly (an arbitrary object) makes the
# fingerprint None: code that freezes it is compiled as usual but never stored.

class _Opaque(Exception):
    """A value a fingerprint cannot capture soundly."""


#: Module roots whose functions and objects are named, not hashed: libraries whose versions are
#: in the environment, or that are part of Python.
_LIBRARIES = frozenset(("numpy", "numba", "llvmlite", "scipy", "math", "cmath", "builtins",
                        "operator", "_operator"))
_GENERATED = "numbarules._generated"
_MISSING = object()


def fingerprint(value):
    """A hex digest of ``value`` as compiled code sees it (see above), or None when something it
    reaches cannot be fingerprinted soundly (then nothing compiled from it may be stored)."""
    h = hashlib.sha256()
    try:
        _value(h, value, {})
    except Exception:   # noqa: BLE001 - opaque, too deep, or an attribute that raised: no key
        return None
    return h.hexdigest()


def main_alias(module):
    """``__main__`` for ``__mp_main__``: a process that multiprocessing spawns runs the main
    script again under that name, and its functions are the script's."""
    return "__main__" if module == "__mp_main__" else module


def _add(h, *parts):
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\x00")


def _root(module):
    return (module or "").split(".")[0]


def _category(v):
    """What kind of value ``v`` is for fingerprinting (see ``_value``)."""
    if isinstance(v, enum.Enum):
        return "enum"
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        return "scalar"
    if isinstance(v, (tuple, list, frozenset, set)):
        return "sequence"
    if isinstance(v, dict):
        return "dict"
    if isinstance(v, np.ndarray):
        return "ndarray"
    if isinstance(v, np.generic):
        return "npscalar"
    if isinstance(v, np.dtype):
        return "dtype"
    if isinstance(v, pytypes.ModuleType):
        return "module"
    if isinstance(v, type):
        return "struct" if getattr(v, "_nr_fields", None) is not None else "class"
    if hasattr(v, "_nr_fingerprint"):
        return "nr"
    if numba_glue.is_dispatcher(v):
        return "njit"
    if isinstance(v, pytypes.FunctionType):
        return "function"
    if type(v).__module__.startswith("numba.core.types"):
        return "numbatype"
    if isinstance(v, (pytypes.MethodType, pytypes.BuiltinFunctionType, np.ufunc)) or callable(v):
        return "callable"
    return "object"


def _namespace_like(v):
    """Values whose attributes compiled code may freeze one by one (modules, classes, objects)."""
    return _category(v) in ("module", "class", "struct", "object")


def _value(h, v, seen):
    kind = _category(v)
    if kind == "enum":
        _add(h, "enum", type(v).__module__, type(v).__qualname__, v.name)
        _value(h, v.value, seen)
    elif kind == "scalar":
        _add(h, type(v).__name__, v)
    elif kind == "sequence":
        _add(h, type(v).__module__, type(v).__qualname__, len(v))
        for item in (sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v):
            _value(h, item, seen)
    elif kind == "dict":
        _add(h, "dict", type(v).__qualname__, len(v))
        for k in sorted(v, key=repr):
            _value(h, k, seen)
            _value(h, v[k], seen)
    elif kind == "ndarray":
        if v.dtype.hasobject:
            raise _Opaque(v)          # its bytes are addresses
        _add(h, "ndarray", v.dtype.descr if v.dtype.fields else v.dtype.str, v.shape)
        h.update(np.ascontiguousarray(v).tobytes())
    elif kind == "npscalar":
        if v.dtype.hasobject:
            raise _Opaque(v)
        _add(h, "npscalar", repr(v.dtype), v.tobytes())
    elif kind == "dtype":
        _add(h, "dtype", repr(v))
    elif kind == "module":
        _add(h, "module", v.__name__)
    elif kind == "struct":
        _add(h, "struct", main_alias(v.__module__), v.__qualname__, repr(v._nr_fields),
             repr(v.__mro__[1:]).replace("__mp_main__", "__main__"))
    elif kind == "class":
        _add(h, "class", main_alias(v.__module__), v.__qualname__)
    elif kind == "nr":
        _add(h, "nr", type(v).__name__)
        _value(h, v._nr_fingerprint(), seen)
    elif kind == "njit":
        _add(h, "njit", type(v).__name__)
        _value(h, dict(getattr(v, "targetoptions", None) or {}), seen)
        _value(h, dict(getattr(v, "locals", None) or {}), seen)
        _function(h, v.py_func, seen)
    elif kind == "function":
        _function(h, v, seen)
    elif kind == "numbatype":
        _add(h, "numbatype", type(v).__module__, type(v).__qualname__, str(v))
    elif kind == "callable":
        _callable(h, v, seen)
    else:
        raise _Opaque(v)


def _callable(h, v, seen):
    name = ref(v)
    if name is not None and _root(name[0]) in _LIBRARIES:
        _add(h, "named", name)               # NumPy's functions and ufuncs, math, builtins
        return
    owner = getattr(v, "__self__", None)
    if isinstance(v, pytypes.BuiltinFunctionType) and (owner is None or isinstance(
            owner, pytypes.ModuleType)):
        _add(h, "builtin", getattr(v, "__module__", None), v.__name__)      # C functions
        return
    if owner is not None and not isinstance(owner, pytypes.ModuleType) and \
            _root(type(owner).__module__) in _LIBRARIES and \
            _root(getattr(v, "__module__", None) or type(owner).__module__) in _LIBRARIES:
        # np.random.rand: a method of NumPy's hidden RandomState; Numba implements it itself.
        _add(h, "library-method", type(owner).__module__, type(owner).__qualname__, v.__name__)
        return
    if isinstance(v, pytypes.MethodType) or owner is not None and \
            isinstance(v, pytypes.BuiltinFunctionType):
        _add(h, "bound", getattr(v, "__name__", None))
        _value(h, owner, seen)
        _value(h, getattr(v, "__func__", None), seen)
        return
    inner = getattr(v, "_dispatcher", None)        # numba.vectorize's DUFunc
    if isinstance(getattr(inner, "py_func", None), pytypes.FunctionType):
        _add(h, "vectorized", type(v).__qualname__, sorted(map(str, getattr(v, "types", ()))))
        _value(h, dict(getattr(inner, "targetoptions", None) or {}), seen)
        _function(h, inner.py_func, seen)
        return
    wrapped = getattr(v, "__wrapped__", None)
    if _root(type(v).__module__) == "numba" and isinstance(wrapped, pytypes.FunctionType):
        # Numba's wrappers of a Python function: @intrinsic (its typing function), @cfunc.
        _add(h, "numba-wrapper", type(v).__module__, type(v).__qualname__,
             str(getattr(v, "_sig", None)), getattr(v, "_prefer_literal", None))
        _function(h, wrapped, seen)
        return
    raise _Opaque(v)


def _function(h, func, seen):
    if id(func) in seen:
        _add(h, "again", seen[id(func)][0])
        return
    seen[id(func)] = (len(seen), func)         # the object kept: its id stays unique
    module = func.__module__ or ""
    if _root(module) in _LIBRARIES:
        _add(h, "library-function", module, func.__qualname__)
        return
    # Generated kernels are named with counters that depend on the order of compiles in a
    # process: their names are left out, the values those names hold are what counts.
    generated = module == _GENERATED
    _add(h, "function", main_alias(module), None if generated else func.__qualname__)
    code = func.__code__
    use = _usage(code)
    _code(h, code, use.global_only if generated else frozenset())
    params = code.co_varnames[:code.co_argcount]
    defaults = func.__defaults__ or ()
    for name, value in zip(params[len(params) - len(defaults):], defaults):
        _bind(h, "default", name, value, use.fast.get(name), use, seen)
    kwonly = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    for name in kwonly:
        if name in (func.__kwdefaults__ or {}):
            _bind(h, "kwdefault", name, func.__kwdefaults__[name], use.fast.get(name), use, seen)
    for name, cell in zip(code.co_freevars, func.__closure__ or ()):
        try:
            contents = cell.cell_contents
        except ValueError:
            _add(h, "empty cell", name)
            continue
        _bind(h, "cell", name, contents, use.deref.get(name), use, seen)
    builtins = func.__globals__.get("__builtins__", {})
    builtins = builtins if isinstance(builtins, dict) else vars(builtins)
    for name, reads in use.globals.items():
        label = "<global>" if generated else name
        if name in func.__globals__:
            _bind(h, "global", label, func.__globals__[name], reads, use, seen)
        elif name in builtins:
            _add(h, "builtin-name", name)
        else:
            _add(h, "undefined", label)


def _bind(h, kind, name, value, reads, use, seen):
    """Hash what code that names ``value`` (a global, a cell, a default) can freeze of it."""
    _add(h, kind, name)
    if _category(value) == "object" and reads is not None and not reads.escapes:
        _add(h, "object", type(value).__module__, type(value).__qualname__)  # only attributes read
    else:
        _value(h, value, seen)
    if reads is None or not _namespace_like(value):
        return
    for attrs in sorted(reads.chains):
        _chain(h, value, attrs, use, seen)
    if reads.escapes:
        _escaped(h, value, use, seen)


def _chain(h, value, attrs, use, seen, loose=False):
    """Hash ``value.a.b.c``: walk the attributes through namespaces (modules, classes, objects)
    and hash the value the walk stops on. ``loose``: a path read somewhere in the code from a
    value held whole (it may not apply: attributes missing or that are instance descriptors
    on a class are skipped)."""
    v, walked = value, 0
    for attr in attrs:
        if not _namespace_like(v):
            break
        if loose and isinstance(v, type):
            raw = inspect.getattr_static(v, attr, _MISSING)
            if raw is _MISSING or (inspect.ismethoddescriptor(raw) or inspect.isdatadescriptor(
                    raw)) and not isinstance(raw, (staticmethod, classmethod)):
                break      # a field or method of instances (x.shape), not a class attribute
        try:
            v = getattr(v, attr)
        except Exception:   # noqa: BLE001 - anything getattr raises: an attribute that is not there
            v = _MISSING
            break
        walked += 1
    if loose and walked == 0:
        return
    _add(h, "attribute", attrs[:walked])
    if v is _MISSING:
        _add(h, "missing", attrs[walked])
        return
    _value(h, v, seen)
    if walked == len(attrs) and _namespace_like(v):
        _escaped(h, v, use, seen)


def _escaped(h, value, use, seen):
    """A module or class held whole (bound to a local, passed on, called): hash each attribute
    path the code reads that applies to it."""
    if _category(value) == "object":
        return                         # hashed whole by _value already (or opaque)
    key = ("escaped", id(value), id(use))
    if key in seen:
        return
    seen[key] = (len(seen), (value, use))
    for attrs in sorted(use.paths):
        _chain(h, value, attrs, use, seen, loose=True)


def _code(h, code, renamed=frozenset()):
    # Line numbers are left out: moving a function inside its file changes nothing compiled.
    names = tuple("<global>" if n in renamed else n for n in code.co_names)
    _add(h, code.co_argcount, code.co_kwonlyargcount, code.co_flags, names,
         code.co_varnames, code.co_freevars, code.co_cellvars)
    h.update(code.co_code)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            _code(h, const, renamed)
        else:
            _add(h, type(const).__name__, const)


class _Reads:
    """How code reads one name: the attribute chains read from it, whether it is also used whole."""

    __slots__ = ("chains", "escapes")

    def __init__(self):
        self.chains = set()
        self.escapes = False


class _Usage:
    __slots__ = ("globals", "deref", "fast", "paths", "global_only", "__weakref__")


_GLOBAL_LOADS = frozenset(("LOAD_GLOBAL", "LOAD_NAME"))
_DEREF_LOADS = frozenset(("LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"))
_ATTR_LOADS = frozenset(("LOAD_ATTR", "LOAD_METHOD"))
_TRANSPARENT = frozenset(("CACHE", "EXTENDED_ARG", "NOP"))
_USAGE = weakref.WeakKeyDictionary()


def _usage(code):
    """Which globals, cells and parameters ``code`` (nested functions included) reads, with the
    attribute chains read from each, in the order of first reading (deterministic per bytecode)."""
    try:
        return _USAGE[code]
    except (KeyError, TypeError):
        pass
    use = _Usage()
    use.globals, use.deref, use.fast, use.paths = {}, {}, {}, set()
    attr_names, top = set(), code

    def finish(head):
        if head is None:
            return
        kind, name, attrs = head
        if attrs:
            use.paths.add(tuple(attrs))
        if kind is None:
            return
        reads = kind.setdefault(name, _Reads())
        if attrs:
            reads.chains.add(tuple(attrs))
        else:
            reads.escapes = True

    stack = [code]
    while stack:
        c = stack.pop(0)
        head = None
        for ins in dis.get_instructions(c):
            op = ins.opname
            if op in _TRANSPARENT:
                continue
            if op in _ATTR_LOADS:
                attr_names.add(ins.argval)
                if head is None:
                    head = (None, None, [])      # an attribute of a computed value
                head[2].append(ins.argval)
                continue
            finish(head)
            head = None
            if op in _GLOBAL_LOADS:
                head = (use.globals, ins.argval, [])
            elif op in _DEREF_LOADS:
                head = (use.deref, ins.argval, [])
            elif op.startswith("LOAD_FAST"):     # LOAD_FAST_CHECK, LOAD_FAST_LOAD_FAST, ...
                names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
                if c is top:
                    for n in names[:-1]:
                        finish((use.fast, n, []))
                head = (use.fast if c is top else None, names[-1], [])
            elif "ATTR" in op and isinstance(ins.argval, str):
                attr_names.add(ins.argval)       # STORE_ATTR, DELETE_ATTR
        finish(head)
        stack += [k for k in c.co_consts if isinstance(k, pytypes.CodeType)]
    use.global_only = frozenset(use.globals) - attr_names
    try:
        _USAGE[code] = use
    except TypeError:
        pass
    return use


def ref(obj):
    """``(module, qualname)`` naming ``obj`` so that another process can find it, or None."""
    module = getattr(obj, "__module__", None)
    if module is None and isinstance(obj, np.ufunc):
        module = "numpy"
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not module or not qualname or "<" in qualname:
        return None
    try:
        found = resolve_ref((module, qualname))
    except LookupError:
        return None
    return (module, qualname) if found is obj else None


#: Functions and generic functions that arrived by value from another process (pickling.py): a
#: notebook's ``__main__.f`` is not ``__main__.f`` of a Dask worker, yet the decisions stored
#: with a kernel name it so. Looked up before the modules.
_ARRIVED = weakref.WeakValueDictionary()


def name_arrival(obj):
    """Let ``resolve_ref`` find ``obj`` (which came by value) under its module and qualname. A
    plain function does not displace a generic or ``nr.jit`` function of the same name (a
    method's function is named like its generic function)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not (module and qualname):
        return
    held = _ARRIVED.get((module, qualname))
    if held is None or isinstance(held, pytypes.FunctionType) \
            or not isinstance(obj, pytypes.FunctionType):
        _ARRIVED[(module, qualname)] = obj


def resolve_ref(reference):
    module, qualname = reference
    arrived = _ARRIVED.get((module, qualname))
    if arrived is not None:
        return arrived
    try:
        value = sys.modules.get(module) or importlib.import_module(module)
        for part in qualname.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise LookupError(f"{module}:{qualname}") from exc
    return value
