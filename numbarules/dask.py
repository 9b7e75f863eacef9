"""``nr.dask``: one gradient, many inputs, on a Dask cluster (API.md section 4c).

    import numbarules as nr
    from dask.distributed import Client

    client = Client()                                   # or a LocalCluster, or a real cluster
    sweep = nr.dask.map_grad(loss, argnums=0, over=0)   # like nr.grad(loss, argnums=0)
    grads = sweep(thetas, data).compute()               # one gradient per theta, in order
    total = sweep(thetas, data, reduce="sum").compute() # their sum, reduced on the workers
    grads = sweep.compute(thetas, data)                 # the same, as futures: less overhead

``over`` names the positional arguments that vary: each is a sequence (a list, or an array whose
rows are the items) and every call takes one item of each; the other arguments are shared,
sent to each worker once. The items are split into ``npartitions`` tasks (default: two per
worker thread of the current client), each a batch of calls. The result is a ``dask.bag.Bag``
(one result per item, in order) or, with ``reduce="sum"`` or ``"mean"``, a ``dask.bag.Item``:
Dask objects, computed where the current Dask scheduler runs them (a ``distributed.Client`` if
one is active).

What travels to the workers is the function, its methods and rules (``pickling.py``), never
compiled code: a worker compiles each kernel once, or loads it from the persistent cache when it
shares the client's cache directory (``NUMBARULES_CACHE_DIR``; by default the user's cache
directory, shared by every process of one user on one machine). ``warm`` compiles on the client
first, so workers on this machine (or sharing the directory) compile nothing;
``cache_info(client)`` counts what each worker compiled.

Dask is an optional dependency (``pip install 'numbarules[dask]'``); importing numbarules does
not import it.
"""

import functools
import numbers

import numpy as np

from . import api

__all__ = ["map_grad", "MapGrad", "add_tangents", "scale_tangent", "cache_info"]


def map_grad(f, argnums=0, *, over=0, value=False, boundscheck=False, fastmath=False):
    """``nr.grad(f, argnums)`` (``value=True``: ``nr.value_and_grad``) mapped over the items of the
    positional arguments ``over`` (an int or a tuple of ints) on a Dask cluster."""
    return MapGrad(f, argnums, over, value, boundscheck, fastmath)


