"""The persistent kernel cache, across real processes: loads instead of compiling, and never loads
stale code (an edited method, a rule or a method added in the new process, a corrupt file)."""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from numbarules import cli, fingerprints

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODULE = '''
import numpy as np
import numbarules as nr

SCALE = {scale}

@nr.generic
def inner(x: nr.AbstractVector):
    s = 0.0
    for i in range(x.shape[0]):
        s += {inner_body}
    return s

@nr.generic
def energy(x: nr.Vector[nr.Float64]):
    s = inner(x)
    for i in range(x.shape[0] - 1):
        s += SCALE * (x[i + 1] - x[i] ** 2) ** 2
    return s

@nr.jit
def twice(x):
    return 2.0 * energy(x)
'''

CHILD = '''
import json, sys, warnings
import numpy as np
warnings.simplefilter("always")
import numbarules as nr
import dcmod
{before}
x = np.linspace(0.1, 1.0, 7)
y, pb = nr.pullback(dcmod.energy, x)
out = {{"grad": nr.grad(dcmod.energy)(x).tolist(), "value": dcmod.energy(x),
        "twice": dcmod.twice(x), "pullback": pb(1.0)[0].tolist()}}
{after}
out.update(nr.cache_info())
out.pop("by_function")
print(json.dumps(out))
'''

RULE = '''
@nr.rrule(dcmod.inner, nr.Vector[nr.Float64])
def _inner_rule(x):
    def pb(dy):
        return (np.full(x.shape[0], 1000.0 * dy),)
    return dcmod.inner(x), pb
'''

NEW_METHOD = '''
@dcmod.inner.method
def inner(x: nr.Vector[nr.Float64]):
    s = 0.0
    for i in range(x.shape[0]):
        s += 3.0 * x[i]
    return s
'''


def expected(x, scale=100.0, inner=lambda x: x * x, dinner=lambda x: 2 * x):
    value = inner(x).sum() + scale * ((x[1:] - x[:-1] ** 2) ** 2).sum()
    g = dinner(x).astype(float)
    r = x[1:] - x[:-1] ** 2
    g[1:] += 2 * scale * r
    g[:-1] += -4 * scale * r * x[:-1]
    return value, g


@pytest.fixture
def project(tmp_path):
    def write(scale=100.0, inner_body="x[i] * x[i]"):
        (tmp_path / "dcmod.py").write_text(MODULE.format(scale=scale, inner_body=inner_body))
    write()
    cache_dir = tmp_path / "cache"

    def run(before="", after="", env=None, check=True):
        script = tmp_path / "child.py"
        script.write_text(CHILD.format(before=textwrap.dedent(before), after=textwrap.dedent(after)))
        environ = dict(os.environ, NUMBARULES_CACHE_DIR=str(cache_dir), NUMBARULES_CACHE="1",
                       PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)]))
        environ.update(env or {})
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              env=environ, cwd=tmp_path)
        if check:
            assert proc.returncode == 0, proc.stderr
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            result["stderr"] = proc.stderr
            return result
        return proc

    run.write = write
    run.cache_dir = cache_dir
    return run


X = np.linspace(0.1, 1.0, 7)


def test_second_process_compiles_nothing(project):
    first = project()
    assert "numbarules: compiling" not in first["stderr"]     # not a terminal: silent
    assert first["compiles"] > 0 and first["disk_hits"] == 0 and first["disk_writes"] >= 3
    value, g = expected(X)
    assert np.allclose(first["grad"], g, rtol=1e-12) and np.isclose(first["value"], value)
    second = project()
    assert second["compiles"] == 0
    # pullback's forward and reverse kernels, the grad entry, the generic function's entry,
    # the nr.jit function
    assert second["disk_hits"] >= 5
    for k in ("grad", "value", "twice", "pullback"):
        assert np.allclose(second[k], first[k], rtol=1e-15)


def test_edited_method_gives_the_new_answer(project):
    project()
    project.write(inner_body="x[i] * x[i] * x[i]")
    second = project()
    value, g = expected(X, inner=lambda x: x ** 3, dinner=lambda x: 3 * x ** 2)
    assert second["compiles"] > 0
    assert np.allclose(second["grad"], g, rtol=1e-12) and np.isclose(second["value"], value)
    assert np.isclose(second["twice"], 2 * value)


