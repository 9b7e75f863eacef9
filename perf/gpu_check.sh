#!/usr/bin/env bash
# What a session with an NVIDIA GPU runs (the device tool; CI has no GPU): the CUDA test programs
# on the real device instead of the simulator, then the GPU benchmarks. Writes $OUT/gpu_log (or
# ./gpu_log). Uses the machine's own python3 with its numba and numba-cuda, numbarules from this
# checkout (PYTHONPATH): nothing is installed.
set -u
LOG="${OUT:-.}/gpu_log"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
unset NUMBA_ENABLE_CUDASIM
# numba-cuda 0.30 does not import with NumPy 2.5 (np.row_stack is gone): carry an older NumPy as
# wheels in .whl/ (the device tool's README says how) and it is put first on the path
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import numba, numpy, numba_cuda; print('numba', numba.__version__, 'numba-cuda', numba_cuda.__version__, 'numpy', numpy.__version__)"
  # the simulator's semantic tests, on the device: every device vjp compiled and run for real
  timeout "${TESTS_S:-240}" python3 -m pytest -q -p no:cacheprovider tests/cuda_sim_cases.py \
      -k "not test_running_in_the_simulator" 2>&1 | tail -25
  # the GPU benchmarks, each under its own limit
  timeout "${BENCH_S:-150}" python3 perf/bench_cuda.py ${BENCH_ARGS:-} 2>&1 | tail -12
  timeout "${BENCH_S:-150}" python3 perf/bench_cuda_checkpoint.py 2>&1 | tail -8
  timeout "${BENCH_S:-150}" python3 perf/bench_cuda_checkpoint.py --n 32768 2>&1 | tail -8
} 2>&1 | tee "$LOG"
