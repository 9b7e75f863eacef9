"""``nr.code`` of three examples against stored text (tests/golden/): the generated kernels read
like hand-written Numba (no dead declarations, no ``range(0, n, 1)`` or ``0 + j * 1``), and their
names do not change from one process to the next.

A change to the code generator that changes these kernels on purpose updates the files:
``NUMBARULES_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_code.py``; the diff is then part
of the change, for a reviewer to read.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")

# Run in a fresh process: kernel names are unique per process (``rosenbrock``, then
# ``rosenbrock_2``), so what other tests compiled first would change them.
CHILD = r'''
import sys
import numpy as np
import numbarules as nr
sys.path.insert(0, sys.argv[1])
from perf._workloads_ad import rosenbrock, pendulum
from perf.bench_arrays import lse_rows
x = np.linspace(0.1, 1.0, 5)
X = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
p, s0 = np.array([9.8, 0.1]), np.array([0.3, 0.0])
out = {
    "rosenbrock": nr.code(rosenbrock, x, kind="vjp"),
    "lse_rows": nr.code(lse_rows, X, kind="forward") + "\n" + nr.code(lse_rows, X, kind="pullback"),
    "pendulum": nr.code(pendulum, p, s0, 0.01, 10, kind="forward") + "\n"
                + nr.code(pendulum, p, s0, 0.01, 10, kind="pullback"),
}
for name, text in out.items():
    print("=== " + name)
    print(text.replace(sys.argv[1], "ROOT"))
'''


def _generated():
    env = dict(os.environ, NUMBARULES_CACHE="0")
    text = subprocess.run([sys.executable, "-c", CHILD, ROOT], env=env, check=True,
                          capture_output=True, text=True, cwd=ROOT).stdout
    parts = text.split("=== ")[1:]
    return {p.split("\n", 1)[0]: p.split("\n", 1)[1] for p in parts}


def test_generated_kernels_match_the_stored_text():
    found = _generated()
    assert set(found) == {"rosenbrock", "lse_rows", "pendulum"}
    update = os.environ.get("NUMBARULES_UPDATE_GOLDEN") == "1"
    for name, text in found.items():
        path = os.path.join(GOLDEN, f"{name}.txt")
        if update:
            with open(path, "w") as fh:
                fh.write(text)
        with open(path) as fh:
            want = fh.read()
        assert text == want, (f"nr.code of {name} changed; if on purpose, rerun with "
                              f"NUMBARULES_UPDATE_GOLDEN=1 and commit tests/golden/{name}.txt")
        assert "range(0, " not in text and "0 + _j" not in text and "* 1\n" not in text
