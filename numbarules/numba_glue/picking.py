"""A compiled function's code run from Python with one item of its result returned: a second
CPython wrapper around machine code that exists already.

``nr.value_and_grad(f)`` and ``nr.grad(f)`` run the same forward and reverse and differ only in
what they return. The first compiles a kernel returning ``(value, grads)``; the second adopts
that kernel's code through a wrapper of its own that boxes ``grads`` alone, where it compiled the
whole kernel again (the heavy part of a first gradient: in the fuzzer's programs, a quarter of all
compile time). The wrapper is a small LLVM module of its own, built like Numba's own
(``numba.core.callwrapper.PyCallWrapper``, which this subclasses): it unboxes the arguments,
calls the kernel by its symbol (the ``nr.call.`` alias ``callables._register`` gives it), and
boxes the picked item (the others released). Its Environment pointer lives in a global of its
own name, set as Numba sets its own.

Part of the CPU door into ``numba.core`` (the ``numba_glue`` package).
"""

from llvmlite import ir as llvm_ir
from numba import _dynfunc
from numba.core import config as numba_config
from numba.core import types
from numba.core.callwrapper import PyCallWrapper
from numba.core.compiler_lock import global_compiler_lock

from .callables import _alias, _register


class _Descriptor:
    """The kernel's FunctionDescriptor, as the wrapper's builder reads it: the wrapper's own
    symbol and Environment global; everything else the kernel's."""

    def __init__(self, fndesc, suffix):
        self._fndesc = fndesc
        self.llvm_cpython_wrapper_name = f"{fndesc.llvm_cpython_wrapper_name}.{suffix}"
        self.env_name = f"{fndesc.env_name}.{suffix}"

    def __getattr__(self, name):
        return getattr(self._fndesc, name)


class _PickingAPI:
    """Numba's PythonAPI for the wrapper, except that boxing the result boxes item ``index``
    of the kernel's tuple and releases the other items."""

    def __init__(self, api, builder, restype, index):
        self._api, self._builder, self._restype, self._index = api, builder, restype, index

    def __getattr__(self, name):
        return getattr(self._api, name)

    def from_native_return(self, typ, val, env_manager=None):
        b, context = self._builder, self._api.context
        for k, t in enumerate(self._restype.types):
            if k != self._index and context.data_model_manager[t].has_nrt_meminfo():
                context.nrt.decref(b, t, b.extract_value(val, k))
        return self._api.from_native_return(typ, b.extract_value(val, self._index), env_manager)


class _PickingWrapper(PyCallWrapper):
    def __init__(self, context, module, func, fndesc, env, index):
        super().__init__(context, module, func, fndesc, env, call_helper=None, release_gil=False)
        self.index = index

    def build_wrapper(self, api, builder, closure, args, kws):
        picking = _PickingAPI(api, builder, self.fndesc.restype, self.index)
        super().build_wrapper(picking, builder, closure, args, kws)

    def get_env(self, api, builder):
        # the Environment pointer in a global of the wrapper's own (a second global of the
        # kernel's name in another library would be a second symbol of that name)
        gv = self.context.declare_env_global(builder.module, self.fndesc.env_name)
        envptr = builder.load(gv)
        env_body = self.context.get_env_body(builder, envptr)
        api.emit_environment_sentry(envptr, return_pyobject=True, debug_msg=self.fndesc.env_name)
        return api.get_env_manager(self.env, env_body, envptr)

    def _simplified_return_type(self):
        return self.fndesc.restype.types[self.index]


@global_compiler_lock
def picked_result(cres, index):
    """A CompileResult like ``cres`` (whose return type is a tuple) whose entry point, called
    from Python, returns item ``index`` of what ``cres``'s code returns. Nothing of ``cres``'s
    code is compiled again: the new entry point calls it."""
    restype = cres.signature.return_type
    if not isinstance(restype, types.BaseTuple):
        raise TypeError(f"picked_result: {restype} is not a tuple")
    context, fndesc = cres.target_context, cres.fndesc
    if not context.enable_nrt:
        # code loaded from the disk cache comes with the plain CPU context; boxing an array
        # needs the NRT's (as every compile of Numba's own has it)
        context = context.subtarget(enable_nrt=True)
    _register(fndesc.mangled_name, cres.library)
    desc = _Descriptor(fndesc, f"item{index}")
    codegen = context.codegen()
    library = codegen.create_library(f"{fndesc.qualname}.item{index}")
    module = context.create_module("wrapper")
    fnty = context.call_conv.get_function_type(fndesc.restype, fndesc.argtypes)
    callee = llvm_ir.Function(module, fnty, _alias(fndesc.mangled_name))
    _PickingWrapper(context, module, callee, desc, cres.environment, index).build()
    library.add_ir_module(module)
    # unboxing, a call and boxing: nothing for LLVM's optimiser to win (Numba reads the level at
    # each finalize; docs/numba-internals.md)
    level, numba_config.OPT = numba_config.OPT, numba_config._OptLevel(0)
    try:
        library.finalize()
    finally:
        numba_config.OPT = level
    codegen.set_env(desc.env_name, cres.environment)
    fnptr = library.get_pointer_to_function(desc.llvm_cpython_wrapper_name)
    cfunc = _dynfunc.make_function(fndesc.lookup_module(), fndesc.qualname.split(".")[-1],
                                   f"compiled wrapper for {fndesc.qualname!r}, item {index}",
                                   fnptr, cres.environment, (library, cres.library))
    item = restype.types[index]
    return cres._replace(entry_point=cfunc, signature=cres.signature.replace(return_type=item))
