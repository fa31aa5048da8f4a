"""Tensors as a header on ZeroMQ and the payload on a process group, between two loopback "hosts"
(bench/gpu_multinode.py): Gloo on CPU in every run, NCCL on a GPU (`gpu`, unverified until a GPU
session runs it). The receiver posts each recv when its header arrives, so every tensor of both
sizes arrives; the all-reduce of the TP 2 group runs first. Then the runtime's own edges
(runtime/process/tensor_edges.py) carry the same sizes, each message checked on the receiver (its
values, the latent on the receiver's device, the CPU counter beside it) against ZeroMQ frames, and
8 MiB messages both ways at once (bench/gpu_edge_rows.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.hosts import free_base_port

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_multinode.py"


def _run(backend: str) -> list[str]:
    done = subprocess.run([sys.executable, str(SCRIPT), "--backend", backend, "--n", "20", "--timeout", "150",
                           "--port", str(free_base_port())], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.split("|")[1].strip() for line in done.stdout.splitlines()
            if line.startswith("| ") and "median" not in line]


def rows_of(backend: str) -> list[str]:
    runtime = [f"runtime {what} {shape} f32, round trip" for shape in ("[2048]", "[4096, 64]")
               for what in (f"edge: header on ZeroMQ + {backend} payload", "ZeroMQ frames via host memory")]
    return [f"all_reduce [1, 4096] f32 ({backend})", f"header on ZeroMQ + {backend} send [2048] f32",
            f"header on ZeroMQ + {backend} send [4096, 64] f32", *runtime,
            "runtime edge both ways at once: 2 x [2048, 1024] f32 each way, all in"]


def test_header_on_zeromq_payload_on_gloo_between_two_hosts() -> None:
    assert _run("gloo") == rows_of("gloo")  # rc 0: every tensor arrived as sent, on the right device


@pytest.mark.gpu
def test_header_on_zeromq_payload_on_nccl_between_two_ranks_on_one_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    assert _run("nccl") == rows_of("nccl")
