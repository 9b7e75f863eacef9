import importlib
import os

import pytest
from hypothesis import settings

# Numba compiles are slow: keep example counts modest where a property compiles code.
settings.register_profile("numbarules", deadline=None, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "numbarules"))

# The in-process suite counts compiles; a kernel loaded from the user's disk cache would not
# count. tests/test_diskcache.py turns the cache on in the processes it starts.
os.environ["NUMBARULES_CACHE"] = "0"


@pytest.fixture
def make_module(tmp_path, monkeypatch):
    """``make(name, source)``: ``source`` written as module ``name`` in a temporary directory and
    imported (numbarules reads functions' source from their files)."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(name, source):
        (tmp_path / f"{name}.py").write_text(source)
        return importlib.import_module(name)
    return make
