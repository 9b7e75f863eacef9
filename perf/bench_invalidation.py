"""Invalidation cost: one new rule deep in a call graph recompiles its chain, not everything.

The graph: generic functions g0 ... g{n-1} in five chains (g_i calls g_{i-5}, and g_{i-10}
from the third level on: a DAG, still within its chain), a plain ``top`` summing the five chain
heads, and gradients of ``top`` and of each chain head. After all of them are compiled, one
rrule is added on g1, at the bottom of chain 1, and every gradient is called again: only
chain 1, ``top`` and the two gradients that reach g1 should compile again. That is measured
against dropping everything (``nr.clear_cache()``) and calling the same gradients, which is what
a system without per-decision backedges has to do when a rule changes (Enzyme, Mooncake).

Run: python perf/bench_invalidation.py [--quick]
"""

import argparse
import importlib.util
import os
import re
import shutil
import tempfile
import time

import numbarules as nr

CHAINS = 5
X = 0.37


def graph_source(n):
    """Source of the module: named functions, because the AD frontend reads each body's source
    (a real file, so inspect finds it)."""
    lines = ["import math", "import numbarules as nr", ""]
    for i in range(n):
        calls = [f"0.5 * g{i - CHAINS}(x)"] if i >= CHAINS else []
        if i >= 2 * CHAINS:
            calls.append(f"0.25 * g{i - 2 * CHAINS}(x)")
        lines += [
            "@nr.generic",
            f"def g{i}(x: nr.Real):",
            f"    s = {' + '.join(calls) if calls else '0.0'}",
            "    for k in range(3):",
            f"        s += {0.1 + 0.01 * i:.2f} * math.sin(x * (k + 1.0) + {0.05 * i:.2f})",
            "    return s",
            "",
        ]
    heads = [f"g{i}(x)" for i in range(n - CHAINS, n)]
    lines += ["def top(x):", f"    return {' + '.join(heads)}", ""]
    return "\n".join(lines)


def load_graph(n):
    path = os.path.join(tempfile.mkdtemp(prefix="nr_bench_inval_"), f"nr_graph_{n}.py")
    with open(path, "w") as fh:
        fh.write(graph_source(n))
    spec = importlib.util.spec_from_file_location(f"nr_graph_{n}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def add_deep_rule(mod):
    g1 = mod.g1

    # Scaled by 3 so the check below can tell the rule is in the recompiled code.
    @nr.rrule(g1, nr.Float64)
    def g1_rule(x):
        y = g1(x)

        def g1_rule_pullback(dy):
            return (3.0 * dy,)
        return y, g1_rule_pullback


def owner(label):
    """The graph node a compile label belongs to: g7's primal and kernels all count for g7."""
    m = re.match(r"(?:rrule for )?(g\d+)\b", label)
    if m:
        return m.group(1) + (" (rule)" if label.startswith("rrule") else "")
    m = re.match(r"(grad\(\S+?\))|(\w+) \((?:fwd|bwd|vjp)\)", label)
    if m:
        return m.group(1) or m.group(2)
    return label


def _graph_order(name):
    """g1 ... g46 bottom-up, then top, then the gradients."""
    m = re.match(r"g(\d+)\b", name)
    return (0, int(m.group(1)), name) if m else (1 if name == "top" else 2, 0, name)


def compiled_since(before):
    """(compiles, labels grouped by owner) since the ``before`` snapshot of cache_info()."""
    now = nr.cache_info()
    delta = {k: v - before["by_function"].get(k, 0) for k, v in now["by_function"].items()}
    owners = sorted({owner(k) for k, v in delta.items() if v > 0}, key=_graph_order)
    return now["compiles"] - before["compiles"], owners


def timed(label, calls, out_rows):
    before = nr.cache_info()
    t = time.perf_counter()
    results = [g(X) for g in calls]
    seconds = time.perf_counter() - t
    n, owners = compiled_since(before)
    out_rows.append({"scenario": label, "recompiles": n, "seconds": seconds, "owners": owners})
    return results


def run(quick=False, out=print):
    n = 15 if quick else 50
    mod = load_graph(n)
    try:
        return _measure(mod, n, out)
    finally:
        shutil.rmtree(os.path.dirname(mod.__file__), ignore_errors=True)


def _measure(mod, n, out):
    heads = [getattr(mod, f"g{i}") for i in range(n - CHAINS, n)]
    grads = [nr.grad(mod.top)] + [nr.grad(h) for h in heads]
    names = ["grad(top)"] + [f"grad(g{i})" for i in range(n - CHAINS, n)]
    rows = []
    before_rule = timed("first compile (cold)", grads, rows)
    timed("call again, nothing changed", grads, rows)

    t = time.perf_counter()
    add_deep_rule(mod)
    invalidate_s = time.perf_counter() - t
    after_rule = timed("rrule on g1: recompile what it affects", grads, rows)
    rows[-1]["invalidate_seconds"] = invalidate_s
    affected = [nm for nm, a, b in zip(names, before_rule, after_rule) if a != b]

    nr.clear_cache()
    after_clear = timed("clear_cache: recompile everything", grads, rows)
    # Same definitions, same generated code: a targeted rebuild that kept stale code would differ.
    if after_clear != after_rule:
        raise AssertionError(f"targeted and full recompilation disagree: "
                             f"{after_rule} vs {after_clear}")

    out(f"{n} generic functions in {CHAINS} chains, {len(grads)} gradients; rrule added on g1")
    out(f"{'scenario':42s} {'recompiles':>10s} {'seconds':>9s}")
    for r in rows:
        out(f"{r['scenario']:42s} {r['recompiles']:10d} {r['seconds']:9.3f}")
    targeted, full = rows[2], rows[3]
    out(f"rule registration (finding and dropping the affected code): "
        f"{targeted['invalidate_seconds'] * 1e3:.1f} ms")
    out(f"recompiled after the rule: {', '.join(targeted['owners'])}")
    out(f"gradients whose value changed: {', '.join(affected)}")
    out(f"full / targeted: {full['recompiles'] / max(targeted['recompiles'], 1):.1f}x compiles, "
        f"{full['seconds'] / max(targeted['seconds'], 1e-9):.1f}x seconds")
    chain = [f"g{i}" for i in range(1, n, CHAINS)]
    expected = set(chain) | {"g1 (rule)", "top", "grad(top)", f"grad({chain[-1]})"}
    stray = [o for o in targeted["owners"] if o not in expected]
    out(f"target: only chain 1 ({chain[0]} ... {chain[-1]}), top and the gradients reaching g1 "
        f"recompile: " + ("met" if not stray else f"NOT met, also: {', '.join(stray)}"))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    run(parser.parse_args().quick)
