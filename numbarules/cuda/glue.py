"""The one module that touches numba-cuda's internals (numba-cuda 0.30).

numba-cuda shares Numba's type classes (``numba.cuda.types.Function is numba.core.types.Function``)
but has its own ``typeof``, typing templates, typing and target contexts, data-model manager,
lowering registries, error classes and compiler lock. So a generic function gets a second Numba
type for the device, built here: ``DeviceCallableType``, over a numba-cuda ``AbstractTemplate``
per (owner, world) whose ``generic()`` asks a resolver for the CUDA device dispatcher of the
method that applies. numba-cuda's ``typeof`` is a singledispatch of its own: registering the
owner's class there gives device code this type while CPU code keeps ``CallableType`` (one type
for both would share ``types.Function._impl_keys``, keyed by argument types only, so a CPU typing
of the same call could overwrite the device implementation key before lowering reads it).

See docs/numba-internals.md, section "CUDA", for how each fact was found.
"""

import contextlib

import numpy as np

from numba import config, cuda
from numba.core import errors as core_errors
from numba.core.compiler_lock import global_compiler_lock as core_lock

from .. import numba_glue

#: NUMBA_ENABLE_CUDASIM=1: kernels and device functions run as Python, nothing is typed.
SIMULATOR = bool(config.ENABLE_CUDASIM)

if not SIMULATOR:
    from numba.cuda import types
    from numba.cuda import dispatcher as cuda_dispatcher
    from numba.cuda.core import errors as cuda_errors
    from numba.cuda.core.compiler_lock import global_compiler_lock as cuda_lock
    from numba.cuda.core.imputils import lower_constant
    from numba.cuda.datamodel import models
    from numba.cuda.models import register_model
    from numba.cuda.typing.templates import AbstractTemplate
    from numba.cuda.typing.typeof import typeof_impl

    class TypingError(core_errors.TypingError, cuda_errors.TypingError):
        """Raised from ``generic()``: numba.core's ``Function.get_call_type`` only catches its own
        NumbaError, numba-cuda's type inference only its own; this is both."""

    NumbaErrors = (core_errors.NumbaError, cuda_errors.NumbaError)
else:   # the simulator runs kernels as Python: nothing is typed
    TypingError = core_errors.TypingError
    NumbaErrors = (core_errors.NumbaError,)
    cuda_lock = None


@contextlib.contextmanager
def locked():
    """The compile lock of device work. numba-cuda's global compiler lock is a dual lock that
    takes Numba's (numbarules' own lock) first, then its own; taking it here keeps that order
    everywhere (a device compile reaches our resolvers holding both)."""
    with (cuda_lock if cuda_lock is not None else core_lock):
        yield


@contextlib.contextmanager
def cpu_compiles():
    """Run CPU compiles from inside a device compile (the AD engine builds its CPU
    specialization while a kernel is typed). numba-cuda pushes its own flags on Numba's
    thread-local flags stack, and a CPU compile inherits options from the top of that stack
    (``fastmath`` of another type fails); hide the device compile's flags meanwhile."""
    from numba.core.targetconfig import ConfigStack
    stack = ConfigStack()._stk._stack
    saved = stack[:]
    del stack[:]
    try:
        yield
    finally:
        stack[:] = saved


def device_jit(py_func):
    """A CUDA device-function dispatcher for ``py_func`` (compiled lazily, per argument types)."""
    return cuda.jit(device=True)(py_func)


def compile_device(disp, argtypes):
    """Compile the device dispatcher ``disp`` for ``argtypes`` (nothing to do in the simulator,
    where device functions run as Python); returns the return type."""
    if SIMULATOR:
        return None
    return disp.compile_device(tuple(argtypes)).signature.return_type


error_text = numba_glue.error_text


if not SIMULATOR:

    class DeviceCallableType(types.Function):
        """Numba type of a generic function (or gradient object) in device code, at one world."""

        def __init__(self, template):
            super().__init__(template)
            self.owner = template.owner

    class _DeviceTemplate(AbstractTemplate):
        owner = None
        resolve = None    # resolve(argtypes) -> a CUDA device dispatcher compiled for them
        _chosen = None    # argtypes -> dispatcher (the template is instantiated per resolution)

        def generic(self, args, kws):
            if kws:
                raise TypingError(f"{self.owner.__name__}: keyword arguments are not supported "
                                  f"in device calls; pass them positionally")
            args = tuple(types.unliteral(a) for a in args)
            disp = type(self).resolve(args)
            sig = disp._numba_type_.get_call_type(self.context, args, {})
            type(self)._chosen[sig.args] = disp
            return sig

        def get_impl_key(self, sig):
            # What numba-cuda registered with insert_user_function when it compiled the callee.
            return self._chosen[sig.args].overloads[tuple(sig.args)].entry_point

    def device_callable_type(owner, world, resolve):
        template = type(f"DeviceCallTemplate[{owner.__name__}@{world}]", (_DeviceTemplate,), {
            "key": ("cuda", owner, world), "owner": owner,
            "resolve": staticmethod(resolve), "_chosen": {},
        })
        return DeviceCallableType(template)

    register_model(DeviceCallableType)(models.OpaqueModel)

    @lower_constant(DeviceCallableType)
    def _constant_device_callable(context, builder, ty, pyval):
        # A generic function named as a global: no data, the call was dispatched while typing.
        return context.get_dummy_value()

    def register_typeof(cls, numba_type):
        """Device code types instances of ``cls`` as ``numba_type(instance)``."""
        typeof_impl.register(cls)(lambda val, c: numba_type(val))

    def set_compute_capability_for_compiles(cc):
        """Device-function compiles ask the current device for its compute capability; with no
        GPU (PTX generation in CI) answer ``cc`` instead. Returns a function that undoes it."""
        old = cuda_dispatcher.get_current_device

        class _Device:
            compute_capability = tuple(cc)

        cuda_dispatcher.get_current_device = lambda: _Device()

        def undo():
            cuda_dispatcher.get_current_device = old
        return undo


def element_type(array):
    """The Numba type of a host or device array's elements."""
    from numba.np.numpy_support import from_dtype
    return from_dtype(np.dtype(array.dtype))


def to_device(array):
    """``array`` itself when it is already on the device, else a device copy."""
    if SIMULATOR:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        if isinstance(array, FakeCUDAArray):
            return array
    elif cuda.is_cuda_array(array):
        return array
    return cuda.to_device(np.ascontiguousarray(array))
