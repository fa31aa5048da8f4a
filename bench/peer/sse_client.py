"""A lean HTTP/1.1 client for the serving table's chat streams: one keep-alive connection per stream,
the request pre-encoded, the chunked SSE answer split into events as it arrives.

Why not httpx: at 64 streams the load generator is one Python process reading every token's event
of both servers, and httpx's per-chunk machinery (the response and line iterators, the pool) made
it the slowest party: in a timeline of a 64-stream run, the client finished reading answers 1.4 s
after the server had sent their last byte, and its next requests reached the server up to 0.9 s
after it began them, so TTFT and req/s measured the client. Here a chunk costs a buffer split and
one JSON decode an event. Both servers are driven by the same client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import msgspec

_decode = msgspec.json.decode


class HttpError(RuntimeError):
    """A status other than 200, with the start of the body."""


class SseConnection:
    """One keep-alive connection to `url`'s host; `post(path, body, on_event)` streams one answer."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self._reader, self._writer

    async def post(self, path: str, body: dict[str, Any], on_event: Callable[[Any, float], None]) -> None:
        """POST `body` as JSON; `on_event(obj, now)` for each SSE `data:` event but `[DONE]`, with the
        time (time.perf_counter) its bytes were read."""
        payload = msgspec.json.encode(body)
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
        reader, writer = await self._open()
        writer.write(head + payload)
        status, headers = await _head(reader)
        if headers.get("transfer-encoding", "").lower() != "chunked":
            data = await reader.readexactly(int(headers.get("content-length", "0")))
            if status != 200:
                raise HttpError(f"HTTP {status}: {data[:300]!r}")
            _events(data + b"\n\n", on_event, time.perf_counter())
            return
        if status != 200:
            raise HttpError(f"HTTP {status}: {(await _chunked_all(reader))[:300]!r}")
        pending = b""
        while True:
            size = int((await reader.readline()).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readline()  # the empty trailer line
                break
            chunk = await reader.readexactly(size + 2)
            pending = _events(pending + chunk[:-2], on_event, time.perf_counter())
        if headers.get("connection", "").lower() == "close":
            self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    return status, headers


async def _chunked_all(reader: asyncio.StreamReader) -> bytes:
    out = b""
    while True:
        size = int((await reader.readline()).split(b";", 1)[0], 16)
        if size == 0:
            await reader.readline()
            return out
        out += (await reader.readexactly(size + 2))[:-2]


def _events(buffer: bytes, on_event: Callable[[Any, float], None], now: float) -> bytes:
    """Every complete SSE event in `buffer` handed to `on_event`; returns the incomplete rest."""
    *complete, rest = buffer.split(b"\n\n")
    for event in complete:
        for line in event.split(b"\n"):
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                on_event(_decode(line[6:]), now)
    return rest
