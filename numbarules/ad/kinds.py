"""The kinds of values the AD engine tells apart by their Numba type: floats, float arrays,
structs and tuples of those (which carry tangents), values with no tangent (integers, booleans,
shapes), and why any other kind is refused (``tangent_refusal``).
"""

from numba import types as nbt


def is_float(t):
    return isinstance(t, nbt.Float)


def is_real_scalar(t):
    """A float, an int or a bool (a Literal one too)."""
    return isinstance(nbt.unliteral(t), (nbt.Float, nbt.Integer, nbt.Boolean))


def is_array(t):
    return isinstance(t, nbt.Array)


def is_float_array(t):
    return isinstance(t, nbt.Array) and isinstance(t.dtype, nbt.Float)


def is_float_tuple(t):
    """A plain tuple holding at least one float, float array or such aggregate, and otherwise
    only values with no tangent: its adjoint is a tuple of the same arity (None for those)."""
    return isinstance(t, nbt.BaseTuple) and not isinstance(t, nbt.BaseNamedTuple) \
        and _float_aggregate(t)


def is_float_struct(t):
    """A @nr.struct value whose fields hold at least one float, float array or such aggregate
    (nested structs, tuples), and otherwise only values with no tangent: its adjoint is a
    Tangent[S] (None for those fields)."""
    return isinstance(t, nbt.BaseNamedTuple) and "_nr_fields" in vars(t.instance_class) \
        and _float_aggregate(t)


def is_aggregate(t):
    return is_float_struct(t) or is_float_tuple(t)


def _float_aggregate(t):
    return any(differentiable(e) for e in t) \
        and all(differentiable(e) or _carries_no_tangent(e) for e in t)


def holds_arrays(t):
    """Whether the tangent of aggregate ``t`` holds arrays (shared, updated in place): such an
    adjoint is bound once and never reset."""
    return is_aggregate(t) and any(is_float_array(e) or holds_arrays(e) for e in t)


def differentiable(t):
    return is_float(t) or is_float_array(t) or is_float_tuple(t) or is_float_struct(t)


def tangent_refusal(t):
    """Why a value of type ``t`` can be neither differentiated nor given ``None`` as its tangent
    (a list, a complex number, ...), or None when it can."""
    if is_function(t):
        return ("a function (passed as a value): it has no derivative. Hint: choose the float "
                "arguments with argnums.")
    if differentiable(t) or _carries_no_tangent(t) or (
            isinstance(t, nbt.Array) and isinstance(t.dtype, (nbt.Integer, nbt.Boolean))):
        return None
    if isinstance(t, (nbt.List, nbt.ListType)):
        return ("a list: numbarules differentiates floats, float arrays, structs and tuples. "
                "Hint: pass a tuple, or a NumPy array (np.asarray).")
    if isinstance(t, nbt.Complex) or isinstance(t, nbt.Array) and isinstance(t.dtype, nbt.Complex):
        return ("complex: numbarules differentiates real floats. Hint: pass the real and "
                "imaginary parts as separate float arguments.")
    if isinstance(t, nbt.BaseTuple):
        return (f"a tuple or struct holding {t}: numbarules differentiates those holding floats, "
                f"float arrays, integers and such tuples and structs.")
    return (f"{t}: numbarules differentiates floats, float arrays, structs and tuples of those "
            f"(integers and booleans get None).")


def is_function(t):
    """A function passed as a value (an @njit dispatcher's type, a generic function's)."""
    return isinstance(t, (nbt.Dispatcher, nbt.Function))


def _carries_no_tangent(t):
    """Integers, booleans, None, functions and tuples of them (shapes): values with no
    tangent."""
    if is_function(t):
        return True
    if isinstance(t, nbt.BaseTuple) and not isinstance(t, nbt.BaseNamedTuple):
        return all(_carries_no_tangent(e) for e in t)
    return isinstance(t, (nbt.Integer, nbt.Boolean, nbt.NoneType)) or t is None
