"""Gradients in device code: per-thread vjp device functions from the same AD engine.

For each AD specialization the CPU engine builds (``kernels.specialize``: same IR, types, plan
and decisions), the device gets one function ``vjp_<name>(args, dy) -> (y, tangents..., need)``
(``codegen.generate_device``): the forward then the reverse sweep in one frame, with tapes in
``cuda.local.array`` of a compile-time capacity. A reduction loop (``s += ...``) runs fused and
needs no tape; a loop whose iterations must save values needs the per-thread bound ``tape=N``,
or is refused at compile time with ``nr.UnsupportedSyntaxError``. Past the bound at run time the
tangents are NaN and ``need`` says how many entries were needed: never a silent wrong gradient.

Callees are differentiated the same way (checkpointed: the reverse sweep calls the callee's
device vjp on its saved inputs); a rule's forward and pullback are compiled for the device.
"""

import numpy as np

from .. import api, kernels, numba_glue, registry, rules, targets
from ..ad import codegen, device, kinds
from ..errors import UnsupportedSyntaxError
from . import glue, methods

#: On an AD specialization (``numbarules.registry``): {tape: (device vjp dispatcher, node)}.
VJPS = "_nr_device_vjps"
#: On a function: {(argnums, with_value, tape): gradient object} of ``nr.cuda.grad(f, tape=N)``.
GRADIENTS = "_nr_device_gradients"


def device_vjp(spec, tape):
    """The device vjp of AD specialization ``spec`` with loop tapes of ``tape`` entries."""
    table = registry.table(spec, VJPS)
    hit = table.get(tape)
    if hit is not None and hit[1].alive and spec.alive:
        methods.relied_on(node=hit[1])
        return hit[0]
    if isinstance(spec.target, rules.Rule):
        source, ns = _rule_source(spec)
    else:
        source, ns = _derived_source(spec, tape)
    name = f"vjp_{spec.name}"
    targets.exec_source(source, ns, f"device vjp:{spec.name}")
    disp = glue.device_jit(ns[name])
    argtypes = tuple(spec.argtypes) + (spec.return_type,)

    def build():
        _callees(spec, tape, ns)
        try:
            glue.compile_device(disp, argtypes)
        except glue.NumbaErrors as exc:
            raise UnsupportedSyntaxError(
                f"the device gradient of {spec.func.__qualname__} does not compile for the "
                f"device:\n{glue.error_text(exc)}\nSee docs/cuda.md for what device code "
                f"supports.") from None

    with glue.locked():
        _, node = methods.compile_recorded(
            ("vjp", spec, tape), f"device vjp {spec.name}", build,
            lambda: table.pop(tape, None))
        # The CPU specialization's node carries the engine's decisions (method and rule per call):
        # when one changes, that node drops and takes this one with it.
        node.callees.add(spec.node)
        spec.node.callers.add(node)
        table[tape] = (disp, node)
    return disp


def _callees(spec, tape, ns):
    # Bound inside the frame so that the callees' nodes become this vjp's callees.
    for info in getattr(spec, "calls", ()):
        callee = info.get("callee")
        if callee is not None:
            if callee is spec or not callee.ready:
                raise UnsupportedSyntaxError(
                    f"{spec.func.__qualname__} is recursive (through "
                    f"{callee.func.__qualname__}): recursion is not supported in device "
                    f"gradients")
            ns[f"vjp_{callee.name}"] = device_vjp(callee, tape)


def source_of(spec, tape):
    """The device vjp source (what ``nr.cuda.code`` shows), generated without compiling."""
    if isinstance(spec.target, rules.Rule):
        return _rule_source(spec)[0]
    return _derived_source(spec, tape)[0]


def _namespace(spec):
    ns = methods.device_namespace(spec.fwd.py_func.__globals__)
    ns["_cuda"] = glue.cuda
    ns["_math"] = __import__("math")
    ns["_np"] = np
    return ns


def _derived_source(spec, tape):
    _refuse_arrays(spec)
    known, looped = device.device_tape_demand(spec.fn, spec.plan)
    if looped is not None and tape <= 0:
        k = looped - spec.fn.firstline
        text = spec.fn.source_lines[k].strip() if 0 <= k < len(spec.fn.source_lines) else ""
        raise UnsupportedSyntaxError(
            f"a loop of {spec.func.__qualname__} saves a value on a tape at every iteration "
            f"(an overwritten value, a branch decision or an inner trip count)\n"
            f'  File "{spec.fn.file}", line {looped}, in {spec.func.__qualname__}\n'
            f"    {text}\n"
            f"Device code cannot allocate a tape of unknown length. Give a per-thread bound: "
            f"nr.cuda.map_grad(f, tape=N) or nr.cuda.grad(f, tape=N) (N entries of local "
            f"memory; a thread that needs more gets NaN gradients and map_grad raises), or "
            f"write the loop as a reduction (s += ... with every other value local to one "
            f"iteration), which needs no tape.")
    # Loops of constant length are counted in ``known``; ``tape`` bounds the others.
    capacity = known + (tape if looped is not None else 0)
    source = codegen.generate_device(spec.fn, spec.types, spec.plan, spec.name, spec.key[1],
                                     capacity)
    return source, _namespace(spec)


