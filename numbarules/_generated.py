"""The module generated kernels, entries and drivers say they belong to.

Numba records a function's module name with its compiled code and imports that module again
when it loads the code from a cache; code made by ``exec`` must therefore name a module that
exists in every process. This one is it. It holds nothing.
"""
