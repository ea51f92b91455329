#!/usr/bin/env bash
# One-stop GPU run (device machine, Python 3.12 image): install the carried wheels (numpy 2.4 for
# numba-cuda 0.30, blake3) and vyre from the working tree, check the install, run the benchmarks.
#   carry: .whl      run: bash bench/gpu.sh [section ...]
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0
export VYRE_CACHE_DIR=${VYRE_CACHE_DIR:-/tmp/vyre-cache}
python3 -c "import numpy, numba, numba.cuda, vyre; print('numpy', numpy.__version__, 'numba', numba.__version__, 'gpu', numba.cuda.is_available())" || exit 1
if [ "${VYRE_GPU_DEMO:-1}" = 1 ]; then
  python3 -m vyre.cli demo 2>&1 | tee "${OUT:-/tmp}/demo.txt"   # the main job, on the best backend (CUDA)
fi
python3 bench/gpu_bench.py "$@" 2>&1 | tee "${OUT:-/tmp}/gpu_bench.md"
