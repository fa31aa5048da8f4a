"""50 streaming requests, half of them dropped by their clients mid-stream: afterwards every rank is
back to its baseline (program counters, stream buffers, KV pages), and the other half came whole."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.http.server import Server

LEAK_COUNTERS = ("instances", "requests", "mailbox", "stream_ends", "llm.requests", "llm.kv_pages_used",
                 "llm.kv_requests", "llm.kv_labels")
N, LONG_STEPS = 50, 128


def health(server: Server) -> dict[str, Any]:
    """The health report once every rank answers (a rank deep in a batch may miss a probe)."""
    deadline = time.monotonic() + 15
    while (body := httpx.get(f"{server.url}/health").json()).get("status") != "ok" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert body.get("status") == "ok", body
    return body


def counters(server: Server) -> dict[str, int]:
    body = health(server)
    c = body["ranks"][0]["counters"]
    return {k: c[k] for k in LEAK_COUNTERS} | {"in_flight": body["requests_in_flight"]}


def expected(i: int) -> str:
    return f"Echo: request {i} " + "words " * 6


async def one(client: httpx.AsyncClient, i: int) -> tuple[bool, bytes]:
    """Request i: chat on even i, speech on odd; every second pair is dropped after its first chunk."""
    drop = i % 4 >= 2
    text = f"request {i} " + ("long " * 40 if drop else "words " * 6)  # a dropped one would run 128 steps
    params = {"delay_ms": 10, "max_tokens": LONG_STEPS}
    if i % 2 == 0:
        path, body = "/v1/chat/completions", {"model": "toy", "messages": [{"role": "user", "content": text}],
                                              "stream": True, "params": params}
    else:
        path, body = "/v1/audio/speech", {"model": "toy", "input": text, "voice": "alto",
                                          "response_format": "pcm", "params": params}
    got = b""
    async with client.stream("POST", path, json=body) as r:
        assert r.status_code == 200
        async for chunk in r.aiter_raw():
            got += chunk
            if drop:
                return True, got  # leaving the block closes the connection mid-stream
    return False, got


def burst(server: Server, headers: dict[str, str]) -> list[tuple[bool, bytes]]:
    async def run() -> list[tuple[bool, bytes]]:
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30,
                                     limits=httpx.Limits(max_connections=100)) as client:
            return await asyncio.gather(*[one(client, i) for i in range(N)])

    return asyncio.run(run())


def settled(server: Server, baseline: dict[str, int]) -> dict[str, int]:
    deadline = time.monotonic() + 15
    while (now := counters(server)) != baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


def cancelled(server: Server) -> float:
    """Requests the server has cancelled before their end (its /metrics)."""
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith("wgc_requests_cancelled_total "):
            return float(line.split()[1])
    raise AssertionError("no wgc_requests_cancelled_total in /metrics")


def test_disconnected_streams_free_everything_on_every_rank(toy: Server, headers: dict[str, str]) -> None:
    baseline, cancelled_before = counters(toy), cancelled(toy)
    results = burst(toy, headers)
    assert sum(dropped for dropped, _ in results) == N // 4 * 2
    for i, (dropped, got) in enumerate(results):
        if dropped:
            continue
        if i % 2 == 0:
            assert got.endswith(b"data: [DONE]\n\n") and b'"finish_reason":"stop"' in got
        else:
            assert len(got) == 2 * 20 * len(expected(i).encode())
    assert settled(toy, baseline) == baseline
    metrics = httpx.get(f"{toy.url}/metrics").text
    assert "wgc_requests_running 0.0" in metrics and "wgc_queue_depth 0.0" in metrics
    # Freed because each dropped request was cancelled, not because it ran to its end (a dropped one
    # has over a second of decoding left when its client leaves: it cannot end first).
    assert cancelled(toy) - cancelled_before == N // 4 * 2


def answered(server: Server, route: str) -> dict[str, float]:
    """How many requests to `route` the server has answered, by status (its /metrics)."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith("wgc_http_requests_total{") and f'route="{route}"' in line:
            status = line.split('status="', 1)[1].split('"', 1)[0]
            out[status] = float(line.rsplit(" ", 1)[1])
    return out


def test_a_client_that_gives_up_on_a_whole_answer_has_its_request_cancelled(toy: Server,
                                                                           headers: dict[str, str]) -> None:
    route = "/v1/chat/completions"
    baseline, before, cancelled_before = counters(toy), answered(toy, route), cancelled(toy)
    runs_before = health(toy)["ranks"][0]["counters"]["runs"]
    slow = {"model": "toy", "messages": [{"role": "user", "content": "long " * 40}],
            "params": {"delay_ms": 20, "max_tokens": LONG_STEPS}}  # 128 decode steps of 20 ms each
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{toy.url}{route}", headers=headers, json=slow, timeout=0.5)
    # However long the run takes, the server answers the request once, when it ends (hang guard: 15 s).
    deadline = time.monotonic() + 15
    while (now := answered(toy, route)) == before and time.monotonic() < deadline:
        time.sleep(0.02)
    # Ended because the client left (499, the route's work cancelled), not by running to its end (200).
    assert {k: v - before.get(k, 0) for k, v in now.items() if v != before.get(k, 0)} == {"499": 1.0}
    assert settled(toy, baseline) == baseline
    assert cancelled(toy) - cancelled_before == 1
    # And the ranks stopped: a run to the end takes a prefill, a first token and LONG_STEPS decodes.
    assert health(toy)["ranks"][0]["counters"]["runs"] - runs_before < LONG_STEPS


def test_a_disconnect_stops_the_work_on_the_ranks(toy: Server, headers: dict[str, str]) -> None:
    runs_before = health(toy)["ranks"][0]["counters"]["runs"]
    baseline = counters(toy)
    burst(toy, headers)
    assert settled(toy, baseline) == baseline
    runs = health(toy)["ranks"][0]["counters"]["runs"] - runs_before
    # the 26 whole requests take under 80 runs each; a dropped one would take over LONG_STEPS
    assert runs < 26 * 80 + 24 * LONG_STEPS // 2  # the dropped requests were cancelled, not run to their end
