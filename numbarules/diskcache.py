"""The persistent kernel cache: compiled code on disk, keyed so that stale code cannot load.

Layout: ``<dir>/<key[:2]>/<key>.<variant>.nrk``. The *key* covers what is known before a compile:
the numbarules, Numba, llvmlite, NumPy and Python versions (and a hash of numbarules' own
sources), Numba's code-changing settings, the CPU target, the kind of code (an entry, a gradient
driver, an ``nr.jit`` function, a method, an AD kernel), its argument types, the dispatcher's
options, and the fingerprint of the Python code it starts from and of the function Numba compiles
(for AD kernels, the generated code). A fingerprint covers a function's bytecode, constants,
default values, closure cells and the values of the globals it reads, the values at the end of
every attribute chain it reads from them (``cfg.K``, ``cfg.sub.Params.K``), recursively through
the plain and ``@njit`` functions it reaches: everything Numba or the AD frontend may freeze into
compiled code (fingerprints.py). A value that cannot be fingerprinted soundly (an arbitrary
object compiled code holds whole) gives no key: that code is compiled in every process, never
stored.

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
import os
import pickle
import sys
import tempfile
import warnings

import numpy as np

from . import numba_glue
from .fingerprints import fingerprint

MAGIC = b"NRK1"
_VARIANTS_KEPT = 4


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
    """What every key starts with: versions, numbarules' own sources, the CPU target, Numba's
    settings."""
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        h = hashlib.sha256()
        package = os.path.dirname(os.path.abspath(__file__))
        for path in sorted(glob.glob(os.path.join(package, "**", "*.py"), recursive=True)):
            h.update(os.path.relpath(path, package).encode())
            with open(path, "rb") as fh:
                h.update(fh.read())
        _ENVIRONMENT = (h.hexdigest(), sys.version, np.__version__,
                        *numba_glue.persist.versions(), numba_glue.persist.target_magic())
    return _ENVIRONMENT + (_numba_settings(), _own_settings())   # as they are now: they may change


def _own_settings():
    """numbarules' environment switches that change the generated code (the reverse loops'
    gather, the tapes' balance checks)."""
    return tuple((name, os.environ.get(name, "")) for name in ("NUMBARULES_GATHER",
                                                               "NUMBARULES_CHECKS"))


def _numba_settings():
    """Numba's process-wide settings that change the code it generates (NUMBA_BOUNDSCHECK,
    NUMBA_OPT, ...): a kernel compiled under one must not load under another."""
    import numba
    return tuple((name, repr(getattr(numba.config, name, None))) for name in (
        "BOUNDSCHECK", "OPT", "ENABLE_AVX", "DEBUGINFO_DEFAULT", "NRT_STATS"))


# --- files ------------------------------------------------------------------------------------------

def key_of(parts):
    """The key of a kernel identified by ``parts``, or None when they reach a value that cannot be
    fingerprinted soundly (such a kernel is not stored)."""
    return fingerprint((environment(), parts))


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
    body = numba_glue.persist.serialize((meta, payload))
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

