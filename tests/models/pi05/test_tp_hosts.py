"""π0.5's `llm` at tp 2 across two loopback "hosts" over Gloo (each its own process tree, the real CLI,
the head serving HTTP): the tiny preset's action chunks for two requests equal one rank's, within
float32 tolerance. The placement is written here (cpu.toml extended: the llm on ranks 0 and 1, the
vit beside rank 0); the shard arithmetic itself is test_tp.py."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from tests.runtime.hosts import HEAD, ROOT, Hosts, free_base_port, stderr
from wgc.compile import compile_program
from wgc.plan.file import load_plan

TP2 = """extends = "{root}/placements/cpu.toml"
model = "pi05"

[cluster]
ranks = 2

[[cluster.hosts]]
name = "node0"
address = "127.0.0.2"
ranks = 0

[[cluster.hosts]]
name = "node1"
address = "127.0.0.3"
ranks = 1

[components.llm]
ranks = [0, 1]
tp = 2

[transport]
inter_host = "gloo"
port = {port}
"""


def plan_for(tmp_path: Path, placement: str, name: str) -> Path:
    own = tmp_path / f"{name}.toml"
    own.write_text(placement)
    source = ROOT / "models" / "pi05.walk"
    result = compile_program(str(source), source.read_text(), str(own))
    assert result.data is not None, [d.message for d in result.diagnostics]
    path = tmp_path / f"{name}.plan"
    path.write_bytes(result.data)
    return path


def body(seed: int, task: str) -> dict[str, Any]:
    cams = np.random.default_rng(seed).integers(0, 256, (2, 56, 56, 3), dtype=np.uint8)  # the tiny preset's 56 px
    images = {"dtype": "u8", "shape": list(cams.shape), "b64": base64.b64encode(cams.tobytes()).decode()}
    state = {"dtype": "f32", "values": [0.1 * i for i in range(8)]}
    return {"params": {"seed": seed}, "inputs": {"images": images, "prompt": task, "state": state},
            "outputs": ["action"], "stream": False}


def chunks(hosts: Hosts, plan: Path, bodies: list[dict[str, Any]]) -> list[np.ndarray]:
    """Each body's action chunk from the head served on a free loopback port; the head stopped after."""
    head = hosts.start(str(plan), "--serve", "127.0.0.1:0")
    url = json.loads(head.stdout.readline())["url"].rstrip("/")  # type: ignore[union-attr]
    out = []
    for b in bodies:
        r = httpx.post(f"{url}/v1/generate", json=b, timeout=60)
        assert r.status_code == 200, r.text
        (event,) = [e for e in r.json()["events"] if e["type"] == "output"]
        out.append(np.asarray(event["data"], dtype=np.float64))  # [50, 7]
    head.terminate()
    head.wait(timeout=30)
    return out


def test_pi05_llm_at_tp2_across_two_hosts_gives_one_ranks_chunks(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, TP2.format(root=ROOT, port=free_base_port()), "tp2")
    single = plan_for(tmp_path, f'extends = "{ROOT}/placements/cpu.toml"\nmodel = "pi05"\n', "tp1")
    assert [c.tp for c in load_plan(plan)[1].components if c.name == "llm"] == [2]
    bodies = [body(7, "pick up the red cube"), body(8, "open the drawer")]
    with Hosts(tmp_path) as hosts:
        node = hosts.start(str(plan), "--headless", "--node-rank", "1", "--master-addr", HEAD)
        got = chunks(hosts, plan, bodies)
        assert node.wait(timeout=30) == 0  # the head's orderly stop ends the other host
        lines = stderr(hosts.procs[0]) + stderr(hosts.procs[1])
        expected = chunks(hosts, single, bodies)
    for rank in (0, 1):
        assert f"rank {rank}: llm tensor-parallel group [0, 1] connected over gloo" in lines
        assert f"tensor-parallel rank {rank} of 2; " in lines  # each rank's start-up line names its shard
    assert np.abs(expected[0] - expected[1]).max() > 0.1  # the requests differ: a wrong shard would show
    for a, b in zip(got, expected, strict=True):
        assert a.shape == (50, 7)
        np.testing.assert_allclose(a, b, atol=1e-5)  # float32, the row-parallel sums in another order (~1e-7)
