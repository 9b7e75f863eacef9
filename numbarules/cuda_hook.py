"""Device use that does not depend on import order.

Generic functions and gradient objects get their device (CUDA) Numba types from
``numbarules.cuda``, which registers them with numba-cuda's own ``typeof``. A user who imports
``numba.cuda`` and compiles a kernel calling ``nr.grad(f)`` never imports ``numbarules.cuda``
themselves, so it is imported here as soon as ``numba.cuda`` is: at once if it already is, else
right after the import of ``numba.cuda`` finishes (a finder on ``sys.meta_path`` that watches for
that one name and then removes itself). ``numbarules.cuda`` is not imported otherwise: numba-cuda
is optional and slow to import.

Nothing else Python or Numba does is changed: the finder answers only for ``numba.cuda`` and
defers to the other finders for the module itself.
"""

import importlib
import importlib.abc
import importlib.util
import sys

_WATCHED = "numba.cuda"


def numba_cuda_installed():
    """Whether NVIDIA's numba-cuda is installed. Without it, ``numba.cuda`` is Numba's own
    built-in target (still shipped by Numba 0.68), which numbarules.cuda does not support and
    must leave alone: a user of it who imports numbarules keeps a working ``numba.cuda``."""
    try:
        return importlib.util.find_spec("numba_cuda") is not None
    except (ImportError, ValueError):
        return False


def install():
    if not numba_cuda_installed():
        return
    if _WATCHED in sys.modules:
        _load()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def _load():
    importlib.import_module("numbarules.cuda")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _WATCHED:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)      # the real finders, this one gone
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _load()
        loader.exec_module = exec_module
        return spec
