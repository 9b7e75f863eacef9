"""The persistent kernel cache, across real processes: loads instead of compiling, and never loads
stale code (an edited method, a rule or a method added in the new process, a corrupt file)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from numbarules import cli, diskcache

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
    assert "numbarules: compiling grad(energy) (entry) (::Vector[Float64])" in first["stderr"]
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
    base = diskcache.fingerprint(ns["f"])
    moved = {}
    exec("\n\n\nK = 2.0\ndef helper(x):\n    return K * x\n\n\ndef f(x):\n    return helper(x) + 1\n",
         moved)
    assert diskcache.fingerprint(moved["f"]) == base
    ns["K"] = 3.0
    assert diskcache.fingerprint(ns["f"]) != base          # a global read by a callee
    ns["K"] = 2.0
    exec("def helper(x):\n    return K * x * 1.0\n", ns)
    assert diskcache.fingerprint(ns["f"]) != base          # the callee's code


def test_bench_command_runs_every_script_and_reports_failures(tmp_path, monkeypatch):
    perf = tmp_path / "perf"
    perf.mkdir()
    (perf / "bench_ok.py").write_text("import sys\nprint('ok', sys.argv[1:])\n")
    (perf / "bench_bad.py").write_text("raise SystemExit(3)\n")
    monkeypatch.setattr(cli, "perf_directory", lambda: str(perf))
    lines = []
    assert cli.bench(True, lines.append) == 1
    assert "\n=== bench_ok.py --quick" in lines and "failed: bench_bad.py (exit 3)" in lines[-1]
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
