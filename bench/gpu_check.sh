#!/usr/bin/env bash
# The one script for a GPU session: the `gpu` tests, then the GPU benchmarks, in under 10 minutes
# (worst case 550 s: installs <= 2 x 30 s, tests <= 220 s, benchmarks <= 180 s, multi-node <= 90 s).
# The gpu tests include CUDA-graph capture/replay of the Orpheus decode step (tests/models/orpheus/
# test_decode_graph.py); the benchmark's decode rows capture through the workers' start-up code.
# Usage: bash bench/gpu_check.sh   (from the repository root, with wgc installed)
set -uo pipefail
cd "$(dirname "$0")/.."

python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
timeout 30 python -m pip install --quiet --retries 0 -e '.[test]' 2>/dev/null || true
timeout 30 python -m pip install --quiet --retries 0 flashinfer-python triton 2>/dev/null \
  || echo "note: flashinfer/triton not installable here"

echo "== pytest -m gpu"
timeout 220 python -m pytest -m gpu -q -rs -p no:cacheprovider
tests=$?

echo "== GPU benchmarks"
timeout 180 python bench/gpu_bench.py
bench=$?

echo "== multi-node on one GPU: TP 2 all-reduce, header on ZeroMQ + NCCL send between two ranks"
timeout 90 python bench/gpu_multinode.py --backend nccl --n 200
multinode=$?

echo "== summary: gpu tests exit ${tests}, benchmarks exit ${bench}, multi-node exit ${multinode}"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ] && [ "$multinode" -eq 0 ]
