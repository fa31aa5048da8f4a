"""Admission control and rank health through a real server: 429 beyond capacity, 503 when a rank dies."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.http.server import Server, alive

SLOW = {"model": "toy", "messages": [{"role": "user", "content": "slow " * 10}], "params": {"delay_ms": 20}}


@pytest.fixture(scope="module")
def small(toy_plan: Path) -> Iterator[Server]:
    """Two requests at once, two waiting."""
    server = Server(toy_plan, "--max-running", "2", "--max-queued", "2")
    yield server
    server.stop()


def test_a_burst_beyond_capacity_gets_429_with_retry_after(small: Server) -> None:
    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=small.url, timeout=30) as client:
            return await asyncio.gather(*[client.post("/v1/chat/completions", json=SLOW) for _ in range(12)])

    responses = asyncio.run(burst())
    codes = sorted(r.status_code for r in responses)
    refused = [r for r in responses if r.status_code == 429]
    assert codes.count(200) >= 4 and len(refused) >= 4 and set(codes) == {200, 429}
    for r in refused:
        assert r.json()["error"]["code"] == "over_capacity"
        assert int(r.headers["retry-after"]) >= 1
    for r in responses:
        if r.status_code == 200:
            assert r.json()["choices"][0]["message"]["content"] == "Echo: " + "slow " * 10
    health = httpx.get(f"{small.url}/health").json()
    assert health["requests_in_flight"] == 0
    assert health["capacity"] == {"running": 2, "queued": 2, "source": "option",
                                  "detail": "--max-running / --max-queued"}  # the flags win over the KV pool


def _settled_health(server: Server) -> dict:
    """/health once every rank answers and holds no instance (hang guard: 10 s)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        body = httpx.get(f"{server.url}/health").json()
        if body["status"] == "ok" and body["ranks"][0]["counters"]["instances"] == 0:
            break
        time.sleep(0.05)
    return body


def _cancelled(server: Server) -> float:
    (line,) = [ln for ln in httpx.get(f"{server.url}/metrics").text.splitlines()
               if ln.startswith("wgc_requests_cancelled_total ")]
    return float(line.split()[1])


def test_a_request_timeout_cancels_the_request(small: Server) -> None:
    steps = 200  # decode steps of 20 ms each (the reply is longer): about 4 s to run to the end
    long = {**SLOW, "messages": [{"role": "user", "content": "slow " * 40}], "max_tokens": steps, "timeout": 1}
    runs_before, cancelled_before = _settled_health(small)["ranks"][0]["counters"]["runs"], _cancelled(small)
    r = httpx.post(f"{small.url}/v1/chat/completions", timeout=60, json=long)  # 60 s: only a hang guard
    assert r.status_code == 504 and r.json()["error"]["code"] == "request_timeout"
    body = _settled_health(small)
    counters = body["ranks"][0]["counters"]
    assert body["requests_in_flight"] == 0 and counters["instances"] == 0 and counters["llm.kv_pages_used"] == 0
    # Cancelled on the rank when its timeout passed, not answered 504 after running to its end.
    assert counters["runs"] - runs_before < steps
    assert _cancelled(small) - cancelled_before == 1


def test_health_turns_503_naming_the_rank_when_a_worker_is_killed(small: Server) -> None:
    assert httpx.get(f"{small.url}/health").status_code == 200
    (pid,) = small.worker_pids
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while httpx.get(f"{small.url}/health").status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    r = httpx.get(f"{small.url}/health")
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "rank_down"
    assert r.json()["error"]["message"].startswith("rank 0 is down: killed by SIGKILL")
    chat = httpx.post(f"{small.url}/v1/chat/completions", json=SLOW)
    assert chat.status_code == 503 and chat.json()["error"]["code"] == "rank_down"
    assert not alive(pid)
