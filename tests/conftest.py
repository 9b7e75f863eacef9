import importlib
import os

import numba.core.config as numba_config
import pytest
from hypothesis import settings

# Numba compiles are slow: keep example counts modest where a property compiles code.
settings.register_profile("numbarules", deadline=None, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "numbarules"))

# The in-process suite counts compiles; a kernel loaded from the user's disk cache would not
# count. tests/test_diskcache.py turns the cache on in the processes it starts.
os.environ["NUMBARULES_CACHE"] = "0"

# The in-process suite compiles its kernels at LLVM level 0 (NUMBA_OPT=0): LLVM's optimisation
# is half the compile time, and what these tests check (values, gradients, errors, what gets
# recompiled) does not depend on it. Set here in Numba's config, not in the environment, so the
# processes tests start (README and docs blocks, examples, the disk cache, the CLI) run at the
# user's default level, and tests that need optimised code take the `optimised` fixture
# (tests/test_optimised.py: the benchmark workloads' gradients at level 3 against hand-written
# adjoints). `NUMBA_OPT=3 pytest` runs everything optimised.
if "NUMBA_OPT" not in os.environ:
    numba_config.OPT = numba_config._OptLevel(0)


@pytest.fixture
def optimised():
    """Compile at LLVM level 3 (Numba's default) inside this test."""
    before = numba_config.OPT
    numba_config.OPT = numba_config._OptLevel(3)
    try:
        yield
    finally:
        numba_config.OPT = before


@pytest.fixture
def make_module(tmp_path, monkeypatch):
    """``make(name, source)``: ``source`` written as module ``name`` in a temporary directory and
    imported (numbarules reads functions' source from their files)."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(name, source):
        (tmp_path / f"{name}.py").write_text(source)
        return importlib.import_module(name)
    return make
