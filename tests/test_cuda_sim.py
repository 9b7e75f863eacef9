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
