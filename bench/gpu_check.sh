#!/usr/bin/env bash
# The one script for a GPU session: the `gpu` tests, then the GPU benchmarks, in under 8 minutes.
# Usage: bash bench/gpu_check.sh   (from the repository root, with wgc installed)
set -uo pipefail
cd "$(dirname "$0")/.."

python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
python -m pip install --quiet -e '.[test]' 2>/dev/null || true
python -m pip install --quiet flashinfer-python triton 2>/dev/null || echo "note: flashinfer/triton not installable here"

echo "== pytest -m gpu"
timeout 240 python -m pytest -m gpu -q -rs -p no:cacheprovider
tests=$?

echo "== GPU benchmarks"
timeout 200 python bench/gpu_bench.py
bench=$?

echo "== summary: gpu tests exit ${tests}, benchmarks exit ${bench}"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
