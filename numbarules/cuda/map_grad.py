"""``nr.cuda.map_grad(f, argnums=0, tape=0)(*arrays)``: one thread per index, device arrays out.

The kernel is generated per (f, argnums, element types, tape): thread ``i`` calls the device vjp
of ``f`` on the ``i``-th elements and writes the tangents. A thread whose loop tapes overflow
records the entries it needed (``cuda.atomic.max``); the launch then raises instead of returning
the NaN gradients those threads computed.
"""

import numpy as np

from .. import api, registry, targets
from ..errors import DifferentiationError
from . import glue, gradients, methods

_THREADS = 128


class MapGrad:
    """The object ``nr.cuda.map_grad`` returns; call it on equal-length 1-D arrays."""

    def __init__(self, f, argnums, tape):
        if not callable(f):
            raise TypeError(f"nr.cuda.map_grad differentiates a function, not {f!r}")
        self.gradient = gradients.grad(f, argnums, tape)
        self.f = f
        self.argnums = argnums
        self.tape = tape
        self._kernels = {}

    def __repr__(self):
        return f"<nr.cuda.map_grad({getattr(self.f, '__qualname__', self.f)}), argnums={self.argnums!r}, tape={self.tape}>"

    def __call__(self, *arrays):
        n = _check_arrays(self.f, arrays)
        dev = [glue.to_device(a) for a in arrays]
        eltypes = tuple(glue.element_type(a) for a in dev)
        kernel, nums, out_dtypes = self._kernel(eltypes)
        outs = [glue.cuda.device_array(n, dtype=dt) for dt in out_dtypes]
        need = glue.cuda.to_device(np.zeros(1, np.int64))
        if n:
            blocks = (n + _THREADS - 1) // _THREADS
            kernel[blocks, _THREADS](*outs, need, *dev)
        needed = int(need.copy_to_host()[0])
        if needed > 0:
            raise DifferentiationError(
                f"nr.cuda.map_grad({getattr(self.f, '__qualname__', self.f)}): a thread's loop "
                f"tape needed {needed} entries but tape={self.tape}; pass tape={needed} or "
                f"more (entries of local memory per thread)")
        return outs[0] if isinstance(self.argnums, int) else tuple(outs)

    def kernel_for(self, *element_types):
        """The ``cuda.jit`` kernel used for arrays of these element types (Numba types), with
        the argument order ``(*gradients, need, *arrays)``: for inspection (``ptx`` compiles it
        without a GPU)."""
        return self._kernel(tuple(element_types))[0]

    def ptx(self, *element_types, cc=(9, 0)):
        """The PTX of the kernel for arrays of these element types (NumPy dtypes, their names,
        or Numba types), compiled for compute capability ``cc``. Needs no GPU and no driver
        (NVVM from the ``cuda`` extra's wheels): for checking, in CI, that device code compiles.
        """
        if glue.SIMULATOR:
            raise RuntimeError("map_grad(...).ptx needs numba-cuda's compiler, which "
                               "NUMBA_ENABLE_CUDASIM=1 replaces; run it without the simulator")
        from numba.np.numpy_support import from_dtype
        from numba.core import types as nbtypes
        eltypes = tuple(t if isinstance(t, nbtypes.Type) else from_dtype(np.dtype(t))
                        for t in element_types)
        undo = glue.set_compute_capability_for_compiles(cc)   # no device to ask for its cc
        try:
            kernel, nums, _ = self._kernel(eltypes)
            arrays = tuple(nbtypes.Array(t, 1, "C") for t in eltypes)
            argtypes = tuple(arrays[i] for i in nums) + (nbtypes.int64[::1],) + arrays
            ptx, _ = glue.cuda.compile_ptx(kernel.py_func, argtypes, cc=tuple(cc))
        finally:
            undo()
        return ptx

    def _kernel(self, eltypes):
        hit = self._kernels.get(eltypes)
        if hit is not None and hit[1].alive:
            return hit[0], hit[2], hit[3]
        with glue.locked():
            spec, nums = gradients.prepare_gradient(self.gradient, eltypes)
            out_dtypes = []
            for i in nums:
                if spec.tangent_kinds[i] is None:
                    raise TypeError(
                        f"nr.cuda.map_grad({getattr(self.f, '__qualname__', self.f)}): argument "
                        f"{i} is {eltypes[i]}, which has no tangent; argnums must point at float "
                        f"arrays")
                out_dtypes.append(np.dtype(str(eltypes[i])))
            source = _kernel_source(len(eltypes), nums)

            def build():
                ns = {"_vjp": gradients.device_vjp(spec, self.tape), "_cuda": glue.cuda,
                      "_seed": api._one(spec.return_type)}
                targets.exec_source(source, ns, "map_grad kernel")
                return glue.cuda.jit(ns["map_grad_kernel"])

            kernel, node = methods.compile_recorded(
                ("map_grad", id(self), eltypes), f"map_grad {self!r}", build,
                lambda: self._kernels.pop(eltypes, None))
            self._kernels[eltypes] = (kernel, node, nums, out_dtypes)
        return kernel, nums, out_dtypes


def _kernel_source(n, nums):
    args = ", ".join(f"x{i}" for i in range(n))
    outs = ", ".join(f"out{k}" for k in range(len(nums)))
    elems = ", ".join(f"x{i}[i]" for i in range(n))
    lines = [f"def map_grad_kernel({outs}, need, {args}):",
             "    i = _cuda.grid(1)",
             "    if i < out0.shape[0]:",
             f"        r = _vjp({elems}, _seed)"]
    lines += [f"        out{k}[i] = r[{i + 1}]" for k, i in enumerate(nums)]
    lines += [f"        if r[{n + 1}] > 0:",
              f"            _cuda.atomic.max(need, 0, r[{n + 1}])"]
    return "\n".join(lines) + "\n"


def _check_arrays(f, arrays):
    name = getattr(f, "__qualname__", f)
    if not arrays:
        raise TypeError(f"nr.cuda.map_grad({name}) needs at least one array")
    lengths = []
    for k, a in enumerate(arrays):
        shape = getattr(a, "shape", None)
        if shape is None or len(shape) != 1:
            raise TypeError(f"nr.cuda.map_grad({name}): argument {k} must be a 1-D host or "
                            f"device array, not {type(a).__name__} of shape {shape}")
        lengths.append(shape[0])
    if len(set(lengths)) != 1:
        raise ValueError(f"nr.cuda.map_grad({name}): the arrays must have equal lengths, not "
                         f"{lengths}")
    return lengths[0]


def map_grad(f, argnums=0, tape=0):
    """The gradient of scalar ``f`` at every index of equal-length 1-D arrays, one thread per
    index; returns a device array (a tuple of them for a tuple ``argnums``).

    ``tape``: entries of local memory per thread for loops whose iterations must save values
    (see docs/cuda.md); reduction loops and loop-free code need none.
    """
    # One object per (f, argnums, tape): its kernels are reused by every map_grad(f) call.
    table = registry.table(f, MAPS)
    try:
        key = (argnums, tape)
        hit = table.get(key)
    except TypeError:             # unhashable argnums
        return MapGrad(f, argnums, tape)
    if hit is None:
        hit = table[key] = MapGrad(f, argnums, tape)
    return hit


#: On a function (``numbarules.registry``): {(argnums, tape): MapGrad}.
MAPS = "_nr_device_maps"
