"""Generic functions in device code: compile-time dispatch to device-compiled methods.

A call ``f(x)`` inside a ``@cuda.jit`` kernel or device function is typed through ``f``'s device
type (``glue.DeviceCallableType``, one per (f, world)); its resolver picks the method on the
lattice and returns that method's device dispatcher, compiled for the argument types. Plain
Python helpers the device code names become ``DeviceHelper`` objects typed the same way.

Every device compile we own runs inside a *frame* that collects the decisions it relied on (the
method chosen for each generic call) and the device specializations it links; when it finishes,
the specialization gets an engine node in the cache with those decisions and callees. A new
method that changes a decision drops the node and, transitively, every device specialization
(and map_grad kernel) built on it: nothing stale survives, and the next use compiles afresh.

A user's own ``@cuda.jit`` kernel is a dispatcher we do not own: like a plain ``@numba.njit``
function it keeps the decisions it was compiled with.
"""

import threading

from .. import cache, entries, numba_glue, registry
from .. import methods as cpu
from ..dispatch import GenericFunction
from ..errors import UnsupportedSyntaxError
from ..lattice import from_numba
from . import glue

#: The device specializations of a method or function live on it (``numbarules.registry``):
#: {argtypes: _DeviceSpec} in its table ``_nr_device``; its device helper in ``_nr_device_helper``.
SPECS, HELPER = "_nr_device", "_nr_device_helper"
_local = threading.local()


class _DeviceSpec:
    __slots__ = ("dispatcher", "node")

    def __init__(self, dispatcher, node):
        self.dispatcher = dispatcher
        self.node = node


class _Frame:
    def __init__(self, key):
        self.key = key
        self.decisions = []
        self.callees = []


def _frames():
    stack = getattr(_local, "frames", None)
    if stack is None:
        stack = _local.frames = []
    return stack


def relied_on(decision=None, node=None):
    """Tell the device compile in progress (if ours) that it relied on this."""
    stack = _frames()
    if stack:
        if decision is not None:
            stack[-1].decisions.append(decision)
        if node is not None:
            stack[-1].callees.append(node)


def compile_recorded(key, label, build, on_drop):
    """Run ``build()`` (which compiles device code) inside a frame; returns (result, node).

    The node records what the compile relied on; ``on_drop`` runs when it is invalidated.
    """
    stack = _frames()
    if any(fr.key == key for fr in stack):
        raise UnsupportedSyntaxError(f"{label}: recursion is not supported in device code")
    frame = _Frame(key)
    stack.append(frame)
    try:
        result = build()
    finally:
        stack.pop()
    node = cache.engine_node(label, frame.decisions, frame.callees, on_drop)
    relied_on(node=node)
    return result, node


# --- generic functions ----------------------------------------------------------------------

def numba_type(f):
    """The device Numba type of generic function ``f`` at its current world."""
    cached = f.__dict__.get("_nr_device_type")
    if cached is None or cached[0] != f.world:
        cached = f._nr_device_type = (f.world, glue.device_callable_type(f, f.world, _resolver(f)))
    return cached[1]


def _resolver(f):
    def resolve(argtypes):
        sig = tuple(from_numba(a) for a in argtypes)
        # NoMethodError / AmbiguityError leave numba-cuda's typing as they are (it re-raises
        # exceptions that are not its own): the user sees ours.
        method = f.resolve(sig)
        relied_on(decision=(f, sig, "method", method))
        return specialize(method.func, argtypes, f"method {method!r}", method)
    return resolve


def specialize(func, argtypes, what, key_obj=None):
    """The device dispatcher of ``func`` (a method body or a plain helper) for ``argtypes``."""
    owner = key_obj if key_obj is not None else func
    argtypes = tuple(argtypes)
    key = (owner, argtypes)
    with glue.locked():
        table = registry.table(owner, SPECS)
        spec = table.get(argtypes)
        if spec is not None and spec.node.alive:
            relied_on(node=spec.node)
            return spec.dispatcher
        disp = glue.device_jit(prepare(func))

        def build():
            try:
                glue.compile_device(disp, argtypes)
            except glue.NumbaErrors as exc:
                raise _compile_error(func, what, argtypes, exc) from None

        def drop():
            if table.get(argtypes) is spec:
                del table[argtypes]

        _, node = compile_recorded(key, f"device {what}", build, drop)
        spec = table[argtypes] = _DeviceSpec(disp, node)
        return disp


def _compile_error(func, what, argtypes, exc):
    return cpu.compile_error(
        func, what, argtypes, exc, target=" for the device",
        advice="Device code is per-thread Numba code: no allocation (NumPy array creation, "
               "lists), no Python objects; see docs/cuda.md.")


# --- plain helpers and the namespaces of device code -----------------------------------------

class DeviceHelper:
    """A plain Python function called from device code: compiled per argument types like a
    method (with its decisions recorded); in the simulator, called as Python."""

    def __init__(self, func):
        self.func = func
        self.__name__ = getattr(func, "__name__", "helper")
        self._type = None

    def __call__(self, *args):
        return self.func(*args)

    def __repr__(self):
        return f"<device helper {getattr(self.func, '__qualname__', self.__name__)}>"

    @property
    def _numba_type_(self):
        # Only numba-cuda's typeof reaches this (DeviceHelpers live in device namespaces only).
        if self._type is None:
            self._type = glue.device_callable_type(self, 0, lambda argtypes: specialize(
                self.func, argtypes, f"function {getattr(self.func, '__qualname__', self.__name__)}"))
        return self._type


def helper(func):
    table = registry.table(func, HELPER)
    hit = table.get("helper")
    if hit is None:
        hit = table["helper"] = DeviceHelper(func)
    return hit


def device_value(value):
    """What device code should see for ``value`` named in a namespace: our CPU dispatchers and
    plain Python functions become device helpers; everything else is left as it is. A call the
    CPU kernels make unlinked (``entries.Unlinked``) is an ordinary call on the device."""
    if isinstance(value, entries.Unlinked):
        value = value.target
    if isinstance(value, GenericFunction) or isinstance(value, DeviceHelper):
        return value
    if isinstance(value, numba_glue.Dispatcher):
        return helper(value.py_func)       # an nr.jit helper or a kernel of ours
    if cpu.is_plain(value):
        return helper(value)
    return value


def device_namespace(ns):
    return {k: device_value(v) for k, v in ns.items()}


def prepare(func):
    """``func`` with the names device code cannot call as they are replaced (``device_value``)."""
    return cpu.swapped(func, device_value)