def test_edited_global_constant_gives_the_new_answer(project):
    project()
    project.write(scale=7.0)
    second = project()
    value, g = expected(X, scale=7.0)
    assert np.allclose(second["grad"], g, rtol=1e-12) and np.isclose(second["value"], value)


def test_rule_added_in_the_second_process_is_used(project):
    project()
    second = project(before=RULE)
    _, g = expected(X, dinner=lambda x: np.full_like(x, 1000.0))
    assert np.allclose(second["grad"], g, rtol=1e-12)
    assert np.allclose(second["pullback"], g, rtol=1e-12)
    # The primal paths do not use rules: they may load; the gradient had to be rebuilt.
    assert second["compiles"] >= 1


def test_method_added_in_the_second_process_is_used(project):
    project()
    second = project(before=NEW_METHOD)
    value, g = expected(X, inner=lambda x: 3 * x, dinner=lambda x: np.full_like(x, 3.0))
    assert np.allclose(second["grad"], g, rtol=1e-12) and np.isclose(second["value"], value)
    assert np.isclose(second["twice"], 2 * value)


def test_method_added_after_a_load_invalidates_the_loaded_code(project):
    project()
    after = NEW_METHOD + '''
out["grad2"] = nr.grad(dcmod.energy)(x).tolist()
out["value2"] = dcmod.energy(x)
out["twice2"] = dcmod.twice(x)
'''
    second = project(after=after)
    assert second["disk_hits"] >= 5 and second["invalidations"] >= 3
    value, g = expected(X, inner=lambda x: 3 * x, dinner=lambda x: np.full_like(x, 3.0))
    assert np.allclose(second["grad2"], g, rtol=1e-12) and np.isclose(second["value2"], value)
    assert np.isclose(second["twice2"], 2 * value)


def test_corrupt_files_are_discarded_and_recompiled(project):
    project()
    files = sorted(project.cache_dir.rglob("*.nrk"))
    assert files
    files[0].write_bytes(files[0].read_bytes()[:100])          # truncated
    for f in files[1:]:
        blob = bytearray(f.read_bytes())
        blob[len(blob) // 2] ^= 0xFF                            # one flipped byte
        f.write_bytes(bytes(blob))
    second = project()
    assert "discarding the corrupt cache file" in second["stderr"]
    assert second["compiles"] > 0 and second["disk_hits"] == 0
    value, g = expected(X)
    assert np.allclose(second["grad"], g, rtol=1e-12) and np.isclose(second["value"], value)
    third = project()
    assert third["compiles"] == 0 and third["disk_hits"] >= 5


def test_concurrent_writers_leave_whole_files(project):
    # Start two compiling processes at once on an empty cache.
    script = project.cache_dir.parent / "child.py"
    script.write_text(CHILD.format(before="", after=""))
    environ = dict(os.environ, NUMBARULES_CACHE_DIR=str(project.cache_dir), NUMBARULES_CACHE="1",
                   PYTHONPATH=os.pathsep.join([ROOT, str(script.parent)]))
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=environ, cwd=script.parent)
             for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert not list(project.cache_dir.rglob("*.tmp"))
    third = project()
    assert third["compiles"] == 0 and "discarding" not in third["stderr"]


def test_disabled_cache_writes_nothing_and_progress_can_be_forced(project):
    first = project(env={"NUMBARULES_CACHE": "0", "NUMBARULES_PROGRESS": "1"})
    assert first["disk_writes"] == 0
    # A line per kernel: the time since the compile started, what, and a readable signature.
    assert re.search(r"numbarules: \[ *\d+\.\d s\] compiling grad\(energy\) "
                     r"\(float64\[::1\]\)", first["stderr"]), first["stderr"]
    assert not project.cache_dir.exists() or not list(project.cache_dir.rglob("*.nrk"))


