import os

from hypothesis import settings

# Numba compiles are slow: keep example counts modest where a property compiles code.
settings.register_profile("numbarules", deadline=None, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "numbarules"))