class MapGrad:
    """A gradient to map over many inputs; call it with the arguments (see ``map_grad``)."""

    def __init__(self, f, argnums, over, value, boundscheck, fastmath=False):
        self.gradient = (api.value_and_grad if value else api.grad)(
            f, argnums, boundscheck=boundscheck, fastmath=fastmath)
        over = (over,) if isinstance(over, int) and not isinstance(over, bool) else over
        if not isinstance(over, tuple) or not over or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in over):
            raise TypeError(f"over must be a non-negative int or a tuple of them, not {over!r}")
        self.over = tuple(sorted(set(over)))
        self.value = value

    def __repr__(self):
        return f"<nr.dask.map_grad of {self.gradient!r}, over={self.over!r}>"

    def items(self, args):
        """The argument tuples of the single calls, in order."""
        if max(self.over) >= len(args):
            raise TypeError(f"{self.gradient.__qualname__}: over={self.over!r} names argument "
                            f"{max(self.over)}, but {len(args)} arguments were given")
        columns = []
        for i in self.over:
            a = args[i]
            if isinstance(a, (str, bytes)) or not hasattr(a, "__len__") or (
                    isinstance(a, np.ndarray) and a.ndim == 0):
                raise TypeError(f"{self.gradient.__qualname__}: argument {i} varies (over="
                                f"{self.over!r}), so it must be a sequence of values (a list, "
                                f"or an array whose rows are the values), not {type(a).__name__}")
            columns.append(list(a))
        lengths = {len(c) for c in columns}
        if len(lengths) != 1:
            raise ValueError(f"{self.gradient.__qualname__}: the varying arguments {self.over!r} "
                             f"have different lengths {sorted(lengths)}")
        return [self._call_args(args, row) for row in zip(*columns)]

    def _call_args(self, args, row):
        full = list(args)
        for i, v in zip(self.over, row):
            full[i] = v
        return tuple(full)

    def warm(self, *args):
        """Compile for one item of ``args`` here, on the client, so that the workers find the
        kernels in the persistent cache. Returns that item's result."""
        return self.gradient(*self.items(args)[0])

    def _rows(self, args, reduce):
        if reduce not in (None, "sum", "mean"):
            raise ValueError(f"reduce must be None, 'sum' or 'mean', not {reduce!r}")
        rows = [tuple(r[i] for i in self.over) for r in self.items(args)]
        if not rows:
            raise ValueError(f"{self.gradient.__qualname__}: nothing to map over (0 items)")
        return rows

    def compute(self, *args, reduce=None, npartitions=None):
        """The results now: ``self(*args, ...).compute()``, the same numbers, but on a
        ``distributed`` client as one future per batch (``client.submit``) instead of a bag's
        graph: about 20 ms of Dask's own time per sweep instead of 40-80 on a 2-core machine
        (docs/dask.md, "Throughput"). A list of results in order, or (``reduce``) their sum or
        mean, added in each batch on the workers and across batches here. Without a
        ``distributed`` client: the bag, computed by the current Dask scheduler."""
        try:
            from distributed import default_client
            client = default_client()
        except (ImportError, ValueError):
            return self(*args, reduce=reduce, npartitions=npartitions).compute()
        rows = self._rows(args, reduce)
        # one batch per worker thread by default: each task costs Dask several milliseconds
        # here (measured: 4 tasks on 2 workers 1.5-1.7x one process's throughput, 2 tasks
        # 1.65-1.85x); pass more where the items' costs differ a lot
        k = max(1, min(len(rows), npartitions or _default_partitions(client, 1)))
        shared = tuple(None if i in self.over else a for i, a in enumerate(args))
        bounds = [len(rows) * j // k for j in range(k + 1)]
        run = _run_partition if reduce is None else _sum_partition
        futures = [client.submit(run, rows[a:b], self.gradient, self.over, *shared, pure=False)
                   for a, b in zip(bounds, bounds[1:])]
        parts = client.gather(futures)
        if reduce is None:
            return [r for part in parts for r in part]
        total = functools.reduce(add_tangents, parts)
        return total if reduce == "sum" else scale_tangent(total, 1.0 / len(rows))

    def __call__(self, *args, reduce=None, npartitions=None):
        import dask
        import dask.bag as db
        rows = self._rows(args, reduce)
        n = len(rows)
        shared = tuple(None if i in self.over else _shared(a) for i, a in enumerate(args))
        bag = db.from_sequence(rows, npartitions=npartitions or min(n, _default_partitions()))
        # the gradient object as one piece of data: each worker unpickles it once, not per task
        grad = dask.delayed(self.gradient, pure=True, traverse=False)
        results = bag.map_partitions(_run_partition, grad, self.over, *shared)
        if reduce is None:
            return results
        total = results.fold(add_tangents)
        return total if reduce == "sum" else total.apply(functools.partial(scale_tangent, c=1.0 / n))


def _default_partitions(client=None, per_thread=2):
    """Two tasks (``per_thread``) per worker thread of the current distributed client (each
    task runs a batch of calls: Dask's cost per task is paid per batch), else 8."""
    try:
        if client is None:
            from distributed import default_client
            client = default_client()
        threads = sum(client.nthreads().values())
    except (ImportError, ValueError, AttributeError):
        return 8
    return max(per_thread, per_thread * threads)


def _shared(value):
    """An argument every call takes: arrays and other objects as one piece of Dask data (sent to
    a worker once), small scalars inline."""
    if value is None or isinstance(value, (numbers.Number, str, bytes, np.generic)):
        return value
    import dask
    return dask.delayed(value, pure=True, traverse=False)


def _run_partition(rows, gradient, over, *shared):
    out = []
    for row in rows:
        args = list(shared)
        for i, v in zip(over, row):
            args[i] = v
        out.append(gradient(*args))
    return out


def _sum_partition(rows, gradient, over, *shared):
    return functools.reduce(add_tangents, _run_partition(rows, gradient, over, *shared))


def add_tangents(a, b):
    """``a + b`` for gradients: floats, arrays, ``nr.Tangent`` values, tuples of them (item by
    item; ``value_and_grad`` results too), and None (no tangent) with None."""
    if a is None and b is None:
        return None
    if isinstance(a, tuple) and type(a) is type(b) and type(a) is tuple:
        if len(a) != len(b):
            raise ValueError(f"cannot add gradients of {len(a)} and {len(b)} parts")
        return tuple(add_tangents(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        raise TypeError("cannot add a gradient to None (an argument without a tangent)")
    return a + b


def scale_tangent(t, c):
    """``c * t`` for gradients (see ``add_tangents``)."""
    if t is None:
        return None
    if type(t) is tuple:
        return tuple(scale_tangent(x, c) for x in t)
    return t * c


def cache_info(client=None):
    """``nr.cache_info()`` of every worker of ``client`` (default: the current Dask client):
    {worker address: counts}. ``compiles`` counts kernels compiled there, ``disk_hits`` those
    loaded from the persistent cache."""
    if client is None:
        from distributed import get_client
        client = get_client()
    return client.run(_worker_cache_info)


def _worker_cache_info():
    from . import cache
    return cache.cache_info()