def test_cache_command_line(project, monkeypatch):
    project()
    monkeypatch.setenv("NUMBARULES_CACHE_DIR", str(project.cache_dir))
    lines = []
    assert cli.cache_command("info", lines.append) == 0
    text = "\n".join(lines)
    assert str(project.cache_dir) in text and "entries:   " in text
    entries = int(text.split("entries:")[1].split()[0])
    assert entries == len(list(project.cache_dir.rglob("*.nrk"))) >= 3
    lines.clear()
    assert cli.cache_command("clear", lines.append) == 0
    assert f"removed {entries} files" in lines[0]
    assert not list(project.cache_dir.rglob("*.nrk"))


def test_fingerprint_sees_code_constants_and_callees_not_line_numbers():
    ns = {}
    exec("K = 2.0\ndef helper(x):\n    return K * x\ndef f(x):\n    return helper(x) + 1\n", ns)
    base = fingerprints.fingerprint(ns["f"])
    moved = {}
    exec("\n\n\nK = 2.0\ndef helper(x):\n    return K * x\n\n\ndef f(x):\n    return helper(x) + 1\n",
         moved)
    assert fingerprints.fingerprint(moved["f"]) == base
    ns["K"] = 3.0
    assert fingerprints.fingerprint(ns["f"]) != base          # a global read by a callee
    ns["K"] = 2.0
    exec("def helper(x):\n    return K * x * 1.0\n", ns)
    assert fingerprints.fingerprint(ns["f"]) != base          # the callee's code


def test_bench_command_runs_every_script_and_reports_failures(tmp_path, monkeypatch):
    perf = tmp_path / "perf"
    perf.mkdir()
    (perf / "bench_ok.py").write_text("import sys\nprint('ok', sys.argv[1:])\n")
    (perf / "bench_bad.py").write_text("raise SystemExit(3)\n")
    monkeypatch.setattr(cli, "perf_directory", lambda: str(perf))
    lines = []
    assert cli.bench(True, out=lines.append) == 1
    assert "\n=== bench_ok.py --quick" in lines and "failed: bench_bad.py (exit 3)" in lines[-1]
    lines.clear()
    assert cli.bench(False, ["ok"], out=lines.append) == 0          # by name
    assert lines[0] == "\n=== bench_ok.py" and "ran 1 benchmark;" in lines[-1]
    monkeypatch.undo()
    assert cli.perf_directory() == os.path.join(ROOT, "perf")


def test_demo_twice_on_one_cache(tmp_path):
    # The demo defines its struct and generic functions inside a function: a struct class that
    # pickles by value must never be stored (the loaded signature would name another class).
    environ = dict(os.environ, NUMBARULES_CACHE="1", NUMBARULES_CACHE_DIR=str(tmp_path / "c"),
                   PYTHONPATH=ROOT)
    outs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "numbarules.cli", "demo"], env=environ,
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
    for line in ("mean_entry(A, 4) = 1.875   (picked up the new method)",
                 "recompiled 2 specializations",
                 "grad(my_sum)(D) = Tangent[Diagonal](diag=array([1., 1., 1.]))",
                 "grad(my_sum)(A32) = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]"):
        assert line in outs[0] and line in outs[1]


# --- values compiled code freezes: module attributes, chains, cells, defaults, helpers, rules ------

CONFIG = '''
import numba
import numpy as np
import cfgsub as sub

K = {K}
R = {R}
P = {P}
W = np.array([{W}, 1.0])


class Params:
    K = {PK}


class Box:
    def __init__(self, k):
        self.k = k

    def __repr__(self):          # the same in every process, whatever k holds
        return "Box()"


BOX = Box({BK})


@numba.njit
def scale(x):
    return K * x
'''

CONFIG_SUB = '''
K = {SK}


class Deep:
    K = {DK}
'''

