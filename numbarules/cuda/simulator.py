"""Under ``NUMBA_ENABLE_CUDASIM=1``: simulator arrays passed to compiled CPU code.

The simulator runs kernels as Python, so a generic function (or gradient object) called inside
a kernel runs its compiled CPU code, dispatched at run time. Scalars pass as they are; a
simulator device array (``FakeCUDAArray``) is not a NumPy array and Numba cannot unbox it. Here
it gets a Numba type of its own, an array type whose unboxing reads the NumPy array the
simulator keeps inside (``_ary``): compiled code sees the very memory the kernel sees, so writes
are visible to the kernel too.
"""

from numba.core import types
from numba.core.boxing import unbox_array
from numba.core.datamodel.models import ArrayModel
from numba.core.extending import register_model, typeof_impl, unbox
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray
from numba.np import numpy_support


class SimulatorArray(types.Array):
    """A simulator device array: laid out as a NumPy array of the same dtype, rank and layout."""

    def __init__(self, dtype, ndim, layout, readonly=False, name=None, aligned=True):
        name = name or f"simulator_array({dtype}, {ndim}d, {layout})"
        super().__init__(dtype, ndim, layout, readonly=readonly, name=name, aligned=aligned)


register_model(SimulatorArray)(ArrayModel)


@typeof_impl.register(FakeCUDAArray)
@typeof_impl.register(FakeWithinKernelCUDAArray)
def _typeof_simulator_array(val, c):
    # Inside a kernel the simulator wraps its arrays once more; both answer ``_ary``.
    ary = val._ary
    return SimulatorArray(numpy_support.from_dtype(ary.dtype), ary.ndim,
                          numpy_support.map_layout(ary))


@unbox(SimulatorArray)
def _unbox_simulator_array(typ, obj, c):
    inner = c.pyapi.object_getattr_string(obj, "_ary")
    native = unbox_array(types.Array(typ.dtype, typ.ndim, typ.layout), inner, c)
    # The simulator array keeps its NumPy array alive for as long as the kernel runs.
    c.pyapi.decref(inner)
    return native
