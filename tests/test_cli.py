import ast
import os
import subprocess
import sys

from numbarules import cli


def test_demo_tells_the_story(capsys):
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "my_sum.which(D)  -> my_sum(x::Diagonal)" in out
    assert "mean_entry(A, 4) = 1.875   (picked up the new method)" in out
    assert "mean_entry(D, 4) = 0.625   (unchanged, not recompiled)" in out
    assert "recompiled 2 specializations" in out
    assert "raises NoMethodError" in out


def test_console_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "numbarules.cli", "--help"], capture_output=True,
                          text=True, check=True)
    assert "demo" in proc.stdout


def test_demo_tells_the_rules_story(capsys):
    cli.main(["demo"])
    out = capsys.readouterr().out
    assert "nr.rule_for(my_sum, D) -> None" in out
    assert "[rule]  (rrule at" in out and "my_sum(::Diagonal) -> my_sum(x::Diagonal)  [derived]" in out
    assert "[opted out]" in out
    assert "nr.rule_for(my_sum, A32) -> None" in out
    assert "grad(my_sum)(D) = Tangent[Diagonal](diag=array([1., 1., 1.]))" in out
    # the rule visibly ran for A (a marker rule: 100 * dy), not for D, and not after opt_out
    story = out[out.index("Gradients before any rule"):]
    before, rule, opted = (story.split("Now a reverse rule")[0],
                           story.split("Now a reverse rule")[1].split("nr.opt_out(")[0],
                           story.split("nr.opt_out(")[1])
    assert "grad(my_sum)(A) = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]" in before
    assert "grad(my_sum)(A) = [[100.0, 100.0, 100.0], [100.0, 100.0, 100.0]]" in rule
    assert "grad(my_sum)(D) = Tangent[Diagonal](diag=array([1., 1., 1.]))" in rule
    assert "grad(my_sum)(A) = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]" in opted
    assert "grad(my_sum)(A32) = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]" in opted


def test_method_rules_example_runs():
    proc = subprocess.run([sys.executable, "examples/method_rules.py"], capture_output=True,
                          text=True, check=True)
    assert "rule for D: None (the Diagonal method is differentiated)" in proc.stdout
    assert "[rule]" in proc.stdout and "vsum(::Vector[Float64])  [derived]" in proc.stdout


def test_train_logistic_example_runs_compiled_training():
    proc = subprocess.run([sys.executable, "examples/train_logistic.py"], capture_output=True,
                          text=True, check=True)
    accuracy = float(proc.stdout.split("training accuracy")[1].split()[0].rstrip(","))
    assert accuracy > 0.85


def test_dask_sweep_example_runs_on_a_local_cluster(tmp_path):
    env = dict(os.environ, NUMBARULES_CACHE="1", NUMBARULES_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "examples/dask_sweep.py", "--quick"],
                          capture_output=True, text=True, check=True, env=env, timeout=300)
    assert "16 gradients in" in proc.stdout and "100% Completed" in proc.stdout
    # the workers loaded the client's kernels from the shared cache
    counts = proc.stdout.split("(port: count): ")[1].strip()
    assert set(ast.literal_eval(counts).values()) == {0}, proc.stdout


def test_explain_from_the_command_line(capsys):
    code = cli.main(["explain", "cli_target:loss", "float64[:, :]", "cli_target:Diagonal"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0].startswith("loss(::Matrix[Float64], ::Diagonal)  [derived]")
    assert "my_sum(::Diagonal) -> my_sum(x::Diagonal)  [derived]" in out


def test_explain_reports_bad_types(capsys):
    assert cli.main(["explain", "cli_target:loss", "complex[:]"]) == 2
    assert "cannot read the type 'complex[:]'" in capsys.readouterr().err
    # too few types: what the function takes, not Numba's "Mismatch number of argument types"
    assert cli.main(["explain", "cli_target:loss", "float64[:, :]"]) == 2
    err = capsys.readouterr().err
    assert "loss(A, D) takes 2 arguments, 1 was given: write one TYPE per argument" in err
    assert "Traceback" not in err
    assert cli.main(["explain", "cli_target:nope", "float64"]) == 2
    assert "cli_target has no function named 'nope'" in capsys.readouterr().err
    assert cli.main(["explain", "no/such/file.py:f", "float64"]) == 2
    assert "no such file: no/such/file.py" in capsys.readouterr().err


def test_explain_takes_a_file_path(tmp_path, capsys):
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "train_logistic.py")
    code = cli.main(["explain", f"{path}:loss", "float64[:]", "float64[:, :]", "float64[:]"])
    assert code == 0
    assert capsys.readouterr().out.startswith(
        "loss(::Vector[Float64], ::Matrix[Float64], ::Vector[Float64])  [derived]")


