"""Errors compiled code raises at run time name the user's line (numba_glue.located): from the
kernels' own line table, at no run-time cost, and without running the user's function again.
Plain @numba.njit code compiled in the same process is left as Numba makes it."""

import numba
import numpy as np
import pytest

import numbarules as nr


def _frames(exc):
    tb, out = exc.__traceback__, []
    while tb is not None:
        out.append((tb.tb_frame.f_code.co_filename, tb.tb_frame.f_code.co_name, tb.tb_lineno))
        tb = tb.tb_next
    return out


def _line_of(func, text):
    import inspect
    lines, first = inspect.getsourcelines(func)
    return first + next(k for k, ln in enumerate(lines) if text in ln)


def reads_past_end(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i + 1]
    return s


def test_an_index_past_the_end_names_the_users_line():
    with pytest.raises(IndexError) as info:
        nr.grad(reads_past_end, boundscheck=True)(np.ones(3))
    assert (__file__, "reads_past_end", _line_of(reads_past_end, "x[i + 1]")) \
        in _frames(info.value)


def mismatched(A, B):
    C = A * 2.0
    D = C + B
    return np.sum(D * D)


def test_shapes_that_do_not_broadcast_name_the_users_line_in_every_path():
    A, B = np.ones((2, 3)), np.ones((4, 3))
    line = _line_of(mismatched, "C + B")
    for call in (lambda: nr.grad(mismatched)(A, B),
                 lambda: nr.value_and_grad(mismatched, (0, 1))(A, B),
                 lambda: nr.pullback(mismatched, A, B)):
        with pytest.raises(ValueError) as info:
            call()
        assert (__file__, "mismatched", line) in _frames(info.value)
        # Numba's own words, from the compiled code: the function was not run again in Python
        # (NumPy would say "operands could not be broadcast together with shapes")
        assert str(info.value).startswith("unable to broadcast")
        assert f'File "{__file__}", line {line}' in str(info.value)


def inner_broadcast(a, b):
    return np.sum((a + b) * a)


def outer_calls(a, b):
    return inner_broadcast(a, b) * 2.0


def test_the_line_is_in_the_function_that_failed():
    with pytest.raises(ValueError) as info:
        nr.grad(outer_calls)(np.ones(3), np.ones(4))
    assert (__file__, "inner_broadcast", _line_of(inner_broadcast, "(a + b)")) \
        in _frames(info.value)


@nr.jit
def jit_broadcast(a, b):
    c = a + b
    return c.sum()


@numba.njit
def plain_broadcast(a, b):
    c = a + b
    return c.sum()


def test_nr_jit_code_is_located_and_plain_numba_code_is_not_changed():
    with pytest.raises(ValueError) as info:
        jit_broadcast(np.ones(3), np.ones(4))
    line = _line_of(jit_broadcast.py_func, "c = a + b")
    assert (__file__, "jit_broadcast", line) in _frames(info.value)
    assert f'line {line}, ' in str(info.value)
    # plain @numba.njit, compiled after ours: no frame of its own, as Numba makes it
    with pytest.raises(ValueError) as info:
        plain_broadcast(np.ones(3), np.ones(4))
    assert not any(name == "plain_broadcast" for _, name, _ in _frames(info.value))
