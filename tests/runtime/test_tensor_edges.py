"""Tensors between hosts over Gloo (`inter_host = "gloo"`) and NCCL (`"nccl"`, the CUDA default): the
header on ZeroMQ, the payload on the edge's process groups (runtime/process/tensor_edges.py). Real
components send (2, 3) latents and velocities between two loopback "hosts" every step; the result
is the single-host one. On a GPU both "hosts" share the one device (distinct NCCL_HOSTIDs, NCCL's
socket transport on loopback), and the components refuse a latent that is not on their device."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from wgc.runtime.api import Runtime
from wgc.runtime.components.base import Call, Component
from wgc.runtime.process.edge_plan import Link, Transport, links, transport_of

from tests.runtime.cluster import compile_text
from tests.runtime.hosts import HEAD, Hosts, free_base_port
from tests.runtime.test_processes import TENSORS, TWO_RANKS
from wgc.plan.file import decode_plan, encode_plan

ROOT = Path(__file__).resolve().parents[2]
HOSTS = """
[[cluster.hosts]]
name = "node0"
address = "127.0.0.2"
ranks = 0

[[cluster.hosts]]
name = "node1"
address = "127.0.0.3"
ranks = 1

[transport]
inter_host = "gloo"
port = {port}
"""


def test_tensors_cross_hosts_as_a_header_and_a_gloo_payload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import the test's components
    # the GPU test's components, here on the CPU: each checks that its latent came to its own device
    plan = compile_text(tmp_path, ON_DEVICE, TWO_RANKS + HOSTS.replace("{port}", str(free_base_port())))
    path = tmp_path / "tensors.plan"
    path.write_bytes(encode_plan(plan, "", ""))
    outs, lines = _two_hosts(tmp_path, path, ready_timeout=60)
    assert any("rank 1: edge 0-1 connected over gloo" in x for x in lines), lines
    _assert_step_sums(outs)


# ---- the NCCL path: two "hosts" on one GPU -----------------------------------------------------------


class DeviceLlm(Component):
    """TensorLlm on the rank's device: the latent it gets must already be there (NCCL lands it there)."""

    def velocity(self, calls: list[Call]) -> list[Any]:
        weights = {"main": 1.0, "cfg_text": 10.0, "cfg_img": 100.0}
        for c in calls:
            if c.args[0].device != torch.device(self.device):
                raise ValueError(f"the latent arrived on {c.args[0].device}, not {self.device}")
        return [c.args[0] * 0 + weights[c.label] + c.args[1] for c in calls]


class DeviceMix(Component):
    def zero(self, calls: list[Call]) -> list[Any]:
        return [torch.zeros(2, 3, device=self.device) for _ in calls]

    def step(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] + c.args[1] + c.args[2] + c.args[3] for c in calls]  # b, c came from the other host


ON_DEVICE = TENSORS.replace("import tests.runtime.test_processes as tp", "import tests.runtime.test_tensor_edges as tp") \
    .replace("tp.TensorLlm", "tp.DeviceLlm").replace("tp.TensorMix", "tp.DeviceMix")
NCCL_ENV = 'NCCL_SOCKET_IFNAME = "lo", NCCL_P2P_DISABLE = "1", NCCL_SHM_DISABLE = "1", NCCL_IB_DISABLE = "1"'
GPU_HOSTS = f"""
[cluster]
device = "cuda"
gpu = "H200"
ranks = 2

[[cluster.hosts]]
name = "node0"
address = "127.0.0.2"
ranks = 0
env = {{ NCCL_HOSTID = "node0", {NCCL_ENV} }}

[[cluster.hosts]]
name = "node1"
address = "127.0.0.3"
ranks = 1
env = {{ NCCL_HOSTID = "node1", {NCCL_ENV} }}

[defaults]
ranks = [0]
engine = {{ kv_memory = "64MiB" }}

[components.llm]
ranks = [0, 1]
routing = "mirror"

[walks.gen.branches]
main = [0]
cfg_text = [1]
cfg_img = [1]

[transport]
port = {{port}}
"""


def gpu_plan(tmp_path: Path) -> Path:
    plan = compile_text(tmp_path, ON_DEVICE, GPU_HOSTS.replace("{port}", str(free_base_port())))
    path = tmp_path / "on_device.plan"
    path.write_bytes(encode_plan(plan, "", ""))
    return path


def test_a_cuda_placement_across_hosts_plans_nccl_edges_with_buffers_on_each_hosts_device(tmp_path: Path) -> None:
    _, plan = decode_plan(gpu_plan(tmp_path).read_bytes())
    assert plan.transport is not None and plan.transport.inter_host == "nccl"  # the CUDA default
    assert links(plan) == [Link(0, 1, "nccl"), Link(1, 0, "nccl")]
    assert [transport_of(plan, r) for r in (0, 1)] == [Transport("nccl", "cuda:0", host_frames=False)] * 2
    assert plan.hosts[1].env["NCCL_HOSTID"] == "node1"  # what makes two ranks on one GPU two NCCL hosts


@pytest.mark.gpu
def test_tensors_cross_hosts_as_a_header_and_an_nccl_payload_on_the_receivers_device(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unverified until a GPU session runs it (bench/gpu_check.sh)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    path = gpu_plan(tmp_path)
    outs, lines = _two_hosts(tmp_path, path, ready_timeout=90)
    assert any("rank 1: edge 0-1 connected over nccl (cuda:0 buffers)" in x for x in lines), lines
    _assert_step_sums(outs)


def _two_hosts(tmp_path: Path, path: Path, ready_timeout: float) -> tuple[list[Any], list[str]]:
    """Host 1 headless (the real CLI), the head in this process: three requests' finals and the
    head's start-up lines."""
    with Hosts(tmp_path) as hosts:
        hosts.start(str(path), "--headless", "--node-rank", "1", "--master-addr", HEAD,
                    "--allow-module-prefix", "tests.runtime", PYTHONPATH=str(ROOT))

        async def body() -> tuple[list[Any], list[str]]:
            async with await Runtime.start(path, allow_modules=["tests.runtime"], ready_timeout=ready_timeout) as runtime:
                handles = [runtime.submit(params={"steps": s}, outputs=["tensor"]) for s in STEPS]
                finals = [await asyncio.wait_for(h.collect(), 60) for h in handles]
                return finals, [x.line for x in runtime.startup_log]

        return asyncio.run(body())


STEPS = (5, 9, 3)


def _assert_step_sums(outs: list[Any]) -> None:
    """Each request's latent is the sum its steps add on both hosts (every payload arrived, in order)."""
    for out, steps in zip(outs, STEPS, strict=True):
        (z,) = out["tensor"]
        assert torch.equal(z.cpu(), torch.full((2, 3), float(sum(111 + 3 * t for t in range(steps - 1)))))