def test_help_is_plain_text():
    proc = subprocess.run([sys.executable, "-m", "numbarules.cli", "--help"], capture_output=True,
                          text=True, check=True)
    assert "``" not in proc.stdout and "path/to/file.py:FUNCTION" in proc.stdout
    for command in ("explain", "profile", "bench", "fuzz", "cache"):
        sub = subprocess.run([sys.executable, "-m", "numbarules.cli", command, "--help"],
                             capture_output=True, text=True, check=True)
        assert "``" not in sub.stdout


def test_profile_from_the_command_line(tmp_path):
    # A fresh process: the first gradient compiles, and the report says where the time went.
    proc = subprocess.run([sys.executable, "-m", "numbarules.cli", "profile", "cli_target:loss",
                           "float64[:, :]", "cli_target:Diagonal", "--argnums", "0", "1"],
                          capture_output=True, text=True, cwd="tests")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("first gradient of cli_target:loss: ")
    assert "by phase:" in proc.stdout and "numba: typing" in proc.stdout
    assert "ad: type the primal" in proc.stdout
    assert "value_and_grad(loss) (float64[:, ::1], Diagonal)" in proc.stdout


def test_compile_stats_account_for_the_compile(tmp_path):
    import numbarules as nr

    def cubic(x):
        return x * x * x + 2.0 * x

    nr.compile_stats(reset=True)
    assert nr.grad(cubic)(2.0) == 14.0
    stats = nr.compile_stats()
    labels = [k.label for k in stats.kernels]
    assert any(label.startswith("grad(") and "cubic" in label for label in labels)
    assert any(label.startswith("AD transform of") for label in labels)
    assert stats.seconds > 0 and abs(sum(stats.by_phase.values()) - stats.seconds) < 1e-6
    assert all(k.seconds <= k.total + 1e-9 for k in stats.kernels)
    assert "compiles" in str(stats) and "by phase:" in str(stats)
    assert nr.grad(cubic)(3.0) == 29.0                # no compile: nothing new recorded
    assert len(nr.compile_stats()) == len(stats)


EXAMPLES_TESTED = {"method_rules.py": test_method_rules_example_runs,
                   "train_logistic.py": test_train_logistic_example_runs_compiled_training,
                   "dask_sweep.py": test_dask_sweep_example_runs_on_a_local_cluster}


def test_every_example_has_a_test_that_checks_its_output():
    import os
    folder = os.path.join(os.path.dirname(__file__), "..", "examples")
    assert {f for f in os.listdir(folder) if f.endswith(".py")} == set(EXAMPLES_TESTED)


def test_every_benchmark_takes_quick_and_bench_runs_by_name(capsys):
    import glob
    import os
    perf = os.path.join(os.path.dirname(__file__), "..", "perf")
    for script in sorted(glob.glob(os.path.join(perf, "bench_*.py"))):
        proc = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True)
        assert proc.returncode == 0 and "--quick" in proc.stdout, script
    assert cli.main(["bench", "nope"]) == 2
    assert "no benchmark named nope; there are ad, arrays, compile" in capsys.readouterr().out


def test_bench_cuda_without_a_gpu_says_why_and_passes():
    proc = subprocess.run([sys.executable, "perf/bench_cuda.py", "--quick"], capture_output=True,
                          text=True, env={**__import__("os").environ, "NUMBA_ENABLE_CUDASIM": "1"})
    assert proc.returncode == 0 and "bench_cuda: skipped" in proc.stdout
