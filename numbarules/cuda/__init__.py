"""numbarules on NVIDIA GPUs through numba-cuda (``import numbarules.cuda`` or ``nr.cuda``).

- Generic functions are callable inside ``@cuda.jit`` kernels and device functions, dispatched
  at compile time to device-compiled methods (``methods``).
- ``nr.grad(f)`` / ``nr.value_and_grad(f)`` objects are callable inside kernels (per-thread
  scalar code); ``nr.cuda.grad(f, tape=N)`` gives loops that must save values a per-thread tape.
- ``nr.jvp(f)`` and ``nr.hvp(f)`` objects are callable inside kernels too (``forward``).
- ``nr.cuda.map_grad(f, argnums=0, tape=0)(*arrays)``: the gradient at every index of 1-D arrays.

Under ``NUMBA_ENABLE_CUDASIM=1`` kernels and device functions run as Python; calls of generic
functions there run their compiled CPU code (scalar arguments) at run time.
See docs/cuda.md for what device code supports.
"""

from .. import api, forward as _cpu_forward, higher as _higher
from ..dispatch import GenericFunction
from . import forward as _forward, glue, gradients as _grad, methods
from .map_grad import map_grad
from .gradients import grad, value_and_grad
import sys as _sys

from .. import cache as _cache

# the module, not the function of the same name this package exports
_map_grad_module = _sys.modules[__name__ + ".map_grad"]


# The device tables live on the objects they are about, like the CPU's (numbarules.registry);
# nr.clear_cache empties them with its own. A device vjp lives on its AD specialization and its
# node calls the specialization's: it goes with it.
_cache.clear_with_the_engine(methods.SPECS, methods.HELPER, _grad.VJPS, _grad.GRADIENTS,
                             _map_grad_module.MAPS)

if glue.SIMULATOR:
    from . import simulator  # noqa: F401 - simulator arrays passed to compiled CPU code
else:
    glue.register_typeof(GenericFunction, methods.numba_type)
    glue.register_typeof(api.Gradient, _grad.gradient_numba_type)
    glue.register_typeof(_cpu_forward.Jvp, _forward.jvp_numba_type)
    glue.register_typeof(_higher.Hvp, _forward.hvp_numba_type)


def code(f, *args, argnums=None, tape=0):
    """The generated device vjp of ``f`` at the types of ``args`` (scalars)."""
    spec = api.spec_for_call(f, args, argnums)
    return _grad.source_of(spec, tape)


__all__ = ["map_grad", "grad", "value_and_grad", "code"]
