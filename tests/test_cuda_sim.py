"""Runs tests/cuda_sim_cases.py under the CUDA simulator, in its own process.

NUMBA_ENABLE_CUDASIM must be set before Numba is imported, so the simulator tests cannot share
this process; this test fails when any of them fails, and shows their report.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")      # a skip only where numba-cuda is not installed

HERE = Path(__file__).resolve().parent


def test_cuda_semantics_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), str(HERE)] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(HERE / "cuda_sim_cases.py")],
        cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=900)
    report = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, report
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, report


def test_importing_numbarules_leaves_numba_cuda_alone_until_nr_cuda_is_used():
    code = ("import sys, numbarules as nr\n"
            "assert 'numba.cuda' not in sys.modules\n"
            "assert callable(nr.cuda.map_grad) and 'numba.cuda' in sys.modules\n")
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


_WITHOUT_NUMBA_CUDA = """
import importlib.abc, sys
# as on a machine without numba-cuda: its redirection of numba.cuda gone, its package absent
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "NumbaCudaFinder"]
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "numba_cuda" or name.startswith("numba_cuda."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
"""


@pytest.mark.parametrize("order", ["numba.cuda first", "numbarules first"])
def test_without_numba_cuda_numbas_own_cuda_target_is_left_alone(order):
    # Numba 0.68 still ships a built-in numba.cuda: importing numbarules must not break it, in
    # either order, and nr.cuda says what to install (found 2026-12-04: a ModuleNotFoundError
    # from numbarules.cuda's imports, raised inside the user's `from numba import cuda`)
    imports = (["from numba import cuda", "import numbarules as nr"] if order == "numba.cuda first"
               else ["import numbarules as nr", "from numba import cuda"])
    code = _WITHOUT_NUMBA_CUDA + "\n".join(imports) + """
assert cuda.implementation == "Built-in", cuda.implementation
import math
assert abs(nr.grad(math.sin)(0.5) - math.cos(0.5)) < 1e-12     # a CPU gradient works
try:
    nr.cuda
except ImportError as exc:
    assert "numba-cuda" in str(exc) and "numbarules[cuda]" in str(exc), exc
else:
    raise AssertionError("nr.cuda without numba-cuda")
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(HERE.parent)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]