USER = '''
import numbarules as nr
import cfgmod


def plain(x):                   # the AD frontend makes cfgmod.K a constant of its kernels
    return cfgmod.K * x * x


def array_global(x):            # a module attribute that is an array
    return cfgmod.W[0] * x * x


@nr.generic
def gen(x: nr.Float64):         # a method: its primal and its gradient
    return cfgmod.K * x * x


@nr.jit
def jitted(x):                  # the module held whole in a local; a module's module
    m = cfgmod
    return m.K * x + cfgmod.sub.K


def deep(x):                    # module.module.class.attribute, a class's, an object's attribute
    return cfgmod.sub.Deep.K * x * x + cfgmod.Params.K * x + cfgmod.BOX.k


def make(m):
    def closure(x):
        return m.K * x * x
    return closure


closed = make(cfgmod)           # a closure cell holding the module
closed_jit = nr.jit(closed)


@nr.jit
def defaulted(x, m=cfgmod):     # a default value
    return m.K * x


def h3(x):
    return cfgmod.scale(x)      # an @njit function of cfgmod, reading cfgmod's global K


def h2(x):
    return h3(x) * x


def outer(x):                   # the value is read by a helper of a helper of a helper
    return h2(x) + 1.0


outer_jit = nr.jit(outer)


@nr.generic
def ruled(x: nr.Float64):
    return x * x


@nr.rrule(ruled)
def _ruled_rule(x: nr.Float64):
    y = cfgmod.R * x * x
    def ruled_pullback(dy):
        return (cfgmod.P * dy * x,)
    return y, ruled_pullback


def sfun(x):
    return x * x


@nr.scalar_rule(sfun)
def _sfun_partials(x):
    return (cfgmod.P * x,)


def uses_sfun(x):
    return sfun(x) + 1.0
'''

USER_CHILD = '''
import json, os
import numbarules as nr
import usermod as u
x = 3.0
vg = lambda f: list(nr.value_and_grad(f)(x))
cases = [
    ("plain", lambda: vg(u.plain)),
    ("array", lambda: vg(u.array_global)),
    ("method", lambda: [u.gen(x), nr.grad(u.gen)(x)]),
    ("jit", lambda: u.jitted(x)),
    ("chain", lambda: vg(u.deep)),
    ("closure", lambda: vg(u.closed) + [u.closed_jit(x)]),
    ("default", lambda: u.defaulted(x)),
    ("helpers", lambda: vg(u.outer) + [u.outer_jit(x)]),
    ("rrule", lambda: vg(u.ruled) + [nr.pullback(u.ruled, x)[1](-2.0)[0]]),
    ("scalar_rule", lambda: vg(u.uses_sfun)),
]
if os.environ.get("ORDER") == "reversed":    # generated kernels get other names
    cases.reverse()
out = {name: run() for name, run in cases}
out.update(nr.cache_info())
print(json.dumps(out))
'''

FIRST = dict(K=2.0, R=3.0, P=5.0, W=7.0, PK=13.0, BK=17.0, SK=11.0, DK=19.0)
SECOND = dict(K=2.5, R=4.0, P=6.0, W=8.0, PK=14.0, BK=18.0, SK=12.0, DK=20.0)
CASES = ("plain", "array", "method", "jit", "chain", "closure", "default", "helpers", "rrule",
         "scalar_rule")


def frozen_expected(c, x=3.0):
    return {
        "plain": [c["K"] * x * x, 2 * c["K"] * x],
        "array": [c["W"] * x * x, 2 * c["W"] * x],
        "method": [c["K"] * x * x, 2 * c["K"] * x],
        "jit": c["K"] * x + c["SK"],
        "chain": [c["DK"] * x * x + c["PK"] * x + c["BK"], 2 * c["DK"] * x + c["PK"]],
        "closure": [c["K"] * x * x, 2 * c["K"] * x, c["K"] * x * x],
        "default": c["K"] * x,
        "helpers": [c["K"] * x * x + 1, 2 * c["K"] * x, c["K"] * x * x + 1],
        "rrule": [c["R"] * x * x, c["P"] * x, -2.0 * c["P"] * x],
        "scalar_rule": [x * x + 1, c["P"] * x],
    }


