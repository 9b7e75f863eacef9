"""The persistent kernel cache: compiled code on disk, keyed so that stale code cannot load.

Layout: ``<dir>/<key[:2]>/<key>.<variant>.nrk``. The *key* covers what is known before a compile:
the numbarules, Numba, llvmlite, NumPy and Python versions (and a hash of numbarules' own
sources), the CPU target, the kind of code (an entry, a gradient driver, an ``nr.jit`` function,
a method), its argument types, and the fingerprint of the Python code it starts from. A
fingerprint covers a function's bytecode, constants, default values, closure cells and the
values of the globals it reads, recursively through the plain and ``@njit`` functions it calls.

What is only known after the compile (which method each generic call picked, which rule each
differentiated call used, with the fingerprints of those methods and rules) is stored in the
file as its list of *decisions*, and a file loads only if every decision comes out the same in
the loading process, fingerprints included. Several variants of one key (say, before and after a
method was added) live side by side; the variant name is a hash of its decisions.

A file is ``MAGIC + sha256(body) + body``; it is written to a temporary file and renamed into
place, so concurrent writers never leave a torn file, and a file that fails its checksum or does
not unpickle is discarded with a warning (the code is then compiled again).
"""

import glob
import hashlib
import importlib
import os
import pickle
import sys
import tempfile
import types as pytypes
import warnings

import numpy as np

from . import numba_glue

MAGIC = b"NRK1"
_VARIANTS_KEPT = 4
_counts = {"disk_hits": 0, "disk_writes": 0, "disk_discarded": 0}


# --- settings ------------------------------------------------------------------------------------

def enabled():
    return os.environ.get("NUMBARULES_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def directory():
    explicit = os.environ.get("NUMBARULES_CACHE_DIR")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~")
    elif sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "numbarules")


_ENVIRONMENT = None


def environment():
    """What every key starts with: versions, numbarules' own sources, the CPU target."""
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        h = hashlib.sha256()
        package = os.path.dirname(os.path.abspath(__file__))
        for path in sorted(glob.glob(os.path.join(package, "**", "*.py"), recursive=True)):
            h.update(os.path.relpath(path, package).encode())
            with open(path, "rb") as fh:
                h.update(fh.read())
        _ENVIRONMENT = (h.hexdigest(), sys.version, np.__version__) + numba_glue.versions() + (
            numba_glue.target_magic(),)
    return _ENVIRONMENT


# --- fingerprints ----------------------------------------------------------------------------------

def fingerprint(value):
    """A hex digest of ``value`` as compiled code sees it (see the module docstring)."""
    h = hashlib.sha256()
    _value(h, value, set())
    return h.hexdigest()


def _add(h, *parts):
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\x00")


def _value(h, v, seen):
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        _add(h, type(v).__name__, v)
    elif isinstance(v, (tuple, list, frozenset, set)):
        _add(h, type(v).__name__, len(v))
        for item in (sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v):
            _value(h, item, seen)
    elif isinstance(v, np.ndarray):
        _add(h, "ndarray", v.dtype.str, v.shape)
        h.update(np.ascontiguousarray(v).tobytes())
    elif isinstance(v, np.generic):
        _add(h, "npscalar", v.dtype.str, v.item())
    elif isinstance(v, pytypes.ModuleType):
        _add(h, "module", v.__name__)
    elif hasattr(v, "_nr_fingerprint") and not isinstance(v, type):
        _add(h, "nr", type(v).__name__)
        _value(h, v._nr_fingerprint(), seen)
    elif numba_glue.is_dispatcher(v):
        _add(h, "njit", sorted(getattr(v, "targetoptions", {}).items(), key=repr))
        _function(h, v.py_func, seen)
    elif isinstance(v, pytypes.FunctionType):
        _function(h, v, seen)
    elif isinstance(v, type) and getattr(v, "_nr_fields", None) is not None:
        _add(h, "struct", v.__module__, v.__qualname__, repr(v._nr_fields), repr(v.__mro__[1:]))
    elif isinstance(v, type):
        _add(h, "class", v.__module__, v.__qualname__)
    elif isinstance(v, (pytypes.BuiltinFunctionType, np.ufunc)):
        _add(h, "builtin", getattr(v, "__module__", None), v.__name__)
    elif callable(v) and ref(v) is not None:
        # Library functions that are objects (NumPy's array-function dispatchers): their name.
        _add(h, "named", ref(v))
    else:
        # Unknown objects: their repr (an address in it only costs a cache miss, never staleness).
        _add(h, "object", type(v).__module__, type(v).__qualname__, repr(v))


