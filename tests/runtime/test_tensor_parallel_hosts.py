"""Tensor parallelism across hosts: Orpheus's tiny language model at tp 2 over Gloo, one shard on
each of two loopback "hosts" (each its own process tree, the real CLI), gives the same greedy tokens
as tp 1 on one rank, for requests running concurrently (the leader decides every batch: without
that, the shards batch differently and their collectives mismatch). Float32 throughout."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import torch

from tests.runtime.hosts import HEAD, Hosts, compiled, descendants, stderr
from tests.runtime.test_multihost import _listeners, head_run, outputs_by_request
from wgc.plan.file import load_plan

DOCS = [{"params": {"voice": v, "max_tokens": n, "temperature": 0.0}, "inputs": {"prompt": p}, "outputs": ["audio"]}
        for v, n, p in (("tara", 60, "hello"), ("leo", 90, "hello there you"), ("zoe", 40, "hi"))]


def test_orpheus_lm_at_tp2_across_two_hosts_gives_the_tokens_of_tp1(tmp_path: Path) -> None:
    tp2 = compiled(tmp_path, "orpheus", "orpheus-tp2-hosts.toml")
    tp1 = compiled(tmp_path, "orpheus", "cpu.toml", extra='model = "orpheus"')
    assert [c.tp for c in load_plan(tp2)[1].components if c.name == "llm"] == [2]
    with Hosts(tmp_path) as hosts:
        node = hosts.start(str(tp2), "--headless", "--node-rank", "1", "--master-addr", HEAD)
        got = outputs_by_request(head_run(hosts, tp2, DOCS))  # three requests in flight together
        assert node.wait(timeout=20) == 0
        lines = stderr(hosts.procs[1])  # the head shows every rank's start-up lines
        expected = outputs_by_request(head_run(hosts, tp1, DOCS))
    for rank in (0, 1):
        assert f"rank {rank}: llm tensor-parallel group [0, 1] connected over gloo" in lines
    assert got.keys() == expected.keys() and len(got) == 3
    for k in got:
        chunks, want = got[k]["audio"], expected[k]["audio"]
        # the same number of audio chunks from the same greedy tokens (SNAC decodes them alike)
        assert len(chunks) == len(want) > 0
        for a, b in zip(chunks, want, strict=True):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-4)


def test_the_rendezvous_store_listens_on_the_heads_address(tmp_path: Path) -> None:
    if shutil.which("ss") is None:
        return
    plan = compiled(tmp_path, "orpheus", "orpheus-tp2-hosts.toml")
    port = load_plan(plan)[1].transport.port  # type: ignore[union-attr]
    with Hosts(tmp_path) as hosts:
        node = hosts.start(str(plan), "--headless", "--node-rank", "1", "--master-addr", HEAD)
        head = hosts.start(str(plan), "--request", "-", stdin=subprocess.PIPE)
        ready: dict[str, Any] = json.loads(head.stdout.readline())  # type: ignore[union-attr]
        assert ready["event"] == "ready", stderr(head)
        trees = [{head.pid, *descendants(head.pid)}, {node.pid, *descendants(node.pid)}]
        listeners = [(local, k) for local, pid in _listeners() for k, tree in enumerate(trees) if pid in tree]
        head.stdin.close()  # type: ignore[union-attr]
        head.wait(timeout=30)
    assert f"127.0.0.2:{port}" in [local for local, k in listeners if k == 0]  # the store
    addresses = ["127.0.0.2", "127.0.0.3"]
    # Gloo's pair listeners are ephemeral ports, but on the device address each rank was given
    assert all(local.rsplit(":", 1)[0] == addresses[k] for local, k in listeners), listeners
