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
