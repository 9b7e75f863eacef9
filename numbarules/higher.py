"""Second derivatives: ``nr.hvp``, ``nr.hessian`` and ``nr.grad(nr.grad(f))``, reverse over forward.

The tangent kernel of ``f`` (``tangent_kernels``) is generated Python source in the language the
reverse mode differentiates: loops, arrays, arithmetic, calls of rules' helpers. So the
Hessian-vector product is the gradient of a directional derivative,

    H v = grad_x (grad f(x) . v) = nr.grad(lambda x, v: jvp(f)(x, v)[1])(x, v),

one tangent sweep and its reverse, with no Hessian formed (JAX's ``hvp`` runs forward over
reverse; for a symmetric H the two give the same product). The function differentiated is
generated here per tangent kernel (``_directional``), its source registered with linecache
so that the reverse mode reads it like a user's function; its reverse kernels depend on the
tangent kernel's engine node (``_nr_depends``), so a method or rule that drops the tangent
kernel drops them too.

``nr.grad(g)`` where ``g = nr.grad(f)`` of a float argument: ``g(x)`` is the directional
derivative along 1.0, so the same generated function serves as ``g``'s source: second
derivatives of scalar functions, and gradient objects called inside differentiated code.
"""

import re

import numpy as np

from . import api, kernels, pullbacks, registry, tangent_kernels, targets
from .ad import kinds
from .errors import DifferentiationError


def _directional(spec, nums, n, seed=None):
    """A Python function ``(a0, .., an-1, d0, ..) -> dy`` (tangents of arguments ``nums``), or
    with ``seed`` (a float) ``(a0, .., an-1) -> dy`` along ``seed``: the result's tangent,
    differentiable by the reverse mode.

    Where the entry ``spec`` just calls ``f``'s own tangent kernel, that is the kernel of ``f``
    generated again returning the tangent alone (``tangent_only``): the value's computation is
    then not active and a reduction loop's reverse is fused, with no tape. Otherwise (a rule of
    ``f`` itself) a generated function taking item 1 of the entry kernel's result."""
    key = (tuple(nums), seed)
    made = spec.__dict__.setdefault("directional", {})
    if key in made:
        return made[key]
    inner = getattr(spec, "inner", None)
    if inner is not None:
        argtypes, mask = inner.key[0], inner.key[1]
        only = tangent_kernels.specialize(inner.target, argtypes, mask, tangent_only=True)
        if seed is None:
            made[key] = only.py_func
            return only.py_func
        call, depends = f"jvp_{only.name}", (only.node, spec.node)
        ns = {call: only.jvp, "__name__": spec.ns["__name__"]}
        tail = ""
    else:
        call, depends = f"jvp_{spec.name}", (spec.node,)
        ns = {call: spec.jvp, "__name__": spec.ns["__name__"]}
        tail = "[1]"
    params = [f"a{i}" for i in range(n)]
    tangents = [f"d{k}" for k in nums] if seed is None else [repr(float(seed))] * len(nums)
    head = params + ([f"d{k}" for k in nums] if seed is None else [])
    name = f"d_{spec.name}" if seed is not None else f"hvp_{spec.name}"
    src = (f"def {name}({', '.join(head)}):\n"
           f"    return {call}({', '.join(params + tangents)}){tail}\n")
    targets.exec_source(src, ns, f"directional:{spec.name}")
    fn = ns[name]
    fn._nr_depends = depends            # its reverse kernels fall with the tangent kernels
    made[key] = fn
    return fn


def derivative_function(gradient, argtypes):
    """What ``nr.grad(f)`` is differentiated as at ``argtypes`` (float arguments): the generated
    directional derivative along 1.0 (``_directional``). DifferentiationError otherwise."""
    f, argnums = gradient.f, gradient.argnums
    name = getattr(f, "__qualname__", getattr(f, "__name__", "f"))
    if gradient.with_value or not isinstance(argnums, int) or \
            not kinds.is_float(argtypes[argnums % len(argtypes)]):
        raise DifferentiationError(
            f"cannot differentiate {gradient!r} at {tuple(str(t) for t in argtypes)}: second "
            f"derivatives through a gradient object are supported for nr.grad of one float "
            f"argument (its derivative is a directional one). Hint: for arrays use "
            f"nr.hvp({name}) or nr.hessian({name}) from Python.")
    k = argnums % len(argtypes)
    mask = tuple(i == k for i in range(len(argtypes)))
    spec = tangent_kernels.specialize(f, argtypes, mask, entry_of=f)
    if not kinds.is_float(spec.return_type):
        raise DifferentiationError(f"{gradient!r}: {name} returns {spec.return_type}, not a float")
    return _directional(spec, (k,), len(argtypes), seed=1.0)