def _refuse_arrays(spec):
    for p, t in zip(spec.fn.params, spec.argtypes):
        if not (kinds.is_float(t) or isinstance(t, numba_glue.types.Integer)
                or isinstance(t, numba_glue.types.Boolean)):
            raise UnsupportedSyntaxError(
                f"{spec.func.__qualname__}: argument {p!r} is {t}; device gradients are "
                f"per-thread scalar code (float, int and bool arguments)\n"
                f'  File "{spec.fn.file}", line {spec.fn.firstline}, in {spec.func.__qualname__}\n'
                f"Hint: differentiate per element (nr.cuda.map_grad) or on the CPU (nr.grad).")
    for name, t in spec.types.items():
        if isinstance(t, numba_glue.types.Array):
            raise UnsupportedSyntaxError(
                f"{spec.func.__qualname__}: {name!r} is an array ({t}); device gradients are "
                f"per-thread scalar code and cannot allocate\n"
                f'  File "{spec.fn.file}", line {spec.fn.firstline}, in {spec.func.__qualname__}')


def _rule_source(spec):
    n = len(spec.argtypes)
    params = ", ".join(f"a{i}" for i in range(n))
    outs = "".join(f"_d[{k}], " for k in range(n))
    source = (f"def vjp_{spec.name}({params}{', ' if params else ''}_dout):\n"
              f"    # {spec.target!r} for device code: its forward, then its pullback\n"
              f"    _y, _res = fwd_{spec.name}({params})\n"
              f"    _d = bwd_{spec.name}(_res, _dout)\n"
              f"    return (_y, {outs}0)\n")
    ns = _namespace(spec)
    ns[f"fwd_{spec.name}"] = methods.helper(spec.fwd.py_func)
    ns[f"bwd_{spec.name}"] = methods.helper(spec.bwd.py_func)
    return source, ns


# --- gradient objects -------------------------------------------------------------------------

def prepare_gradient(g, argtypes):
    """(spec, argument positions) of gradient object ``g`` at ``argtypes``: the CPU's
    specialization (kernels.gradient_spec), whose kernels device.py writes again as one device
    function, at the default compile flags: ``boundscheck`` and ``fastmath`` do not apply to
    device code (docs/cuda.md)."""
    with glue.cpu_compiles():
        spec, nums, _ = kernels.gradient_spec(g.f, tuple(argtypes), g.argnums)
    return spec, nums


def tape_of(g):
    return getattr(g, "_nr_device_tape", 0)


def driver(g, argtypes):
    """A device function ``grad_f(args)`` for gradient object ``g`` (its device driver)."""
    spec, nums = prepare_gradient(g, argtypes)
    vjp = device_vjp(spec, tape_of(g))
    n = len(argtypes)
    params = ", ".join(f"a{i}" for i in range(n))
    grads = (f"_r[{nums[0] + 1}]" if isinstance(g.argnums, int)
             else "(" + "".join(f"_r[{i + 1}], " for i in nums) + ")")
    result = f"_r[0], {grads}" if g.with_value else grads
    src = (f"def {g.__name__}({params}):\n"
           f"    _r = _vjp({params}{', ' if params else ''}_seed)\n"
           f"    return {result}\n")
    ns = {"_vjp": vjp, "_seed": api._one(spec.return_type)}
    targets.exec_source(src, ns, f"device {g.__qualname__}")
    return ns[g.__name__]


def gradient_numba_type(g):
    """Device Numba type of gradient object ``g`` (one per object: its resolver checks that the
    specialization it built is still valid)."""
    typ = g.__dict__.get("_nr_device_type")
    if typ is None:
        typ = g._nr_device_type = glue.device_callable_type(g, 0, lambda argtypes: _resolve(g, argtypes))
    return typ


def _resolve(g, argtypes):
    # Our errors (NoMethodError, UnsupportedSyntaxError, ...) leave numba-cuda's typing as they
    # are: Numba re-raises exceptions that are not its own, so the user sees ours, not a
    # typing report.
    with glue.locked():
        spec, _ = prepare_gradient(g, argtypes)
        key = ("driver", tuple(argtypes))
        cached = g.__dict__.setdefault("_nr_device_drivers", {})
        hit = cached.get(key)
        if hit is not None and hit[1].alive and hit[2] is spec:
            methods.relied_on(node=hit[1])
            return hit[0]

        def build():
            disp = glue.device_jit(driver(g, argtypes))
            glue.compile_device(disp, argtypes)
            return disp

        disp, node = methods.compile_recorded(key + (id(g),), f"device {g.__qualname__}", build,
                                              lambda: cached.pop(key, None))
        cached[key] = (disp, node, spec)
        return disp


def grad(f, argnums=0, tape=0):
    """``nr.grad(f, argnums)`` whose device code keeps loop tapes of ``tape`` entries per thread."""
    return _with_tape(f, argnums, False, tape)


def value_and_grad(f, argnums=0, tape=0):
    """``nr.value_and_grad(f, argnums)`` with device loop tapes of ``tape`` entries per thread."""
    return _with_tape(f, argnums, True, tape)


def _with_tape(f, argnums, with_value, tape):
    if isinstance(tape, bool) or not isinstance(tape, int) or tape < 0:
        raise TypeError(f"tape must be a non-negative int (entries per thread), not {tape!r}")
    if tape == 0:
        return (api.value_and_grad if with_value else api.grad)(f, argnums)   # nr.grad's own
    # One object per (f, argnums, kind, tape), like nr.grad: compiled drivers are reused.
    table = registry.table(f, GRADIENTS)
    try:
        key = (argnums, with_value, tape)
        g = table.get(key)
    except TypeError:            # unhashable argnums
        key, g = None, None
    if g is None:
        g = api.Gradient(f, argnums, with_value)
        g._nr_device_tape = tape
        if key is not None:
            table[key] = g
    return g
