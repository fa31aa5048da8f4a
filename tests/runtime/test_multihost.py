"""One plan over several "hosts" (loopback addresses, each its own process tree started with the real
CLI): the same results as on one host, listeners on each host's own address only, joins checked."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from wgc.runtime.api import request_spec
from wgc.runtime.process.local import LocalCluster

from tests.runtime.hosts import HEAD, Hosts, compiled, descendants, stderr, wait_for
from wgc.plan.file import load_plan

BAGEL_DOCS = [
    {"params": {"max_tokens": 12}, "parts": [{"kind": "text", "payload": "a"}]},
    {"params": {"steps": 5}, "parts": [{"kind": "text", "payload": "b"}], "outputs": ["image"]},
    {"params": {"max_tokens": 6, "steps": 3}, "parts": [{"kind": "text", "payload": "c"}], "outputs": ["image"],
     "think": True},
]


def outputs_by_request(lines: list[dict[str, Any]]) -> dict[int, dict[str, list[Any]]]:
    """Each request's outputs by modality, in request order."""
    out: dict[int, dict[str, list[Any]]] = {}
    for line in lines:
        assert line["event"] in ("output", "done"), line
        slot = out.setdefault(line["request"], {})
        if line["event"] == "output":
            slot.setdefault(line["modality"], []).append(line["payload"])
    return {k: out[k] for k in sorted(out)}


def head_run(hosts: Hosts, plan: Path, docs: list[dict[str, Any]], *more: str) -> list[dict[str, Any]]:
    args = [a for d in docs for a in ("--request", json.dumps(d))]
    head = hosts.start(str(plan), *more, *args)
    out, _ = head.communicate(timeout=240)
    assert head.returncode == 0, stderr(head)
    lines = [json.loads(x) for x in out.splitlines()]
    assert lines[0]["event"] == "ready"
    return lines[1:]


def test_bagel_on_three_hosts_equals_the_in_process_cluster(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    with Hosts(tmp_path) as hosts:
        nodes = [hosts.node(plan, 1), hosts.node(plan, 2)]  # before the head: start order is free
        got = outputs_by_request(head_run(hosts, plan, BAGEL_DOCS * 2, "--fake"))
        assert all(n.wait(timeout=15) == 0 for n in nodes)  # the head's orderly stop ends every host
    expected = LocalCluster(load_plan(plan)[1]).run([request_spec(**d) for d in BAGEL_DOCS * 2])
    assert [got[k] for k in sorted(got)] == [expected[k] for k in sorted(expected)]
    assert any("image" in o for o in got.values())


ORPHEUS_DOCS = [{"params": {"voice": v, "max_tokens": 120, "temperature": 0.0}, "inputs": {"prompt": "hello there"}, "outputs": ["audio"]}
                for v in ("leah", "tara")]


def test_orpheus_with_its_stream_crossing_two_hosts_equals_one_host(tmp_path: Path) -> None:
    """Tiny real components (random weights, seeded): every token of `codes` and every credit cross
    hosts over TCP; the audio is the same as with both ranks on one host: the same chunks, each equal
    to float32 rounding (which requests share a batch depends on timing, and the batch changes the
    order of a CPU matmul's sums: two single-host runs differ by 1e-7 too)."""
    two_hosts = compiled(tmp_path, "orpheus", "orpheus-cpu2-hosts.toml")
    one_host = compiled(tmp_path, "orpheus", "orpheus-cpu2.toml")
    with Hosts(tmp_path) as hosts:
        node = hosts.start(str(two_hosts), "--headless", "--node-rank", "1", "--master-addr", HEAD)
        got = outputs_by_request(head_run(hosts, two_hosts, ORPHEUS_DOCS))
        assert node.wait(timeout=15) == 0
        expected = outputs_by_request(head_run(hosts, one_host, ORPHEUS_DOCS))
    assert got.keys() == expected.keys()
    for k in got:
        chunks, want = got[k]["audio"], expected[k]["audio"]
        assert len(chunks) == len(want) > 0
        for a, b in zip(chunks, want, strict=True):
            assert torch.allclose(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-5)


def _listeners() -> list[tuple[str, int]]:
    """(local address:port, pid) of every listening TCP socket, from `ss -tlnp`."""
    text = subprocess.run(["ss", "-Htlnp"], capture_output=True, text=True, timeout=10).stdout
    out = []
    for line in text.splitlines():
        fields = line.split()
        for pid in re.findall(r"pid=(\d+)", line):
            out.append((fields[3], int(pid)))
    return out


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_each_host_listens_on_its_own_address_only(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    addresses = [h.address for h in load_plan(plan)[1].hosts]
    with Hosts(tmp_path) as hosts:
        nodes = [hosts.node(plan, 1), hosts.node(plan, 2)]
        head = hosts.start(str(plan), "--fake", "--request", "-", stdin=subprocess.PIPE)
        assert json.loads(head.stdout.readline())["event"] == "ready"  # type: ignore[union-attr]
        trees = [{p.pid, *descendants(p.pid)} for p in (head, *nodes)]
        seen: dict[int, list[str]] = {k: [] for k in range(3)}
        for local, pid in _listeners():
            for k, tree in enumerate(trees):
                if pid in tree:
                    seen[k].append(local)
        head.stdin.close()  # type: ignore[union-attr]
        head.wait(timeout=30)
    for k, address in enumerate(addresses):
        assert seen[k], f"host {k} has no TCP listener"
        assert all(local.rsplit(":", 1)[0] == address for local in seen[k]), (k, seen[k])
    assert len(seen[0]) == 3  # the head: its rank, the coordinator and membership


def test_a_host_with_another_plan_is_refused_in_one_line(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    port = load_plan(plan)[1].transport.port  # type: ignore[union-attr]
    (tmp_path / "other").mkdir()
    other = compiled(tmp_path / "other", "bagel", "cpu3-hosts.toml", port, extra="[defaults.engine]\nmax_batch = 2\n")
    with Hosts(tmp_path) as hosts:
        good = hosts.node(plan, 1)
        head = hosts.start(str(plan), "--fake", "--request", "-", "--ready-timeout", "6", stdin=subprocess.PIPE)
        bad = hosts.node(other, 2)
        assert bad.wait(timeout=30) == 1
        refusal = [x for x in stderr(bad).splitlines() if "refused" in x]
        assert len(refusal) == 1 and "host node2 has a different plan" in refusal[0], stderr(bad)
        assert head.wait(timeout=30) == 1  # node2 never joined: start-up fails naming it
        assert "host node2 (127.0.0.4) has not joined" in stderr(head)
        assert wait_for(lambda: good.poll() is not None, 15)


def test_a_missing_host_fails_start_up_naming_it(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    with Hosts(tmp_path) as hosts:
        hosts.node(plan, 1)
        head = hosts.start(str(plan), "--fake", "--request", "-", "--ready-timeout", "4", stdin=subprocess.PIPE)
        assert head.wait(timeout=30) == 1
    line = stderr(head).strip().splitlines()[-1]
    assert "rank 2 did not report ready" in line and "host node2 (127.0.0.4) has not joined" in line


def test_nnodes_is_checked_against_the_plan(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    with Hosts(tmp_path) as hosts:
        node = hosts.node(plan, 1, "--nnodes", "2")
        assert node.wait(timeout=30) == 1
    assert "--nnodes 2: the plan has 3 hosts" in stderr(node)