@pytest.fixture(scope="module")
def edited_config(tmp_path_factory):
    """Three processes on one cache: the first compiles with FIRST's values; the second runs after
    the configuration modules were edited to SECOND's; the third runs again, unchanged, its
    computations in the reverse order."""
    tmp = tmp_path_factory.mktemp("frozen")

    def write(values):
        (tmp / "cfgmod.py").write_text(CONFIG.format(**values))
        (tmp / "cfgsub.py").write_text(CONFIG_SUB.format(**values))

    (tmp / "usermod.py").write_text(USER)
    (tmp / "child.py").write_text(USER_CHILD)

    def run(**env):
        environ = dict(os.environ, NUMBARULES_CACHE_DIR=str(tmp / "cache"), NUMBARULES_CACHE="1",
                       PYTHONDONTWRITEBYTECODE="1",     # no .pyc of an edit made in the same second
                       PYTHONPATH=os.pathsep.join([ROOT, str(tmp)]), **env)
        proc = subprocess.run([sys.executable, str(tmp / "child.py")], capture_output=True,
                              text=True, env=environ, cwd=tmp)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    write(FIRST)
    first = run()
    write(SECOND)
    second = run()
    third = run(ORDER="reversed")
    return first, second, third


@pytest.mark.parametrize("case", CASES)
def test_edited_module_attribute_gives_the_new_answer(edited_config, case):
    first, second, _ = edited_config
    assert np.allclose(first[case], frozen_expected(FIRST)[case], rtol=1e-12)
    assert np.allclose(second[case], frozen_expected(SECOND)[case], rtol=1e-12), \
        f"{case}: {second[case]} is the answer compiled for the old values"


def test_unchanged_values_still_load_in_any_order(edited_config):
    first, second, third = edited_config
    assert first["disk_writes"] > 20
    for case in CASES:
        assert np.allclose(third[case], frozen_expected(SECOND)[case], rtol=1e-12)
    # Only what a closure's gradient records about the closure is not stored (another process
    # cannot name it); everything else loads, though the kernels were generated in another order.
    assert third["disk_hits"] >= len(CASES)
    assert all("<locals>" in label for label in third["by_function"]), third["by_function"]


def test_fingerprint_follows_attribute_chains_and_refuses_opaque_values():
    import types

    cfg = types.ModuleType("nr_fp_cfg")
    cfg.K, cfg.sub, cfg.W = 2.0, types.ModuleType("nr_fp_sub"), np.zeros(3)
    cfg.sub.K = 1.0

    class Params:
        K = 1.0

    class Box:
        def __init__(self, k):
            self.k = k

        def __repr__(self):
            return "Box()"

    cfg.Params, cfg.box = Params, Box(1.0)
    ns = {"cfg": cfg, "__name__": "nr_fp_user"}
    exec(textwrap.dedent('''
        def attr(x):
            return cfg.K * x
        def alias(x):
            m = cfg
            return m.K * x
        def chain(x):
            return cfg.sub.K * x + cfg.Params.K
        def obj(x):
            return cfg.box.k * x
        def arr(x):
            return cfg.W.sum() * x
        def whole(x):
            return cfg.box
        def make(m):
            def closure(x):
                return m.K * x
            return closure
        closure = make(cfg)
        def default(x, m=cfg):
            return m.K * x
    '''), ns)
    names = ("attr", "alias", "chain", "obj", "arr", "closure", "default")
    base = {n: fingerprints.fingerprint(ns[n]) for n in names}
    assert None not in base.values()
    assert fingerprints.fingerprint(ns["whole"]) is None     # an object compiled code holds whole
    cfg.K = 3.0
    changed = {n for n in names if fingerprints.fingerprint(ns[n]) != base[n]}
    assert changed == {"attr", "alias", "closure", "default"}
    for edit, who in ((lambda: setattr(cfg.sub, "K", 2.0), "chain"),
                      (lambda: setattr(Params, "K", 2.0), "chain"),
                      (lambda: setattr(cfg.box, "k", 2.0), "obj"),
                      (lambda: cfg.W.__setitem__(0, 1.0), "arr")):
        before = fingerprints.fingerprint(ns[who])
        edit()
        assert fingerprints.fingerprint(ns[who]) != before, who


