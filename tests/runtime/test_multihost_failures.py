"""Failures across hosts: a remote worker killed, a host's agent killed, a host frozen (SIGSTOP), the
head killed. Each "host" is its own process tree (its own session) on its own loopback address,
started with the real CLI; the head runs in this process (Runtime.start) where the test reads its
events and health, with the real CLI where the head itself is killed. Every wait is bounded and
every process started is killed on the way out (tests/runtime/hosts.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from wgc.runtime.api import ErrorEvent, RankDownError, Runtime

from tests.runtime.hosts import TIMEOUT, Hosts, compiled, descendants, stderr, wait_gone

T = TypeVar("T")
LONG_IMAGE = {"params": {"steps": 200}, "parts": [{"kind": "text", "payload": "a cat"}], "outputs": ["image"]}
THRESHOLD = float(TIMEOUT)


@pytest.fixture(autouse=True)
def _host_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WGC_HOST_TIMEOUT", TIMEOUT)  # the head's threshold (the hosts get it in the welcome)


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def final_event(handle: Any, timeout: float) -> Any:
    """The request's last event; the bound is a hang guard (no request may hang on a dead host)."""
    events = await asyncio.wait_for(_all(handle), timeout)
    return events[-1]


async def _all(handle: Any) -> list[Any]:
    return [e async for e in handle.events()]


def test_a_killed_remote_worker_fails_the_request_naming_rank_and_host(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    with Hosts(tmp_path, TIMEOUT) as hosts:
        hosts.node(plan, 1)
        hosts.node(plan, 2)

        async def body() -> tuple[Any, Any]:
            async with await Runtime.start(plan, fake=True, ready_timeout=30) as runtime:
                handle = runtime.submit(**LONG_IMAGE)
                os.kill(runtime.pids[1], signal.SIGKILL)
                last = await final_event(handle, 10)
                report = await runtime.health()
                with pytest.raises(RankDownError, match="rank 1 is down"):
                    runtime.submit(**LONG_IMAGE)
                return last, report

        last, report = run(body())
    assert isinstance(last, ErrorEvent)
    assert "rank 1 is down: host node1 (127.0.0.3): killed by SIGKILL" in last.error
    assert [r.state for r in report.ranks] == ["up", "down", "up"]
    assert "node1" in report.ranks[1].reason


def test_a_killed_agent_takes_its_workers_and_the_head_declares_its_host_down(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    with Hosts(tmp_path, TIMEOUT) as hosts:
        node1 = hosts.node(plan, 1)
        hosts.node(plan, 2)

        async def body() -> tuple[Any, list[int], Any]:
            async with await Runtime.start(plan, fake=True, ready_timeout=30) as runtime:
                workers = descendants(node1.pid)
                assert runtime.pids[1] in workers
                node1.kill()  # SIGKILL the agent alone: its workers see their pipe close
                handle = runtime.submit(**LONG_IMAGE)  # in flight until the head finds node1 silent
                last = await final_event(handle, THRESHOLD + 10)
                return last, workers, await runtime.health()

        last, workers, report = run(body())
        assert not wait_gone(workers, 5.0)
    assert isinstance(last, ErrorEvent)
    assert "rank 1 is down" in last.error and "node1 (127.0.0.3)" in last.error
    assert report.ranks[1].state == "down" and "node1" in report.ranks[1].reason


def test_a_frozen_host_is_detected_and_fences_itself_after_it_wakes(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    with Hosts(tmp_path, TIMEOUT) as hosts:
        hosts.node(plan, 1)
        node2 = hosts.node(plan, 2)

        async def body() -> tuple[Any, Any, list[int]]:
            async with await Runtime.start(plan, fake=True, ready_timeout=30) as runtime:
                tree = [node2.pid, *descendants(node2.pid)]
                os.killpg(node2.pid, signal.SIGSTOP)  # the whole host: agent and workers
                handle = runtime.submit(**LONG_IMAGE)  # waits on rank 2 until node2 is declared down
                try:
                    last = await final_event(handle, THRESHOLD + 10)
                    report = await runtime.health(timeout=1.0)
                finally:
                    os.killpg(node2.pid, signal.SIGCONT)
                return last, report, tree

        last, report, tree = run(body())
        # after SIGCONT the host finds the head silent for longer than the threshold: it stops itself
        assert node2.wait(timeout=THRESHOLD + 10) == 1
        assert not wait_gone(tree, 5.0)
    assert isinstance(last, ErrorEvent)
    assert "host node2 (127.0.0.4) is down: no heartbeat for" in last.error
    assert report.ranks[2].state == "down"
    lines = stderr(node2)
    assert "no heartbeat from the head" in lines or "fenced" in lines, lines


def test_when_the_head_is_killed_every_remote_process_is_gone_within_the_threshold(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    with Hosts(tmp_path, TIMEOUT) as hosts:
        nodes = [hosts.node(plan, 1), hosts.node(plan, 2)]
        head = hosts.start(str(plan), "--fake", "--request", "-", stdin=subprocess.PIPE)
        assert json.loads(head.stdout.readline())["event"] == "ready"  # type: ignore[union-attr]
        remote = [p for n in nodes for p in (n.pid, *descendants(n.pid))]
        assert len(remote) == 4  # two agents, a worker each
        head.kill()
        gone_in_time = not wait_gone(remote, THRESHOLD + 3.0)  # 3 s of slack for a loaded machine
        codes = [n.wait(timeout=10) for n in nodes]
    assert gone_in_time
    assert codes == [1, 1]
    assert all("no heartbeat from the head" in stderr(n) for n in nodes)


def test_the_served_heads_health_names_the_host_of_a_dead_remote_rank(tmp_path: Path) -> None:
    """The head as `wgc run --serve`: after a remote worker is SIGKILLed, /health is 503 naming the
    rank and its host."""
    import httpx

    plan = compiled(tmp_path, "bagel", "cpu3-hosts.toml")
    with Hosts(tmp_path, TIMEOUT) as hosts:
        hosts.node(plan, 1)
        hosts.node(plan, 2)
        head = hosts.start(str(plan), "--fake", "--serve", "127.0.0.1:0")
        ready = json.loads(head.stdout.readline())  # type: ignore[union-attr]
        url = ready["url"].rstrip("/")
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        pid = next(r["pid"] for r in ready["ranks"] if r["rank"] == 2)
        os.kill(pid, signal.SIGKILL)
        response = asyncio.run(_health_down(url))
    assert response.status_code == 503
    body = response.json()
    assert "rank 2" in body["error"]["message"] and "host node2 (127.0.0.4)" in body["error"]["message"]


async def _health_down(url: str) -> Any:
    """/health until it is not 200 (bounded: the agent reports a death within a tick)."""
    import httpx

    async with httpx.AsyncClient(timeout=10) as client:
        for _ in range(100):
            response = await client.get(f"{url}/health")
            if response.status_code != 200:
                return response
            await asyncio.sleep(0.1)
    return response
