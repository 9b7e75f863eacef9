"""Numba's side of the persistent cache (numbarules.diskcache, cache.DiskSlot): compiled code
as bytes and back, with the code it calls unlinked, and what may not be stored.

Part of the CPU door into ``numba.core`` (the ``numba_glue`` package); docs/numba-internals.md
has how each rule here was found.
"""

from numba.core import compiler
from numba.core.codegen import RuntimeLinker
from numba.core.registry import cpu_target

from .callables import _live, _register
from .blocks import BLOCKS, TAKE_SYMBOL
from .intrinsics import NUM_THREADS_SYMBOL


def _randomise_unique_ids():
    # Numba names each compiled function's symbols with a per-process counter. Code loaded from
    # the disk cache carries the counter values of the process that compiled it; a compile in
    # this process that drew the same value for the same name would share its linkonce symbols.
    # Starting the counter at a random point makes such a collision practically impossible.
    import itertools
    import secrets
    from numba.core.bytecode import FunctionIdentity
    FunctionIdentity._unique_ids = itertools.count(secrets.randbits(40) + 1)


_randomise_unique_ids()


def versions():
    import llvmlite
    import numba
    return (numba.__version__, llvmlite.__version__)


def target_magic():
    """The CPU, its features and the target triple: code compiled for one may not run on another."""
    return tuple(map(str, cpu_target.target_context.codegen().magic_tuple()))


def serialize(obj):
    """Bytes of ``obj`` pickled as Numba pickles its own cache entries."""
    from numba.core import serialize as numba_serialize
    return numba_serialize.dumps(obj)


def survives_pickling(argtypes):
    """Whether ``argtypes`` come back equal from pickling (classes named by reference)."""
    import pickle
    try:
        return pickle.loads(serialize(tuple(argtypes))) == tuple(argtypes)
    except Exception:   # noqa: BLE001 - anything that does not round-trip is not stored
        return False


def _reduce(cres):
    """``cres`` as bytes, or None when Numba cannot cache it (code lifted to object mode, dynamic
    globals such as addresses of Python objects, an environment another process cannot
    rebuild)."""
    if cres.objectmode or any(not x.can_cache for x in cres.lifted) or \
            cres.library.has_dynamic_globals or not _environments_importable(cres) or \
            _calls_unresolved(cres.library):
        return None
    return serialize(cres._reduce())


def _calls_unresolved(library):
    """Whether the code calls a recursive function through Numba's unresolved-symbol cells
    (``RuntimeLinker``: a recursive callee linked into a caller, a call in a loop). The cells
    are filled by Numba's runtime linker for modules it finalizes, never for object code loaded
    from a cache: such code, stored and loaded, aborted the process ("LLVM ERROR: Symbol not
    found: .numba.unresolved$...")."""
    module = getattr(library, "_final_module", None)
    if module is None:
        return False            # object code loaded from disk: checked when it was stored
    prefix = RuntimeLinker.PREFIX
    return any(gv.name.startswith(prefix) for gv in module.global_variables)


def _environments_importable(cres):
    """Whether another process can rebuild the environments ``cres`` refers to: Numba imports
    each one's module by name (``environment._rebuild_env``). Code of a module loaded from a
    file without a name in ``sys.modules`` has the module "<dynamic>", which no process can."""
    import importlib.util
    try:
        envs = [cres.environment, *cres._find_referenced_environments()]
    except Exception:   # noqa: BLE001 - not knowing means not storing
        return False
    for env in envs:
        name = env.globals.get("__name__") if env is not None else None
        if name == "__main__":
            continue            # a script run again: its own __main__
        try:
            if not name or name.startswith("<") or importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


def serialize_result(cres):
    """The compiled code of ``cres`` and of what it calls unlinked, as bytes; or None."""
    own = _reduce(cres)
    closure = _callee_closure(cres)
    if own is None or closure is None:
        return None
    return serialize((own, closure))


def rebuild_result(dispatcher, data):
    """The compile result stored by ``serialize_result``, ready to install in ``dispatcher``."""
    import pickle
    # Loaded code calls into Numba's runtime (NRT): it must be initialised first, or the first
    # allocation crashes. Numba's own cache calls targetctx.refresh(), which also imports every
    # lowering registry (with SciPy's BLAS check, ~0.8 s); loading machine code needs none of it.
    from numba.core.runtime import rtsys
    rtsys.initialize(dispatcher.targetctx)
    if NUM_THREADS_SYMBOL.encode() in data:
        # code that asks the threading layer for its thread count by symbol (intrinsics.
        # num_threads): the layer registers the symbol when launched, which a parallel function
        # loaded from disk does itself (its reload_init) but a serial one that only counts
        # threads does not: an unresolved symbol would abort the process
        from numba.np.ufunc.parallel import _launch_threads
        _launch_threads()
    if TAKE_SYMBOL.encode() in data:
        # code that allocates large arrays in blocks of ours: their functions, by symbol
        BLOCKS.ensure()
    own, closure = pickle.loads(data)
    libraries = {}
    for symbol, payload, calls in closure:
        lib = _live.get(symbol)
        if lib is None:
            lib = _rebuild(dispatcher, payload).library
        lib._nr_callees = {c: (libraries[c], _dead, ()) for c in calls}
        _register(symbol, lib)
        libraries[symbol] = lib
    cres = _rebuild(dispatcher, own)
    cres.library._nr_callees = {symbol: (lib, _dead, ()) for symbol, lib in libraries.items()}
    return cres


def _dead():
    """The dispatcher of a callee loaded from disk: none (the caller is already compiled)."""
    return None


def _rebuild(dispatcher, payload):
    import pickle
    cres = compiler.CompileResult._rebuild(dispatcher.targetctx, *pickle.loads(payload))
    # Loading consumed the object code; keep the bytes, to store callers that call this unlinked.
    cres.library._nr_payload = payload
    _announce_definitions(cres.library)
    return cres


def _announce_definitions(library):
    """Tell Numba's runtime linker which functions loaded object code defines. Code compiled
    later in this process may call one of them through an unresolved-symbol cell (recursion:
    a recursive function's kernels compiled here while the function itself was loaded); the
    linker fills a cell only with symbols it saw defined, and it scans only modules it
    finalizes, never object code loaded from a cache: the cell kept pointing at
    ``nrt_unresolved_abort`` ("numba jitted function aborted due to unresolved symbol", found by
    ``numbarules fuzz --disk-cache``)."""
    shared = getattr(library, "_shared_module", None)
    codegen = library.codegen
    linker = getattr(codegen, "_rtlinker", None)
    if shared is None or linker is None:
        return
    linker.scan_defined_symbols(shared)
    linker.resolve(codegen._engine)


def _callee_closure(cres):
    """[(symbol, payload, [symbols it calls unlinked])] of everything ``cres`` calls unlinked,
    transitively, callees first; None if one of them cannot be stored."""
    out, seen = [], set()

    def visit(library):
        for symbol, (lib, disp_ref, argtypes) in getattr(library, "_nr_callees", {}).items():
            if symbol in seen:
                continue
            seen.add(symbol)
            visit(lib)
            payload = getattr(lib, "_nr_payload", None)
            if payload is None:
                disp = disp_ref()
                callee = None if disp is None else disp.overloads.get(argtypes)
                if callee is None or callee.library is not lib:
                    raise _NotStorable
                payload = lib._nr_payload = _reduce(callee)
                if payload is None:
                    raise _NotStorable
            out.append((symbol, payload, sorted(getattr(lib, "_nr_callees", {}))))

    try:
        visit(cres.library)
    except _NotStorable:
        return None
    return out


class _NotStorable(Exception):
    pass
