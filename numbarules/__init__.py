"""numbarules: generic functions with methods, and reverse-mode AD rules that attach to methods.

Public names are re-exported here and only here.
"""

from .lattice import (Any, Number, Real, AbstractFloat, Integer, Signed, Float64, Float32, Int64,
                      Int32, Bool, AbstractArray, AbstractVector, AbstractMatrix, Array, Vector,
                      Matrix, typeof, issubtype)
from .structs import struct, Tangent
from .dispatch import GenericFunction, Method, generic, which
from .cache import cache_info, clear_cache
from .methods import jit
from . import entries  # noqa: F401 - the backend generic functions call (entries, new methods)
from .profile import compile_stats, CompileStats
from .rules import rrule, frule, scalar_rule, opt_out, non_differentiable, rule_for
from . import primitives  # noqa: F401 - registers the built-in rules
from .api import grad, value_and_grad
from .inspection import code, ad_stats
from .pullbacks import pullback
from .forward import jvp
from .higher import hvp, hessian, jacobian
from .tangent_arith import zero_tangent, update
from .explain import explain
from .checkpoint import checkpointed
from . import testing
from .errors import (NumbarulesError, SignatureError, DispatchError, NoMethodError, AmbiguityError,
                     CompilationError, UnsupportedSyntaxError, DifferentiationError, RuleError,
                     TangentShapeError, FunctionValueError)
from . import cuda_hook as _cuda_hook

__version__ = "0.1.0"

__all__ = [
    "Any", "Number", "Real", "AbstractFloat", "Integer", "Signed", "Float64", "Float32", "Int64",
    "Int32", "Bool", "AbstractArray", "AbstractVector", "AbstractMatrix", "Array", "Vector",
    "Matrix", "typeof", "issubtype", "struct", "Tangent", "GenericFunction", "Method", "generic",
    "which", "jit", "cache_info", "clear_cache", "compile_stats", "CompileStats", "scalar_rule", "rrule", "frule", "jvp", "hvp", "hessian", "jacobian", "zero_tangent", "update", "opt_out", "non_differentiable", "rule_for", "grad", "value_and_grad",
    "pullback", "code", "ad_stats", "explain", "checkpointed", "testing", "NumbarulesError", "SignatureError",
    "DispatchError", "NoMethodError", "AmbiguityError", "CompilationError",
    "UnsupportedSyntaxError", "DifferentiationError", "RuleError", "TangentShapeError",
    "FunctionValueError",
]


def __getattr__(name):
    # nr.cuda needs numba-cuda, which is optional and slow to import: loaded on first use.
    if name == "cuda":
        import importlib
        if not _cuda_hook.numba_cuda_installed():
            raise ImportError(
                "nr.cuda needs numba-cuda, NVIDIA's CUDA target for Numba: pip install "
                "'numbarules[cuda]' (Numba's built-in numba.cuda is not supported)")
        return importlib.import_module(".cuda", __name__)
    if name == "dask":
        # gradients mapped over a Dask cluster; Dask itself is imported when a map runs
        import importlib
        return importlib.import_module(".dask", __name__)
    raise AttributeError(f"module 'numbarules' has no attribute {name!r}")


_cuda_hook.install()