def test_generated_code_is_fingerprinted_by_values_not_by_counter_names():
    def kernel(callee_name, constant, value):
        ns = {"__name__": "numbarules._generated", callee_name: value}
        exec(f"def fwd_f_{constant}(x):\n    return {callee_name}(x) * 2.0\n", ns)
        return ns[f"fwd_f_{constant}"]

    def helper(x):
        return x + 1.0

    def other(x):
        return x + 2.0

    a = fingerprints.fingerprint(kernel("fwd_g_1", 1, helper))
    assert a == fingerprints.fingerprint(kernel("fwd_g_12", 7, helper))
    assert a != fingerprints.fingerprint(kernel("fwd_g_1", 1, other))


UNNAMED = '''
import importlib.util, json, sys, warnings
warnings.simplefilter("error", RuntimeWarning)
import numbarules as nr
spec = importlib.util.spec_from_file_location("not_importable", sys.argv[1])
mod = importlib.util.module_from_spec(spec)    # never put in sys.modules
spec.loader.exec_module(mod)
print(json.dumps({"grad": nr.grad(mod.top)(0.3), "value": mod.g(0.3),
                  "disk_hits": nr.cache_info()["disk_hits"]}))
'''

UNNAMED_MODULE = '''
import math
import numbarules as nr

@nr.generic
def g(x: nr.Real):
    s = 0.0
    for k in range(3):
        s += 0.1 * math.sin(x * (k + 1.0))
    return s

def top(x):
    return 2.0 * g(x)
'''


def test_code_of_a_module_without_a_name_is_never_stored_where_it_cannot_load(tmp_path):
    # Numba gives code of a module loaded from a file but absent from sys.modules the module
    # "<dynamic>", whose environment no other process can rebuild: such code used to be stored
    # and then discarded as corrupt (a warning) by every later process.
    (tmp_path / "unnamed.py").write_text(UNNAMED_MODULE)
    (tmp_path / "child.py").write_text(UNNAMED)
    environ = dict(os.environ, NUMBARULES_CACHE_DIR=str(tmp_path / "cache"), NUMBARULES_CACHE="1",
                   PYTHONPATH=ROOT)
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(tmp_path / "child.py"),
                               str(tmp_path / "unnamed.py")],
                              capture_output=True, text=True, env=environ, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "discarding" not in proc.stderr
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    expected = 2.0 * sum(0.1 * (k + 1.0) * np.cos(0.3 * (k + 1.0)) for k in range(3))
    assert runs[0]["grad"] == pytest.approx(expected, rel=1e-12)
    assert runs[1]["grad"] == runs[0]["grad"] and runs[1]["value"] == runs[0]["value"]


def _two_processes(tmp_path, source):
    """The JSON last printed by ``source`` run in two processes on one empty disk cache."""
    (tmp_path / "child.py").write_text(source)
    environ = dict(os.environ, NUMBARULES_CACHE_DIR=str(tmp_path / "cache"), NUMBARULES_CACHE="1",
                   PYTHONPATH=ROOT)
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(tmp_path / "child.py")],
                              capture_output=True, text=True, env=environ, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return runs


RECURSIVE_IN_A_LOOP = '''
import json, math
import numpy as np
import numbarules as nr

def rec(a, n):
    if n <= 0:
        return a
    return math.sin(rec(a, n - 1)) + 0.3 * a

def f(x, v):
    s = 0.0
    for i in range(2):
        s = 0.5 * s + v[i]
        if v[-1] >= v[i + 1]:
            return rec(x, 2) + s       # a recursive callee linked into the loop's kernel
    return s + x

g = nr.grad(f, argnums=(0, 1))(0.7, np.array([0.1, 0.5, 0.3]))
print(json.dumps({"grad": [g[0]] + g[1].tolist(), "disk_hits": nr.cache_info()["disk_hits"]}))
'''


