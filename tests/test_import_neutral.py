"""Importing numbarules changes nothing else: plain @numba.njit code compiles and computes the
same before and after the import. numbarules' own axis reductions (np.max(x, axis) and friends,
which Numba 0.68 lacks) exist only in the code numbarules compiles."""

import json
import subprocess
import sys
import textwrap

import numpy as np

import numbarules as nr

PROBE = textwrap.dedent('''
    import json, sys
    import numpy as np
    import numba

    SOURCES = {
        "max_axis": "def f(x):\\n    return np.max(x, axis=0)\\n",
        "min_axis": "def f(x):\\n    return np.min(x, 1)\\n",
        "mean_axis": "def f(x):\\n    return np.mean(x, axis=1)\\n",
        "prod_axis": "def f(x):\\n    return np.prod(x, 0)\\n",
        "max": "def f(x):\\n    return np.max(x)\\n",
        "mean": "def f(x):\\n    return np.mean(x)\\n",
        "sum_axis": "def f(x):\\n    return np.sum(x, axis=0)\\n",
        "method_sum": "def f(x):\\n    return x.sum(axis=1)\\n",
    }

    def outcomes():
        out = {}
        x = np.arange(1.0, 7.0).reshape(2, 3)
        for name, src in SOURCES.items():
            ns = {"np": np}
            exec(src, ns)
            try:
                out[name] = ["ok", np.asarray(numba.njit(ns["f"])(x)).tolist()]
            except Exception as exc:
                out[name] = ["error", type(exc).__name__]
        return out

    before = outcomes()
    import numbarules
    after = outcomes()
    print(json.dumps([before, after]))
''')


def test_plain_njit_compiles_the_same_before_and_after_import():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=600, check=True)
    before, after = json.loads(out.stdout.splitlines()[-1])
    assert before == after
    # the probe can tell: Numba 0.68 refuses the axis forms numbarules adds for its own code
    assert before["max_axis"] == ["error", "TypingError"]
    assert before["sum_axis"][0] == "ok"


def test_numbarules_code_has_the_axis_reductions(make_module):
    # the same spelling in a function numbarules compiles (nr.jit, a gradient) works
    axis_user = make_module("axis_user", (
        "import numpy as np\nfrom numpy import mean\n\n"
        "def spread(x):\n    return np.max(x, axis=0) - np.min(x, 0)\n\n"
        "def loss(x):\n    return np.sum(spread(x) ** 2) + mean(x, 1)[0]\n"))
    x = np.array([[1.0, 5.0, 2.0], [4.0, 3.0, 0.5]])
    np.testing.assert_allclose(nr.jit(axis_user.spread)(x), axis_user.spread(x))
    g = nr.grad(axis_user.loss)(x)
    d = 2 * axis_user.spread(x)          # d/dx of sum((max - min)^2) + mean of row 0
    want = np.zeros_like(x)
    want[np.argmax(x, 0), range(3)] += d
    want[np.argmin(x, 0), range(3)] -= d
    want[0] += 1 / 3
    np.testing.assert_allclose(g, want)
