import os

from hypothesis import settings

# Numba compiles are slow: keep example counts modest where a property compiles code.
settings.register_profile("numbarules", deadline=None, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "numbarules"))

# The in-process suite counts compiles; a kernel loaded from the user's disk cache would not
# count. tests/test_diskcache.py turns the cache on in the processes it starts.
os.environ["NUMBARULES_CACHE"] = "0"
