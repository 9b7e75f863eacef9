"""The CPU gradients the CUDA tests compare against are themselves right: the zoo of
tests/cuda_zoo.py against central finite differences (and, for its two deliberately
non-derivative rules, against the rules' formulas)."""

import numpy as np
import pytest

import numbarules as nr
from numbarules.testing import check_grad

from cuda_zoo import CASES, IDS, cpu_gradients, rrule_caller, rule_caller

RULED = (rule_caller, rrule_caller)


@pytest.mark.parametrize("case", [c for c in CASES if c.f not in RULED],
                         ids=[i for c, i in zip(CASES, IDS) if c.f not in RULED])
def test_zoo_cpu_gradients_match_finite_differences(case):
    arrays = case.make(5)
    for i in (0, 2, 4):
        args = tuple(a[i].item() for a in arrays)
        check_grad(case.f, *args, argnums=case.argnums, rtol=1e-6)


def test_zoo_rules_give_their_own_formulas_on_the_cpu():
    x = np.linspace(-1.0, 1.0, 5) + 0.013
    np.testing.assert_allclose([nr.grad(rule_caller)(v) for v in x], 3.0 + 2.0 * x, rtol=1e-12)
    eps = 0.25
    y = np.sqrt(x * x + eps)
    got = cpu_gradients(CASES[IDS.index("rrule_caller")], (x, np.full(5, eps)))
    np.testing.assert_allclose(got[0], 2.0 * x / y * x + y, rtol=1e-12)
