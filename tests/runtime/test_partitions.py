"""Network partitions between loopback "hosts", made with nftables drop rules on their addresses only.

A partitioned host (every packet to or from its address dropped: a silent cut, not a crash) is
found by the heartbeat within the threshold, long before the Gloo group's timeout (minutes), and
the request in flight ends with an error naming the host; the cut host fences itself. 5 % random
loss on every host's traffic causes no false host-down. Each test makes its own nftables table and
deletes it on the way out; they skip where `nft` is missing or not usable (it needs root).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from wgc.runtime.api import DoneEvent, ErrorEvent, Runtime

from tests.runtime.hosts import TIMEOUT, Hosts, compiled, descendants, stderr, wait_gone
from tests.runtime.test_multihost_failures import final_event, run

THRESHOLD = float(TIMEOUT)


def _nft(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, timeout=10)


def _nft_usable() -> bool:
    if shutil.which("nft") is None:
        return False
    probe = f"wgc_probe_{os.getpid()}"
    ok = _nft(f"add table inet {probe}\n").returncode == 0
    _nft(f"delete table inet {probe}\n")
    return ok


pytestmark = pytest.mark.skipif(not _nft_usable(), reason="needs nftables usable here (nft, as root)")


@contextmanager
def nft_rules(*rules: str) -> Iterator[None]:
    """An output-hook chain with `rules`, in a table of this test's own, removed on exit."""
    for rule in rules:  # only ever loopback addresses
        assert "127." in rule and "0.0.0.0" not in rule, rule
    table = f"wgc_test_{os.getpid()}"
    body = "\n".join(f"    {r}" for r in rules)
    script = f"table inet {table} {{\n  chain out {{\n    type filter hook output priority 0; policy accept;\n{body}\n  }}\n}}\n"
    done = _nft(script)
    assert done.returncode == 0, done.stderr
    try:
        yield
    finally:
        _nft(f"delete table inet {table}\n")


@pytest.fixture(autouse=True)
def _host_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WGC_HOST_TIMEOUT", TIMEOUT)


DOC = {"params": {"voice": "tara", "max_tokens": 400, "temperature": 0.0}, "inputs": {"prompt": "hello"},
       "outputs": ["audio"]}


def test_a_cut_host_is_found_by_heartbeat_before_any_gloo_timeout(tmp_path: Path) -> None:
    """Orpheus's LM at tp 2 across node0 and node1: cut node1 mid-request. Its shard's all-reduces
    would wait the Gloo timeout (10 minutes); the heartbeat declares the host down in seconds."""
    plan = compiled(tmp_path, "orpheus", "orpheus-tp2-hosts.toml")
    with Hosts(tmp_path, TIMEOUT) as hosts:
        node = hosts.start(str(plan), "--headless", "--node-rank", "1", "--master-addr", "127.0.0.2")

        async def body() -> Any:
            async with await Runtime.start(plan, ready_timeout=60) as runtime:
                handle = runtime.submit(**DOC)
                await asyncio.sleep(0.2)
                with nft_rules("ip daddr 127.0.0.3 drop", "ip saddr 127.0.0.3 drop"):
                    last = await final_event(handle, THRESHOLD + 15)  # a hang guard far below Gloo's timeout
                    report = await runtime.health(timeout=1.0)
                    fenced = await asyncio.to_thread(node.wait, THRESHOLD + 15)
                return last, report, fenced

        tree = [node.pid, *descendants(node.pid)]
        last, report, fenced = run(body(), timeout=120)
        assert not wait_gone(tree, 10.0)
    assert isinstance(last, ErrorEvent), last
    assert "host node1 (127.0.0.3) is down: no heartbeat for" in last.error
    assert report.ranks[1].state == "down"
    assert fenced == 1 and "no heartbeat from the head" in stderr(node)  # the cut host stopped itself


def test_five_percent_random_loss_causes_no_false_host_down(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    lossy = "ip daddr { 127.0.0.2, 127.0.0.3, 127.0.0.4 } numgen random mod 100 < 5 drop"
    docs = [{"params": {"max_tokens": 30}, "parts": [{"kind": "text", "payload": f"p{i}"}]} for i in range(8)]
    docs += [{"params": {"steps": 20}, "parts": [{"kind": "text", "payload": "a cat"}], "outputs": ["image"]}] * 4
    with Hosts(tmp_path, TIMEOUT) as hosts:
        hosts.node(plan, 1)
        hosts.node(plan, 2)

        async def body() -> tuple[list[Any], Any]:
            async with await Runtime.start(plan, fake=True, ready_timeout=30) as runtime:
                finals = []
                with nft_rules(lossy):
                    for _ in range(3):  # three waves, with a quiet heartbeat-only gap between them
                        handles = [runtime.submit(**d) for d in docs]
                        finals += [await final_event(h, 60) for h in handles]
                        await asyncio.sleep(THRESHOLD)
                    report = await runtime.health(timeout=5.0)
                return finals, report

        finals, report = run(body(), timeout=300)
    assert all(isinstance(f, DoneEvent) for f in finals), [f for f in finals if not isinstance(f, DoneEvent)][:1]
    assert report.ok and [r.state for r in report.ranks] == ["up", "up", "up"]