def _function(h, func, seen):
    if id(func) in seen:
        _add(h, "again", func.__module__, func.__qualname__)
        return
    seen.add(id(func))
    _add(h, "function", func.__module__, func.__qualname__)
    code = func.__code__
    _code(h, code)
    _value(h, func.__defaults__, seen)
    for name, cell in zip(code.co_freevars, func.__closure__ or ()):
        try:
            contents = cell.cell_contents
        except ValueError:
            contents = "<empty cell>"
        _add(h, "cell", name)
        _value(h, contents, seen)
    builtins = func.__globals__.get("__builtins__", {})
    for name in sorted(_names(code)):
        if name in func.__globals__:
            _add(h, "global", name)
            _value(h, func.__globals__[name], seen)
        elif name in (builtins if isinstance(builtins, dict) else vars(builtins)):
            _add(h, "builtin-name", name)


def _code(h, code):
    # Line numbers are left out: moving a function inside its file changes nothing compiled.
    _add(h, code.co_argcount, code.co_kwonlyargcount, code.co_flags, code.co_names,
         code.co_varnames, code.co_freevars, code.co_cellvars)
    h.update(code.co_code)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            _code(h, const)
        else:
            _add(h, type(const).__name__, const)


def _names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            names |= _names(const)
    return names


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


def resolve_ref(reference):
    module, qualname = reference
    try:
        value = sys.modules.get(module) or importlib.import_module(module)
        for part in qualname.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise LookupError(f"{module}:{qualname}") from exc
    return value


# --- files ------------------------------------------------------------------------------------------

def key_of(parts):
    h = hashlib.sha256()
    _value(h, (environment(), parts), set())
    return h.hexdigest()


def _paths(key):
    folder = os.path.join(directory(), key[:2])
    return folder, sorted(glob.glob(os.path.join(folder, f"{key}.*.nrk")),
                          key=_mtime, reverse=True)


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def load(key, valid):
    """The first stored ``(meta, payload, path)`` of ``key`` for which ``valid(meta)`` holds, or None.

    A file that is torn, truncated, fails its checksum or does not unpickle is removed, with a
    warning; the caller then compiles as if nothing had been stored.
    """
    if not enabled():
        return None
    _, paths = _paths(key)
    for path in paths:
        try:
            with open(path, "rb") as fh:
                blob = fh.read()
        except OSError:
            continue
        try:
            if blob[:4] != MAGIC or hashlib.sha256(blob[36:]).digest() != blob[4:36]:
                raise ValueError("checksum mismatch")
            meta, payload = pickle.loads(blob[36:])
        except Exception as exc:   # noqa: BLE001 - any unreadable file is treated the same way
            discard(path, f"{type(exc).__name__}: {exc}")
            continue
        if valid(meta):
            return meta, payload, path
    return None


def discard(path, why):
    _counts["disk_discarded"] += 1
    warnings.warn(f"numbarules: discarding the corrupt cache file {path} ({why}); "
                  f"the kernel is compiled again", RuntimeWarning, stacklevel=3)
    try:
        os.remove(path)
    except OSError:
        pass


def save(key, meta, payload):
    """Store one variant of ``key`` atomically; a failure to write only costs a future compile."""
    if not enabled():
        return None
    body = numba_glue.serialize((meta, payload))
    variant = hashlib.sha256(repr(meta.get("decisions")).encode()).hexdigest()[:16]
    folder, existing = _paths(key)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key[:8]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(MAGIC + hashlib.sha256(body).digest() + body)
            final = os.path.join(folder, f"{key}.{variant}.nrk")
            os.replace(tmp, final)
        except BaseException:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        warnings.warn(f"numbarules: could not write the kernel cache in {folder}: {exc}",
                      RuntimeWarning, stacklevel=3)
        return None
    _counts["disk_writes"] += 1
    for old in [p for p in existing if p != final][_VARIANTS_KEPT - 1:]:
        try:
            os.remove(old)
        except OSError:
            pass
    return final


def info():
    """``{"directory", "enabled", "entries", "bytes"}`` of the cache on disk."""
    root = directory()
    files = glob.glob(os.path.join(root, "??", "*.nrk"))
    return {"directory": root, "enabled": enabled(), "entries": len(files),
            "bytes": sum(os.path.getsize(p) for p in files if os.path.exists(p))}


def clear():
    """Remove every file this cache wrote (nothing else in the directory). Returns the count."""
    root = directory()
    removed = 0
    for pattern in ("*.nrk", ".*.tmp"):
        for path in glob.glob(os.path.join(root, "??", pattern)):
            try:
                os.remove(path)
                removed += 1
            except OSError:
                pass
    for folder in glob.glob(os.path.join(root, "??")):
        try:
            os.rmdir(folder)
        except OSError:
            pass
    return removed


def counts():
    return dict(_counts)


def reset_counts():
    for k in _counts:
        _counts[k] = 0
