"""Forward mode and second derivatives in device code: ``nr.jvp(f)`` and ``nr.hvp(f)`` objects
callable in ``@cuda.jit`` kernels and device functions, per-thread scalar code like ``nr.grad``.

- ``jv(x, t) -> (y, dy)``: the CPU engine's tangent kernel for ``f`` at the argument types (same
  IR, types, rule rule and decisions: ``tangent_kernels``), compiled for the device with its
  callees (derived tangent kernels, scalar rules' partials, frules) as device helpers. Forward
  mode keeps no tape, so loops of any length run with no per-thread bound.
- ``hv(x, v)``: the gradient of the directional derivative (``higher._directional``), through
  the device gradient of that function (``gradients``): reverse over forward, as on the CPU.

Each device driver has an engine node linked to the CPU specialization's, so a method or rule
that changes a decision drops it with the CPU kernels.
"""

from numba.core import types as nbt

from .. import api, forward, higher, kernels, targets
from ..ad import kinds
from ..errors import UnsupportedSyntaxError
from . import glue, methods


def jvp_numba_type(j):
    return _device_type(j, _jvp_driver)


def hvp_numba_type(h):
    return _device_type(h, _hvp_driver)


def _device_type(obj, make_driver):
    """The device Numba type of an ``nr.jvp`` / ``nr.hvp`` object (one per object)."""
    typ = obj.__dict__.get("_nr_device_type")
    if typ is None:
        typ = obj._nr_device_type = glue.device_callable_type(
            obj, 0, lambda argtypes: _resolve(obj, argtypes, make_driver))
    return typ


def _split(obj, argtypes):
    """(primal types, argnums positions, the last argument's types one per position)."""
    argtypes = tuple(argtypes)
    if not argtypes:
        raise UnsupportedSyntaxError(f"{obj.__qualname__} takes the arguments, then the tangent")
    primal, last = argtypes[:-1], argtypes[-1]
    nums = kernels.positions(obj.argnums, len(primal))
    given = (last,) if isinstance(obj.argnums, int) else tuple(last) \
        if isinstance(last, nbt.BaseTuple) else None
    if given is None or len(given) != len(nums):
        raise UnsupportedSyntaxError(
            f"{obj.__qualname__}: argnums is {obj.argnums!r}, so the last argument must be a "
            f"tuple of {len(nums)} tangents, not {last}")
    for k, t in enumerate(primal):
        if not kinds.is_real_scalar(t):
            raise UnsupportedSyntaxError(
                f"{obj.__qualname__}: argument {k} is {t}; device forward mode and second "
                f"derivatives are per-thread scalar code (float, int and bool arguments). "
                f"Hint: use {obj.__qualname__} on the CPU for arrays.")
    for k, t in zip(nums, given):
        if not kinds.is_real_scalar(t) or not kinds.is_float(primal[k]):
            raise UnsupportedSyntaxError(
                f"{obj.__qualname__}: the tangent of argument {k} ({primal[k]}) is {t}; "
                f"tangents are floats, for float arguments")
    return primal, nums


def _resolve(obj, argtypes, make_driver):
    with glue.locked():
        primal, nums = _split(obj, argtypes)
        mask = tuple(i in nums for i in range(len(primal)))
        with glue.cpu_compiles():
            spec = forward._spec(obj.f, primal, mask)
        key = ("forward", tuple(argtypes))
        cached = obj.__dict__.setdefault("_nr_device_drivers", {})
        hit = cached.get(key)
        if hit is not None and hit[1].alive and hit[2] is spec and spec.alive:
            methods.relied_on(node=hit[1])
            return hit[0]

        def build():
            with glue.cpu_compiles():
                driver = make_driver(obj, spec, len(primal), nums)
            disp = glue.device_jit(driver)
            glue.compile_device(disp, tuple(argtypes))
            return disp

        disp, node = methods.compile_recorded(key + (id(obj),), f"device {obj.__qualname__}",
                                              build, lambda: cached.pop(key, None))
        # the CPU specialization's node carries the decisions (method, rule, frule per call)
        node.callees.add(spec.node)
        spec.node.callers.add(node)
        cached[key] = (disp, node, spec)
        return disp


def _tangent_args(obj, nums):
    """The kernel's tangent arguments (in parameter order) read from the last argument ``t``."""
    if isinstance(obj.argnums, int):
        return ["t"]
    return [f"t[{nums.index(k)}]" for k in sorted(set(nums))]


def _jvp_driver(j, spec, n, nums):
    params = [f"a{i}" for i in range(n)]
    src = (f"def {j.__name__}({', '.join(params + ['t'])}):\n"
           f"    return _k({', '.join(params + _tangent_args(j, nums))})\n")
    ns = {"_k": methods.helper(spec.py_func)}
    targets.exec_source(src, ns, f"device {j.__qualname__}")
    return ns[j.__name__]


def _hvp_driver(h, spec, n, nums):
    if not kinds.is_float(spec.return_type):
        raise UnsupportedSyntaxError(f"{h.__qualname__}: {getattr(h.f, '__name__', 'f')} "
                                     f"returns {spec.return_type}; a Hessian needs a float result")
    fn = higher._directional(spec, nums, n)
    # the gradient object of the directional derivative is callable in device code itself
    g = api.grad(fn, nums[0] if isinstance(h.argnums, int) else nums)
    params = [f"a{i}" for i in range(n)]
    tangents = ["t"] if isinstance(h.argnums, int) else [f"t[{i}]" for i in range(len(nums))]
    src = (f"def {h.__name__}({', '.join(params + ['t'])}):\n"
           f"    return _g({', '.join(params + tangents)})\n")
    ns = {"_g": g}
    targets.exec_source(src, ns, f"device {h.__qualname__}")
    return ns[h.__name__]
