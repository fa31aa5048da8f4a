"""Tensors as a header on ZeroMQ and the payload on a process group, between two loopback "hosts"
(bench/gpu_multinode.py): Gloo on CPU in every run, NCCL on a GPU (`gpu`, unverified until a GPU
session runs it). The receiver posts each recv when its header arrives, so every tensor of both
sizes arrives; the all-reduce of the TP 2 group runs first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_multinode.py"


def _run(backend: str) -> list[str]:
    done = subprocess.run([sys.executable, str(SCRIPT), "--backend", backend, "--n", "20"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if line.startswith("| ") and "us" not in line]


def test_header_on_zeromq_payload_on_gloo_between_two_hosts() -> None:
    rows = _run("gloo")
    assert [r.split("|")[1].strip() for r in rows] == [
        "all_reduce [1, 4096] f32 (gloo)", "header on ZeroMQ + gloo send [2048] f32",
        "header on ZeroMQ + gloo send [4096, 64] f32"]


@pytest.mark.gpu
def test_header_on_zeromq_payload_on_nccl_between_two_ranks_on_one_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    assert len(_run("nccl")) == 3
