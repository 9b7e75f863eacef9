"""Every error numbarules raises, rooted in one base class.

Each carries structured fields (the function, the signature, the candidates, the user's file and
line) so that tools and tests can read them without parsing the message.
"""


class NumbarulesError(Exception):
    """Base class of every numbarules error."""


class SignatureError(NumbarulesError, TypeError):
    """A method or struct declaration whose types numbarules cannot use."""

    def __init__(self, message, *, function=None, parameter=None, file=None, line=None):
        super().__init__(message)
        self.function = function
        self.parameter = parameter
        self.file = file
        self.line = line


class DispatchError(NumbarulesError, TypeError):
    """A call that no single method can answer."""

    def __init__(self, message, *, function=None, argtypes=(), candidates=()):
        super().__init__(message)
        self.function = function
        self.argtypes = tuple(argtypes)
        self.candidates = tuple(candidates)


class NoMethodError(DispatchError):
    """No method of a generic function is applicable to the argument types."""


class AmbiguityError(DispatchError):
    """Several methods apply and none is more specific than all the others."""

    def __init__(self, message, *, suggestion=None, **kw):
        super().__init__(message, **kw)
        self.suggestion = suggestion


class CompilationError(NumbarulesError):
    """A method or ``nr.jit`` body that Numba could not compile for the given types."""

    def __init__(self, message, *, function=None, argtypes=(), file=None, line=None):
        super().__init__(message)
        self.function = function
        self.argtypes = tuple(argtypes)
        self.file = file
        self.line = line


class UnsupportedSyntaxError(NumbarulesError):
    """A construct the AD transform does not handle."""


class DifferentiationError(NumbarulesError):
    """A call the AD transform cannot differentiate: no source and no rule."""


class FunctionValueError(NumbarulesError, TypeError):
    """A function passed as an argument that compiled code cannot take (a closure over an array,
    a built-in function); the message says what to pass instead."""


class RuleError(NumbarulesError):
    """A malformed rule."""


class TangentShapeError(RuleError, ValueError):
    """A rule returned a tangent whose shape differs from its argument's (raised by compiled
    code, which passes the two shapes: NumPy would have broadcast it without a word)."""

    def __init__(self, message, got=None, expected=None):
        super().__init__(message, got, expected)
        self.got = got
        self.expected = expected

    def __str__(self):
        return f"{self.args[0]}: shape {self.got}, expected {self.expected}"
