"""The analysis' account of what an adjoint reads agrees with the code the adjoint is written as.

``residuals.adjoint_reads`` decides which primal values the reverse pass needs, and so which
overwritten values are saved (an array's elements at each later write, a scalar before it is
rebound). An adjoint that reads an operand the analysis does not list reads whatever the
operand holds at the end of the forward pass: a silently wrong gradient (the reads of ``@`` were
missing until the fuzzer found it, seed 20261301 #481). Here every binary operation's adjoint
template is emitted for every rank and activity pattern, and each primal value its text reads
must be one the analysis lists.
"""

import itertools
import re

import pytest

from numbarules.ad import adjoints, analysis, ir, residuals

OPS = ["+", "-", "*", "/", "//", "%", "**", "@"]
RANKS = {"@": [(2, 2), (2, 1), (1, 2), (1, 1)]}
DEFAULT_RANKS = [(0, 0), (1, 1), (2, 2), (0, 1), (1, 0), (2, 1)]


def emitted_reads(op, a, b, active, ranks):
    """The primal names the adjoint template of ``t = a <op> b`` reads, as written."""
    act = lambda x: isinstance(x, ir.Name) and x.id in active        # noqa: E731
    src = lambda x: f"P_{x.id}" if isinstance(x, ir.Name) else repr(x.value)  # noqa: E731
    acc = lambda x, sign, expr: f"D_{x.id} {sign}= {expr}"           # noqa: E731
    ndim = lambda x: ranks.get(x.id, 0) if isinstance(x, ir.Name) else 0  # noqa: E731
    lines = adjoints._binop_adjoint(op, a, b, act, src, "G", acc, ndim)
    return set(re.findall(r"P_(\w+)", "\n".join(lines)))


def operand_cases():
    for op in OPS:
        for ra, rb in RANKS.get(op, DEFAULT_RANKS):
            for act_a, act_b in [(True, False), (False, True), (True, True)]:
                yield op, (ra, rb), act_a, act_b


@pytest.mark.parametrize("op,ranks,act_a,act_b", list(operand_cases()))
def test_binary_adjoints_read_only_what_the_analysis_lists(op, ranks, act_a, act_b):
    a, b = ir.Name("a"), ir.Name("b")
    active = {n for n, on in (("a", act_a), ("b", act_b)) if on}
    expr = ir.BinOp(op, a, b)
    listed = set(residuals.adjoint_reads(expr, active, lambda call: False))
    read = emitted_reads(op, a, b, active, {"a": ranks[0], "b": ranks[1]})
    assert read <= listed, f"t = a {op} b with {sorted(active)} active: the adjoint reads " \
                           f"{sorted(read - listed)}, the analysis lists {sorted(listed)}"


@pytest.mark.parametrize("op,const", list(itertools.product(
    ["+", "-", "*", "/", "%", "**"], [0.0, 1.0, 2.0, 3.5])))
def test_adjoints_with_a_constant_operand(op, const):
    for a, b in ((ir.Name("a"), ir.Const(const)), (ir.Const(const), ir.Name("b"))):
        active = {x.id for x in (a, b) if isinstance(x, ir.Name)}
        listed = set(residuals.adjoint_reads(ir.BinOp(op, a, b), active, lambda call: False))
        read = emitted_reads(op, a, b, active, {})
        assert read <= listed, (op, a, b, read, listed)


def test_the_quotient_form_reads_the_divisor_or_only_the_quotient():
    # q = a / b written with the quotient (adjoints._quotient_adjoint): the quotient is the
    # statement's own result (analysis.plan adds it to result_reads); the rest must be listed.
    src = lambda x: f"P_{x.id}"                                    # noqa: E731
    d = lambda name: f"D_{name}"                                   # noqa: E731
    for a in (ir.Name("a"), ir.Const(1.0), ir.Const(2.5)):
        b = ir.Name("b")
        expr = ir.BinOp("/", a, b)
        active = {"b"} | ({"a"} if isinstance(a, ir.Name) else set())
        listed = set(residuals.adjoint_reads(expr, active, lambda call: False,
                                            quotients=frozenset({id(expr)})))
        lines = adjoints._quotient_adjoint(a, b, "P_q", src, "G", d)
        read = set(re.findall(r"P_(\w+)", "\n".join(lines))) - {"q"}
        assert read <= listed, (a, read, listed)
