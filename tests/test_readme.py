"""Every Python block of README.md runs as written, in order, in one fresh process (the GPU block
under Numba's CUDA simulator), and says what the text says it does."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHECKS = '''
assert "Diagonal" in repr(my_sum.which(Diagonal))
assert nr.rule_for(my_sum, D) is None
np.testing.assert_allclose(nr.grad(loss, (0, 1))(A, D)[0], 6.0 * np.eye(3))
assert abs(nr.grad(softplus)(0.3) - 1.0 / (1.0 + math.exp(-0.3))) < 1e-12
assert nr.grad(lambda x: rounded(x) + x)(1.3) == 1.0
host = out.copy_to_host()
assert host.shape == (64,) and np.isfinite(host).all()
print("README OK")
'''


def test_readme_python_blocks_run_in_order(tmp_path):
    with open(os.path.join(ROOT, "README.md")) as fh:
        blocks = re.findall(r"```python\n(.*?)```", fh.read(), re.S)
    assert len(blocks) >= 4
    script = tmp_path / "readme.py"
    script.write_text("\n".join(blocks) + CHECKS)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", NUMBARULES_CACHE="0",
               PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "README OK" in proc.stdout
    assert "[rule]" in proc.stdout                      # nr.explain printed the call tree
