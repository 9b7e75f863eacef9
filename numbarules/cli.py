"""The numbarules command line: demo, explain, profile, bench, cache and fuzz.

FUNCTION arguments are MODULE:FUNCTION (importable from the current directory) or
path/to/file.py:FUNCTION; TYPE arguments are float64, float64[:, :], float32[:], int64, bool or
a struct class named the same way (MODULE:Struct or path/to/file.py:Struct)."""

import argparse
import glob
import importlib
import os
import re
import subprocess
import sys

import numpy as np

from . import api, demo, diskcache, lattice
from .explain import explain as explain_call
from .errors import NumbarulesError

_SCALARS = {"float64": np.float64, "float32": np.float32, "int64": np.int64, "int32": np.int32,
            "bool": np.bool_, "float": np.float64, "int": np.int64}


def parse_type(text):
    """A value standing for a type written as ``float64``, ``float64[:, :]`` or ``module:Struct``.

    ``nr.explain`` works on values; the values made here are small placeholders of that type
    (arrays of 2 elements per axis, structs built from placeholders of their field types).
    """
    text = text.strip()
    m = re.fullmatch(r"(\w+)\s*(\[[\s:,]*\])?", text)
    if m and m.group(1) in _SCALARS:
        dtype = _SCALARS[m.group(1)]
        if m.group(2) is None:
            return dtype(1)
        ndim = m.group(2).count(":")
        return np.ones((2,) * ndim, dtype=dtype)
    if re.fullmatch(r"[^\s\[\]]+:\w+", text):
        cls = load(text, what="struct class")
        fields = getattr(cls, "_nr_fields", None)
        if fields is None:
            raise ValueError(f"{text} is not a @nr.struct class")
        return cls(*(_placeholder(t) for t in fields.values()))
    raise ValueError(f"cannot read the type {text!r}: write float64, float64[:, :], int64, "
                     f"float32[:], bool, or a struct class as MODULE:Struct or "
                     f"path/to/file.py:Struct")


def load(target, what="function"):
    """The object named by ``MODULE:NAME`` or ``path/to/file.py:NAME``.

    A file is imported as a module named after it, from its own directory (as ``python file.py``
    would find its neighbours), so that its functions and structs have an importable home: the
    disk cache and pickles name them by module.
    """
    module, sep, name = target.rpartition(":")
    if not sep or not module or not name.isidentifier():
        raise ValueError(f"write the {what} as MODULE:NAME or path/to/file.py:NAME, not {target!r}")
    if module.endswith(".py") or os.sep in module or "/" in module:
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise ValueError(f"no such file: {module}")
        folder, stem = os.path.split(path)
        stem = stem[:-3] if stem.endswith(".py") else stem
        if folder not in sys.path:
            sys.path.insert(0, folder)
        mod = importlib.import_module(stem)
        found = getattr(mod, "__file__", None)
        if found is None or not os.path.samefile(found, path):
            raise ValueError(f"{module} cannot be imported as module {stem!r}: that name is "
                             f"already {found or 'a built-in module'}; rename the file")
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        mod = importlib.import_module(module)
    try:
        return getattr(mod, name)
    except AttributeError:
        raise ValueError(f"{module} has no {what} named {name!r}") from None


def _arguments(f, types, command):
    """Placeholder values for ``types``, or a ValueError saying what the function takes."""
    args = tuple(parse_type(t) for t in types)
    try:
        return api._positional(f, args, command)
    except TypeError as exc:
        raise ValueError(f"{exc}: write one TYPE per argument, e.g. numbarules {command} "
                         f"MODULE:FUNCTION float64 float64[:]") from None


def _placeholder(t):
    if t is None or t in (lattice.Float64, lattice.AbstractFloat, lattice.Real, lattice.Number):
        return 1.0
    if t in (lattice.Int64, lattice.Integer, lattice.Signed):
        return 1
    if lattice.isarray(t):
        el = t.eltype.numpy_type if lattice.isconcrete(t.eltype) else np.float64
        return np.ones((2,) * (t.ndim if t.ndim is not None else 1), dtype=el)
    if lattice.isconcrete(t) and hasattr(t, "numpy_type"):
        return t.numpy_type(1)
    raise ValueError(f"no placeholder value for a field of type {t!r}")


def explain(target, types, out=print):
    f = load(target)
    out(str(explain_call(f, *_arguments(f, types, "explain"))))