def test_code_that_calls_a_recursive_function_through_numbas_cells_is_not_stored(tmp_path):
    # A recursive helper called in a loop is linked into the kernel, and its recursion goes
    # through Numba's "unresolved symbol" cells, which only Numba's runtime linker fills (for
    # modules it finalizes itself): the second process loaded such a kernel and aborted
    # ("LLVM ERROR: Symbol not found: .numba.unresolved$...", found by `numbarules fuzz
    # --disk-cache`). It is compiled again instead; what can be stored still is.
    runs = _two_processes(tmp_path, RECURSIVE_IN_A_LOOP)
    assert runs[1]["grad"] == runs[0]["grad"]
    assert runs[0]["disk_hits"] == 0 and runs[1]["disk_hits"] > 0


RECURSIVE_WITH_CONSTANTS = '''
import json
import numbarules as nr

def rec(a, n):
    if n == 0:
        return 1.0
    b = rec(a * 0.5, n - 1)
    return a * b + 0.1

def f(x):
    return x * x * rec(0.96, 1)     # constant arguments: the primal call, not differentiated

print(json.dumps({"grad": nr.grad(f)(0.5), "disk_hits": nr.cache_info()["disk_hits"]}))
'''


def test_code_compiled_after_a_recursive_function_was_loaded_can_call_it(tmp_path):
    # Code compiled in the second process called the recursive function loaded from the disk
    # through one of Numba's unresolved-symbol cells, which Numba's runtime linker fills only
    # with symbols of modules it finalized itself: "numba jitted function aborted due to
    # unresolved symbol" (found by `numbarules fuzz --disk-cache`). Loaded code now tells the
    # linker what it defines.
    runs = _two_processes(tmp_path, RECURSIVE_WITH_CONSTANTS)
    assert runs[0]["grad"] == pytest.approx(2 * 0.5 * (0.96 * 1.0 + 0.1), rel=1e-12)
    assert runs[1]["grad"] == runs[0]["grad"] and runs[1]["disk_hits"] > 0


def test_every_helper_generated_code_calls_can_be_fingerprinted():
    # A helper whose fingerprint is None makes every kernel that calls it unstorable, silently:
    # each process compiles it again (the gather's _apart once held an llvmlite constant)
    from numbarules.ad import runtime
    for name, value in runtime.HELPERS.items():
        assert fingerprints.fingerprint(value) is not None, name


PRANGE_MODULE = '''
from perf.bench_prange import heat_swapped_p as steps

def outer(u0, k):
    return steps(u0, k, 3) * 2.0
'''


def test_a_parallel_gradient_and_a_caller_of_its_serial_vjp_load_in_a_new_process(project):
    """A prange gradient's driver (its chunk loops outlined, ad/outline.py) and the serial vjp a
    caller links both count threads (``_num_threads``, by symbol: intrinsics.num_threads); both
    are stored, and load in a process that has compiled no parallel code yet."""
    (project.cache_dir.parent / "prmod.py").write_text(PRANGE_MODULE)
    after = """
    import prmod
    u0 = np.sin(np.linspace(0.0, 3.0, 40))
    go = nr.grad(prmod.outer, argnums=(0, 1))(u0, 0.2)      # first: no parallel code loaded
    gs = nr.grad(prmod.steps, argnums=(0, 1))(u0, 0.2, 4)
    out.update(steps=[gs[0].tolist(), gs[1]], outer=[go[0].tolist(), go[1]])
    """
    first = project(after=after)
    second = project(after=after)
    assert second["compiles"] == 0 and second["disk_hits"] > first["disk_hits"]
    for key in ("steps", "outer"):
        np.testing.assert_allclose(second[key][0], first[key][0], rtol=1e-15)
        assert second[key][1] == first[key][1]
    # and right: central differences of the Python function (prange runs as range there)
    ns = {}
    exec(PRANGE_MODULE, ns)
    u0, h = np.sin(np.linspace(0.0, 3.0, 40)), 1e-6
    e = np.eye(40)[7] * h
    assert np.isclose(first["steps"][0][7], (ns["steps"](u0 + e, 0.2, 4)
                                             - ns["steps"](u0 - e, 0.2, 4)) / (2 * h), rtol=1e-6)
    assert np.isclose(first["outer"][1], (ns["outer"](u0, 0.2 + h)
                                          - ns["outer"](u0, 0.2 - h)) / (2 * h), rtol=1e-6)
