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


def test_explain_from_the_command_line(capsys):
    code = cli.main(["explain", "cli_target:loss", "float64[:, :]", "cli_target:Diagonal"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0].startswith("loss(::Matrix[Float64], ::Diagonal)  [derived]")
    assert "my_sum(::Diagonal) -> my_sum(x::Diagonal)  [derived]" in out


def test_explain_reports_bad_types(capsys):
    assert cli.main(["explain", "cli_target:loss", "complex[:]"]) == 2
    assert "cannot read the type 'complex[:]'" in capsys.readouterr().err


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