def profile(target, types, argnums=None, out=print):
    """Compile ``nr.value_and_grad`` of MODULE:FUNCTION at these types (disk cache off) and print
    where the seconds went (``nr.compile_stats()``)."""
    import time
    from . import profile as prof
    f = load(target)
    args = _arguments(f, types, "profile")
    prof.compile_stats(reset=True)
    t0 = time.perf_counter()
    api.value_and_grad(f, 0 if argnums is None else argnums)(*args)
    out(f"first gradient of {target}: {time.perf_counter() - t0:.2f} s")
    out(str(prof.compile_stats()))


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def cache_command(action, out=print):
    if action == "info":
        info = diskcache.info()
        state = "on" if info["enabled"] else "off (NUMBARULES_CACHE=0)"
        out(f"directory: {info['directory']}")
        out(f"enabled:   {state}")
        out(f"entries:   {info['entries']}")
        out(f"size:      {_size(info['bytes'])}")
    else:
        removed = diskcache.clear()
        out(f"removed {removed} file{'s' * (removed != 1)} from {diskcache.directory()}")
    return 0


def perf_directory():
    """The benchmark suite: ``perf/`` beside the package (a source checkout or editable install)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(here, "perf")
    return path if os.path.isdir(path) else None


def bench(quick, names=(), out=print):
    """Run every ``perf/bench_*.py`` (or those named: ``ad`` or ``bench_ad``) in its own process;
    each prints its own table."""
    folder = perf_directory()
    if folder is None:
        out("numbarules bench: the benchmark suite (perf/) ships with the source tree, not the "
            "wheel; run it from a checkout: pip install -e '.[bench]' && numbarules bench")
        return 2
    scripts = sorted(glob.glob(os.path.join(folder, "bench_*.py")))
    if names:
        known = {os.path.basename(p)[len("bench_"):-len(".py")]: p for p in scripts}
        wanted = [n[len("bench_"):] if n.startswith("bench_") else n for n in names]
        wanted = [w[:-3] if w.endswith(".py") else w for w in wanted]
        unknown = [w for w in wanted if w not in known]
        if unknown:
            out(f"numbarules bench: no benchmark named {', '.join(unknown)}; "
                f"there are {', '.join(sorted(known))}")
            return 2
        scripts = [known[w] for w in wanted]
    failed = []
    for script in scripts:
        name = os.path.basename(script)
        out(f"\n=== {name}{' --quick' if quick else ''}")
        sys.stdout.flush()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(folder)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        rc = subprocess.call([sys.executable, script] + (["--quick"] if quick else []), env=env)
        if rc != 0:
            failed.append(f"{name} (exit {rc})")
    n = len(scripts)
    out("\n" + (f"failed: {', '.join(failed)}" if failed else
                f"ran {n} benchmark{'s' * (n != 1)}; peers that are not installed (and a missing "
                f"GPU) are skipped with a note"))
    return 1 if failed else 0


def fuzz(n, seed, features=None, keep=None, timeout=120.0, verbose=False, start=0, jobs=1,
         opt=None, out=print, disk_cache=False):
    """``numbarules fuzz``: generate and check random programs (numbarules/fuzz); print the
    summary and each failing program. Exit code 1 if any program is wrong, crashes the engine
    (internal, hangs included), is refused for a construct the README does not list as refused,
    or is invalid (a fuzzer bug)."""
    from . import fuzz as fuzzer
    if features:
        features = [f.strip() for part in features for f in part.split(",") if f.strip()]
        unknown = [f for f in features if f not in fuzzer.FEATURES]
        if unknown:
            out(f"numbarules fuzz: unknown features {', '.join(unknown)}; known:")
            for name, text in fuzzer.FEATURES.items():
                out(f"  {name:15s} {text}")
            return 2
    summary = fuzzer.run(n=n, seed=seed, features=features or None, timeout=timeout,
                         verbose=verbose, keep=keep, start=start, jobs=jobs, opt=opt, out=out,
                         disk_cache=disk_cache)
    out(summary.report())
    return 1 if summary.failures else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="numbarules", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="the method-rule story end to end, in seconds")
    ex = sub.add_parser("explain", help="the call tree of differentiating MODULE:FUNCTION at "
                                        "the given types")
    ex.add_argument("function", help="MODULE:FUNCTION or path/to/file.py:FUNCTION")
    ex.add_argument("types", nargs="*", metavar="TYPE",
                    help="one per argument: float64, float64[:, :], int64, MODULE:Struct")
    pr = sub.add_parser("profile", help="where the seconds of the first gradient of "
                                        "MODULE:FUNCTION at the given types go (disk cache off)")
    pr.add_argument("function", help="MODULE:FUNCTION or path/to/file.py:FUNCTION")
    pr.add_argument("types", nargs="*", metavar="TYPE",
                    help="one per argument: float64, float64[:, :], int64, MODULE:Struct")
    pr.add_argument("--argnums", type=int, nargs="+", help="arguments to differentiate "
                                                            "(default 0)")
    be = sub.add_parser("bench", help="the benchmark suite (perf/) against the installed peers")
    be.add_argument("--quick", action="store_true", help="smaller sizes, a few minutes in all")
    be.add_argument("names", nargs="*", metavar="NAME",
                    help="run only these (ad, arrays, compile, cuda, dispatch, invalidation, "
                         "ttfg); default all")
    ca = sub.add_parser("cache", help="the on-disk kernel cache")
    ca.add_argument("action", choices=("info", "clear"))
    fz = sub.add_parser("fuzz", help="differential fuzzing of the AD engine: random programs, "
                                     "grad / pullback / finite differences / the Python value")
    fz.add_argument("--n", type=int, default=100, help="number of programs (default 100)")
    fz.add_argument("--seed", type=int, default=0, help="the program stream (default 0)")
    fz.add_argument("--start", type=int, default=0, help="index of the first program")
    fz.add_argument("--features", nargs="+", metavar="FEATURE",
                    help="restrict programs to these feature groups (comma or space separated; "
                         "`--features list` lists them)")
    fz.add_argument("--keep", metavar="DIR", help="write every program, and a standalone "
                                                  "reproducer of each failure, into DIR")
    fz.add_argument("--timeout", type=float, default=120.0,
                    help="seconds per program, compiles included (default 120); past it: "
                         "internal: hang")
    fz.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    fz.add_argument("--opt", type=int, choices=(0, 1, 2, 3), default=None,
                    help="NUMBA_OPT for the workers (0 compiles fastest)")
    fz.add_argument("--disk-cache", action="store_true",
                    help="the disk cache on: each program that checks out is checked again in "
                         "another process, which loads the kernels the first compiled")
    fz.add_argument("--minimize", action="store_true",
                    help="shrink program --start while it fails the same way, print it")
    fz.add_argument("-v", "--verbose", action="store_true", help="a line per program")
    args = parser.parse_args(argv)
    if args.command == "fuzz":
        if args.features == ["list"]:
            from .fuzz import FEATURES
            for name, text in FEATURES.items():
                print(f"{name:15s} {text}")
            return 0
        if args.minimize:
            from .fuzz.reduce import minimize
            feats = [f for part in args.features or () for f in part.split(",") if f] or None
            _, res = minimize(args.seed, args.start, feats, timeout=args.timeout)
            return 0 if res.outcome == "ok" or (res.outcome == "refused" and res.expected) else 1
        return fuzz(args.n, args.seed, args.features, args.keep, args.timeout, args.verbose,
                    args.start, args.jobs, args.opt, disk_cache=args.disk_cache)
    if args.command == "cache":
        return cache_command(args.action)
    if args.command == "profile":
        saved = os.environ.get("NUMBARULES_CACHE")
        os.environ["NUMBARULES_CACHE"] = "0"          # the cold path is what is measured
        try:
            profile(args.function, args.types,
                    None if args.argnums is None else tuple(args.argnums))
        except (NumbarulesError, ValueError, TypeError, ImportError) as exc:
            print(f"numbarules profile: {exc}", file=sys.stderr)
            return 2
        finally:
            if saved is None:
                os.environ.pop("NUMBARULES_CACHE", None)
            else:
                os.environ["NUMBARULES_CACHE"] = saved
        return 0
    if args.command == "bench":
        return bench(args.quick, args.names)
    if args.command == "demo":
        demo.run()
        print()
        demo.rules_story()
    elif args.command == "explain":
        try:
            explain(args.function, args.types)
        except (NumbarulesError, ValueError, TypeError, ImportError) as exc:
            print(f"numbarules explain: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

