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


def _squares_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] + 0.5 * x[i]
    return s


def _array_expression(x):
    return np.sum(x * x + 0.25 * x) + _squares_sum(x)


def test_a_lowerer_does_not_outlive_its_compile():
    # The located call convention finds the statement being lowered through the compile's copy
    # of the target context. That copy outlives the compile: an array expression's subroutine,
    # compiled with it, stays in Numba's process-wide cache of subroutines. A strong reference
    # from it kept the lowerer, with the kernel's whole LLVM and Numba IR, alive (150,000 Python
    # objects per fuzz program; full garbage collections took a quarter of a long process's
    # time)
    import gc
    from numbarules.numba_glue import located
    nr.grad(_array_expression)(np.ones(4))
    gc.collect()
    alive = [o for o in gc.get_objects() if type(o) is located.LocatingLower]
    assert alive == []


def test_the_garbage_collector_is_paused_while_compiling_and_restored_after():
    import gc
    from numba.core import event
    seen = []

    class Listener(event.Listener):
        def on_start(self, ev):
            seen.append(gc.isenabled())

        def on_end(self, ev):
            pass

    def two_sums(x):
        return np.sum(x) + _squares_sum(x)

    listener = Listener()
    event.register("numba:compile", listener)
    try:
        assert gc.isenabled()
        nr.grad(two_sums)(np.ones(3))
        assert gc.isenabled()
        gc.disable()
        try:
            nr.value_and_grad(lambda x: 2.0 * _squares_sum(x))(np.ones(2))
            assert not gc.isenabled()      # left as the caller had it
        finally:
            gc.enable()
    finally:
        event.unregister("numba:compile", listener)
    assert seen and not any(seen)


def two_layouts(M):
    u = M[:, 0] * 1.0           # a column of a Fortran matrix: layout F
    for _ in range(2):
        u = u[::-1].copy()      # layout C: u is 'A' after the loop
    v = u * 0.5                 # Numba cannot allocate an 'A' result (NotImplementedError)
    return np.sum(v)


def two_layouts_checkpointed(x, M):
    u = M[:, 0] * 1.0
    for _ in nr.checkpointed(range(3), snapshots=0):
        if M[1, 0] >= x:
            u = u * 0.5 + 0.13
        else:
            u = u[::-1].copy()
    return np.sum(u * u)


@pytest.mark.parametrize("call", [
    lambda M: nr.grad(two_layouts)(M),
    lambda M: nr.jit(two_layouts)(M),
    # fuzz seed 64000 #71: Numba asserted in a typed list's append (a cast between layouts)
    lambda M: nr.grad(two_layouts_checkpointed, argnums=(0, 1))(0.3, M),
], ids=["grad", "jit", "checkpointed"])
def test_numba_failing_to_generate_code_names_the_users_line(call):
    """Numba's lowering raises NotImplementedError or asserts (no NumbaError, no location) on
    code its typing accepted; the user gets a CompilationError at their line with the reason."""
    M = np.asfortranarray(np.arange(9.0).reshape(3, 3))
    with pytest.raises(nr.CompilationError) as info:
        call(M)
    msg = str(info.value)
    assert f'File "{__file__}"' in msg and "layout 'A'" in msg, msg
    assert info.value.file == __file__ and info.value.line is not None
    assert info.value.numba_failure
    assert "Traceback" not in msg
