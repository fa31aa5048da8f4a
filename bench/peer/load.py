"""One load generator for both servers: `concurrency` streams at a time through the OpenAI chat API
(streamed, include_usage; a lean keep-alive client, sse_client.py), or /v1/audio/speech for Orpheus
(httpx); per request the time to the first chunk and the gaps between chunks, and for the run
requests per second and tokens per second."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.peer.sse_client import SseConnection


@dataclass
class Measured:
    wall_s: float = 0.0
    requests: int = 0
    tokens: int = 0
    audio_s: float = 0.0
    ttft: list[float] = field(default_factory=list)  # first chunk (chat) or first audio byte (speech)
    gaps: list[float] = field(default_factory=list)  # between consecutive chunks of one stream
    texts: list[str] = field(default_factory=list)

    def pct(self, values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]

    def summary(self) -> dict[str, float]:
        return {"req_s": self.requests / self.wall_s, "tok_s": self.tokens / self.wall_s,
                "audio_per_wall": self.audio_s / self.wall_s,
                "ttft_p50": self.pct(self.ttft, 0.5), "ttft_p99": self.pct(self.ttft, 0.99),
                "itl_p50": self.pct(self.gaps, 0.5), "itl_p99": self.pct(self.gaps, 0.99),
                "ttft_mean": statistics.fmean(self.ttft) if self.ttft else float("nan")}


async def _chat_one(conn: SseConnection, body: dict[str, Any], m: Measured) -> None:
    start = time.perf_counter()
    last: list[float] = []
    text: list[str] = []

    def on_event(chunk: Any, now: float) -> None:
        if chunk.get("usage"):
            m.tokens += int(chunk["usage"]["completion_tokens"])
        if not chunk.get("choices"):
            return
        if last:
            m.gaps.append(now - last[0])
        else:
            m.ttft.append(now - start)
        last[:] = [now]
        text.append(chunk["choices"][0]["delta"].get("content") or "")

    await conn.post("/v1/chat/completions", body, on_event)
    m.requests += 1
    m.texts.append("".join(text))


async def _speech_one(client: httpx.AsyncClient, url: str, body: dict[str, Any], m: Measured) -> None:
    start = time.perf_counter()
    size, first = 0, None
    async with client.stream("POST", f"{url}/v1/audio/speech", json=body) as r:
        r.raise_for_status()
        rate = int(r.headers.get("x-sample-rate", "24000"))
        async for piece in r.aiter_bytes():
            if piece and first is None:
                first = time.perf_counter() - start
            size += len(piece)
    m.requests += 1
    m.audio_s += size / 2 / rate
    if first is not None:
        m.ttft.append(first)


async def _drive(kind: str, url: str, bodies: list[dict[str, Any]], concurrency: int) -> Measured:
    m = Measured()
    if kind == "chat":  # `concurrency` streams, each on its own keep-alive connection (sse_client.py)
        todo = iter(bodies)

        async def stream() -> None:
            conn = SseConnection(url)
            try:
                for body in todo:
                    await _chat_one(conn, body, m)
            finally:
                conn.close()

        start = time.perf_counter()
        await asyncio.gather(*[stream() for _ in range(min(concurrency, len(bodies)))])
        m.wall_s = time.perf_counter() - start
        return m
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        async def run(body: dict[str, Any]) -> None:
            async with gate:
                await _speech_one(client, url, body, m)

        start = time.perf_counter()
        await asyncio.gather(*[run(b) for b in bodies])
        m.wall_s = time.perf_counter() - start
    return m


def drive(kind: str, url: str, bodies: list[dict[str, Any]], concurrency: int) -> Measured:
    """Send every body, at most `concurrency` at once; `kind` is chat or speech."""
    return asyncio.run(_drive(kind, url, bodies, concurrency))
