"""Tensors between hosts over Gloo (`inter_host = "gloo"`): the header on ZeroMQ, the payload on the
edge's process group (runtime/process/tensor_edges.py). Real components send (2, 3) latents and
velocities between two loopback "hosts" every step; the result is the single-host one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from wgc.runtime.api import Runtime

from tests.runtime.cluster import compile_text
from tests.runtime.hosts import HEAD, Hosts, free_base_port
from tests.runtime.test_processes import TENSORS, TWO_RANKS
from wgc.plan.file import encode_plan

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
    plan = compile_text(tmp_path, TENSORS, TWO_RANKS + HOSTS.replace("{port}", str(free_base_port())))
    path = tmp_path / "tensors.plan"
    path.write_bytes(encode_plan(plan, "", ""))
    with Hosts(tmp_path) as hosts:
        hosts.start(str(path), "--headless", "--node-rank", "1", "--master-addr", HEAD,
                    "--allow-module-prefix", "tests.runtime", PYTHONPATH=str(ROOT))

        async def body() -> tuple[list[Any], list[str]]:
            async with await Runtime.start(path, allow_modules=["tests.runtime"], ready_timeout=60) as runtime:
                handles = [runtime.submit(params={"steps": s}, outputs=["tensor"]) for s in (5, 9, 3)]
                finals = [await asyncio.wait_for(h.collect(), 60) for h in handles]
                return finals, [x.line for x in runtime.startup_log]

        outs, lines = asyncio.run(body())
    assert any("rank 1: edge 0-1 connected over gloo" in x for x in lines), lines
    for out, steps in zip(outs, (5, 9, 3), strict=True):
        (z,) = out["tensor"]
        assert torch.equal(z, torch.full((2, 3), float(sum(111 + 3 * t for t in range(steps - 1)))))
