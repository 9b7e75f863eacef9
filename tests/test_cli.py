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
