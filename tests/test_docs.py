"""Every code block of README.md and docs/*.md runs as written, and says what the text says.

- Python blocks of one file run in order, in one fresh process, under Numba's CUDA simulator
  (so that GPU blocks run without a GPU). A block right after the line
  ``<!-- docs-test: no simulator -->`` runs in its own process without the simulator (PTX
  compiles need numba-cuda's real compiler); the text beside it says so.
- Bash blocks: each ``numbarules ...`` line runs (as ``python -m numbarules.cli ...``, from the
  repository root, with a private cache directory) and must exit 0. The two set-up commands at
  the top of the README are not run here (they create a virtual environment): the test command
  must be the very line ``.ci/run`` runs, and the demo command must install the same way and
  then run ``numbarules demo``, which tests/test_cli.py runs.
- A block of any other kind fails this test: a new kind of block needs a rule here.
"""

import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted(os.path.join("docs", f)
                              for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
NO_SIM = "<!-- docs-test: no simulator -->"
SETUP = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && "

# What the README's text claims, checked after its blocks ran (appended to the same script).
README_CHECKS = '''
assert "Diagonal" in repr(my_sum.which(Diagonal))
assert nr.rule_for(my_sum, D) is None
np.testing.assert_allclose(nr.grad(loss, (0, 1))(A, D)[0], 6.0 * np.eye(3))
assert abs(nr.grad(softplus)(0.3) - 1.0 / (1.0 + math.exp(-0.3))) < 1e-12
assert nr.grad(lambda x: rounded(x) + x)(1.3) == 1.0
host = out.copy_to_host()
assert host.shape == (64,) and np.isfinite(host).all()
print("README OK")
'''


def blocks(path):
    """[(language, code, no_simulator)] of a Markdown file, in order."""
    with open(os.path.join(ROOT, path)) as fh:
        text = fh.read()
    found = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        before = text[:m.start()].rstrip().splitlines()[-1:] or [""]
        found.append((m.group(1), m.group(2), before[0].strip() == NO_SIM))
    return found


def _env(tmp_path, simulator):
    env = dict(os.environ, NUMBARULES_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=ROOT,
               NUMBARULES_PROGRESS="0")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


def _run_python(tmp_path, name, code, simulator):
    script = tmp_path / name
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=_env(tmp_path, simulator), cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
    return proc


def test_every_block_has_a_rule():
    kinds = {lang for path in DOCS for lang, _, _ in blocks(path)}
    assert kinds <= {"python", "bash"}, kinds


@pytest.mark.parametrize("path", [p for p in DOCS if any(lang == "python" for lang, _, _ in
                                                         blocks(p))])
def test_python_blocks_run_in_order(path, tmp_path):
    found = [(code, no_sim) for lang, code, no_sim in blocks(path) if lang == "python"]
    together = "\n".join(code for code, no_sim in found if not no_sim)
    if path == "README.md":
        together += README_CHECKS
    proc = _run_python(tmp_path, "blocks.py", together, simulator=True)
    if path == "README.md":
        assert "README OK" in proc.stdout
        assert "[rule]" in proc.stdout                  # nr.explain printed the call tree
    for k, (code, no_sim) in enumerate(found):
        if no_sim:
            _run_python(tmp_path, f"alone{k}.py", code, simulator=False)


def test_setup_commands_are_what_ci_runs():
    bash = [code.strip() for lang, code, _ in blocks("README.md") if lang == "bash"]
    setup = [c for c in bash if c.startswith("python3 -m venv")]
    assert setup == [SETUP + ".venv/bin/numbarules demo", SETUP + ".venv/bin/python -m pytest -q"]
    with open(os.path.join(ROOT, ".ci", "run")) as fh:
        assert setup[1] in fh.read().splitlines()


def _commands():
    lines = []
    for path in DOCS:
        for lang, code, _ in blocks(path):
            if lang != "bash" or code.strip().startswith("python3 -m venv"):
                continue
            for line in code.splitlines():
                line = line.split("  #")[0].strip()
                if line:
                    assert line.startswith("numbarules "), f"{path}: cannot run {line!r}"
                    lines.append(line)
    return lines


@pytest.mark.parametrize("line", _commands())
def test_command_lines_run(line, tmp_path):
    argv = shlex.split(line)[1:]
    proc = subprocess.run([sys.executable, "-m", "numbarules.cli"] + argv, capture_output=True,
                          text=True, env=_env(tmp_path, simulator=False), cwd=ROOT, timeout=900)
    assert proc.returncode == 0, f"{line}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert proc.stdout.strip()
