#!/usr/bin/env bash
# The one script for a GPU session: the `gpu` tests, then the GPU benchmarks, in under 8 minutes
# (worst case 470 s: installs <= 2 x 25 s, tests <= 200 s, benchmarks <= 150 s, multi-node <= 70 s).
# The gpu tests include the runtime's NCCL tensor edges between two "hosts" on the one GPU
# (tests/runtime/test_tensor_edges.py, test_tensor_path.py, test_edge_parts.py); the multi-node
# step times them against ZeroMQ frames through host memory.
# The gpu tests include CUDA-graph capture/replay of the Orpheus decode step (tests/models/orpheus/
# test_decode_graph.py); the benchmark's decode rows capture through the workers' start-up code.
# Usage: bash bench/gpu_check.sh   (from the repository root, with wgc installed)
set -uo pipefail
cd "$(dirname "$0")/.."

python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
timeout 25 python -m pip install --quiet --retries 0 -e '.[test]' 2>/dev/null || true
timeout 25 python -m pip install --quiet --retries 0 flashinfer-python triton 2>/dev/null \
  || echo "note: flashinfer/triton not installable here"

echo "== pytest -m gpu"
timeout 200 python -m pytest -m gpu -q -rs -p no:cacheprovider
tests=$?

echo "== GPU benchmarks"
timeout 150 python bench/gpu_bench.py
bench=$?

echo "== multi-node on one GPU: TP 2 all-reduce, header on ZeroMQ + NCCL send, the runtime's NCCL edge"
timeout 70 python bench/gpu_multinode.py --backend nccl --n 200
multinode=$?

echo "== summary: gpu tests exit ${tests}, benchmarks exit ${bench}, multi-node exit ${multinode}"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ] && [ "$multinode" -eq 0 ]
