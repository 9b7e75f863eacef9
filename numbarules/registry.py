"""Who owns the engine's tables: the objects they are about, so that they die together.

A compiled specialization (its kernels, dispatchers, nodes) is stored on the object it
specializes: the user's function, the method, the rule, the gradient object. When the user drops
that object (a notebook cell run again, a generated program), the cycle it forms with its
compiled code is garbage, and Python's collector frees it; no global table keeps it alive.
Global tables hold only weak references, to enumerate what is alive (``nr.clear_cache``, the
counts of ``nr.cache_info``).

Objects that cannot carry attributes (builtins such as ``math.sin``, NumPy's ufuncs) live as long
as the process anyway; their tables are kept in one module-level dict.

Numba itself keeps about 0.7 MB per compiled function for the life of the process (the LLVM
module stays in its JIT engine: ``numba.core.codegen`` disables module removal because of a
leak in MCJIT's ``removeModule``). That part no library above Numba can give back;
docs/numba-internals.md has the measurement.
"""

import weakref

_FALLBACK = {}          # id(owner) -> (owner, {name: table}) for owners we leave untouched
_LIBRARIES = ("numpy", "scipy", "numba", "llvmlite", "math", "builtins")
_OWNERS = weakref.WeakSet()     # objects holding tables, for clear()


class Local(dict):
    """A table of compiled code held by an object: it belongs to this process. Pickled (a
    function sent by value to a Dask worker with cloudpickle takes its ``__dict__`` along) it
    arrives empty, and the other process compiles or loads its own code."""

    def __reduce__(self):
        return (Local, ())


def _holds_own(owner):
    """Whether ``owner`` keeps its tables itself: not library objects (np.sum is NumPy's, and
    importing numbarules changes nothing of NumPy's) nor objects without a __dict__."""
    module = (getattr(owner, "__module__", None) or "").split(".")[0]
    return getattr(owner, "__dict__", None) is not None and module not in _LIBRARIES


def table(owner, name):
    """The dict called ``name`` that ``owner`` holds (created empty on first use)."""
    d = owner.__dict__ if _holds_own(owner) else None
    if d is not None:
        found = d.get(name)
        if found is None:
            found = Local()
            try:
                d[name] = found
            except TypeError:           # a mappingproxy (a class): set it as an attribute
                object.__setattr__(owner, name, found)
            try:
                _OWNERS.add(owner)
            except TypeError:           # not weakly referable: found through its table anyway
                pass
        return found
    entry = _FALLBACK.get(id(owner))
    if entry is None or entry[0] is not owner:
        entry = _FALLBACK[id(owner)] = (owner, {})
    return entry[1].setdefault(name, {})


def held(owner, name, key, make):
    """``make()``, held by ``owner`` in its table ``name`` under ``key`` and made once; a fresh
    one each time where ``key`` cannot be a key (unhashable argnums)."""
    try:
        made = table(owner, name)
        hit = made.get(key)
    except TypeError:
        return make()
    if hit is None:
        hit = made[key] = make()
    return hit


def peek(owner, name):
    """``owner``'s table ``name`` if it has one, else None (never creates it)."""
    if _holds_own(owner):
        return owner.__dict__.get(name)
    entry = _FALLBACK.get(id(owner))
    return entry[1].get(name) if entry is not None and entry[0] is owner else None


def clear(names):
    """Empty the tables called ``names`` of every owner (``nr.clear_cache``)."""
    owners = list(_OWNERS) + [owner for owner, _ in _FALLBACK.values()]
    for owner in owners:
        for name in names:
            found = peek(owner, name)
            if found is not None:
                found.clear()


class Alive:
    """A weak set of the live objects of one kind, to enumerate them."""

    def __init__(self):
        self._items = weakref.WeakSet()

    def add(self, item):
        self._items.add(item)

    def discard(self, item):
        self._items.discard(item)

    def __iter__(self):
        return iter(list(self._items))

    def __len__(self):
        return len(self._items)