class Hvp:
    """``nr.hvp(f, argnums)``."""

    def __init__(self, f, argnums):
        self.jvp = api_jvp(f, argnums)
        self.f, self.argnums = f, argnums
        self.__qualname__ = f"hvp({getattr(f, '__qualname__', getattr(f, '__name__', 'f'))})"
        self.__name__ = re.sub(r"\W", "_", f"hvp_{getattr(f, '__name__', 'f')}")

    def __repr__(self):
        return f"<nr.{self.__qualname__}, argnums={self.argnums!r}>"

    def __call__(self, *args):
        grad, args = self.gradient(args)
        return grad(*args)

    def gradient(self, args):
        """``(g, a)``: at these arguments (then the direction) the product is ``g(*a)``, the
        gradient of the directional derivative (``nr.code`` shows its kernels)."""
        if not args:
            raise TypeError(f"{self.__qualname__} takes the arguments, then the direction")
        *primal, v = args
        primal = api._positional(self.f, tuple(primal), "hvp")
        nums = kernels.positions(self.argnums, len(primal))
        spec = self.jvp._entry(primal, nums)
        if not kinds.is_float(spec.return_type):
            raise TypeError(f"{self.__qualname__}: {getattr(self.f, '__name__', 'f')} returns "
                            f"{spec.return_type}; a Hessian needs a float result")
        vs = (v,) if isinstance(self.argnums, int) else tuple(v)
        if len(vs) != len(nums):
            raise ValueError(f"{self.__qualname__}: argnums is {self.argnums!r}, so the direction "
                             f"must be a tuple of {len(nums)} tangents")
        given = tuple(self.jvp._tangent(k, primal[k], t, spec) for k, t in zip(nums, vs))
        fn = _directional(spec, nums, len(primal))
        grad = api.grad(fn, nums[0] if isinstance(self.argnums, int) else nums)
        return grad, (*primal, *given)


def api_jvp(f, argnums):
    from .forward import jvp
    return jvp(f, argnums)


def hvp(f, argnums=0):
    """The Hessian-vector product of a scalar function: ``nr.hvp(f, argnums)(*args, v)``.

    ``v`` has the kind and shape of argument ``argnums`` (a tuple of directions for a tuple of
    argnums: the result is then the tuple of the Hessian's blocks applied to them). Computed as
    the gradient of the directional derivative (reverse over forward), without forming the
    Hessian: a tangent sweep and its reverse.
    """
    return registry.held(f, "_nr_hvps", argnums, lambda: Hvp(f, argnums))


def hessian(f, argnums=0):
    """The Hessian of a scalar function of one float or float array argument:
    ``nr.hessian(f, argnums)(*args)`` is a float for a float, an array of shape
    ``x.shape + x.shape`` for an array ``x`` (``(n, n)`` for a vector): one Hessian-vector
    product per element of ``x``."""
    if not isinstance(argnums, int):
        raise TypeError("nr.hessian differentiates with respect to one argument (an int argnums)")
    product = hvp(f, argnums)

    def hessian_of(*args):
        x = args[argnums]
        if isinstance(x, np.ndarray):
            if x.dtype.kind != "f":
                raise TypeError(f"hessian: argument {argnums} is a {x.dtype} array, not floats")
            out = np.empty(x.shape + x.shape, x.dtype)
            flat = out.reshape(x.size, x.size)
            e = np.zeros(x.size, x.dtype)
            for i in range(x.size):
                e[i] = 1.0
                flat[i] = np.asarray(product(*args, e.reshape(x.shape))).ravel()
                e[i] = 0.0
            return out
        if isinstance(x, (float, np.floating)) and not isinstance(x, bool):
            return product(*args, 1.0)
        raise TypeError(f"hessian: argument {argnums} is {type(x).__name__}; a float or a float "
                        f"array is expected")
    hessian_of.__qualname__ = f"hessian({getattr(f, '__qualname__', 'f')})"
    return hessian_of



def jacobian(f, argnums=0):
    """The Jacobian of ``f`` with respect to one float or float-array argument:
    ``nr.jacobian(f, argnums)(*args)`` has the shape ``y.shape + x.shape`` (a float result
    gives the gradient's shape, a float argument ``y.shape``).

    Forward or reverse, whichever takes fewer sweeps: one ``nr.jvp`` per element of ``x`` when
    ``x`` has no more elements than ``y``, else one pullback per element of ``y``.
    """
    if not isinstance(argnums, int):
        raise TypeError("nr.jacobian differentiates with respect to one argument (an int argnums)")
    forward = api_jvp(f, argnums)
    name = getattr(f, "__qualname__", getattr(f, "__name__", "f"))

    def jacobian_of(*args):
        args = api._positional(f, tuple(args), "jacobian")
        x = args[argnums]
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            xshape, n = x.shape, x.size
        elif isinstance(x, (float, np.floating)) and not isinstance(x, bool):
            xshape, n = (), 1
        else:
            raise TypeError(f"jacobian({name}): argument {argnums} is {type(x).__name__}; a "
                            f"float or a float array is expected")
        y = forward(*args, np.zeros_like(x) if xshape else 0.0)[0]     # the result's shape
        if not (isinstance(y, np.ndarray) and y.dtype.kind == "f"
                or isinstance(y, (float, np.floating))):
            raise TypeError(f"jacobian({name}): the result is {type(y).__name__}; a float or a "
                            f"float array is expected")
        yshape, m = np.shape(y), int(np.size(y))
        out = np.empty(yshape + xshape)
        flat = out.reshape(m, n)
        if n <= m:
            e = np.zeros(n)
            for j in range(n):
                e[j] = 1.0
                tangent = e.reshape(xshape) if xshape else 1.0
                flat[:, j] = np.ravel(forward(*args, tangent)[1])
                e[j] = 0.0
        else:
            _, pb = pullbacks.pullback(f, *args)
            e = np.zeros(m)
            for i in range(m):
                e[i] = 1.0
                cot = e.reshape(yshape).copy() if yshape else 1.0
                t = pb(cot)[argnums]
                flat[i, :] = 0.0 if t is None else np.ravel(t)
                e[i] = 0.0
        return out if out.shape else float(out)
    jacobian_of.__qualname__ = f"jacobian({name})"
    return jacobian_of
