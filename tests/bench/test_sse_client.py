"""The serving table's lean SSE client (bench/peer/sse_client.py) against a loopback server that writes
its answers the awkward ways a real server may: an event split across chunks, several events in one
chunk, a chunk extension, `[DONE]`, a second request on the same keep-alive connection, and an error
answered with Content-Length. And the load generator's chat path over it: TTFT, gaps, usage."""

from __future__ import annotations

import asyncio
import json

import pytest

from bench.peer.load import drive
from bench.peer.sse_client import HttpError, SseConnection

EVENTS = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
          {"choices": [{"index": 0, "delta": {"content": "ab"}}]},
          {"choices": [{"index": 0, "delta": {"content": "c\u00e9"}}]},
          {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}]


def _chunks() -> list[bytes]:
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in EVENTS) + b"data: [DONE]\n\n"
    cut = [0, 9, 80, 81, len(body) - 20, len(body)]  # the first event cut in two; the rest in odd places
    return [body[a:b] for a, b in zip(cut, cut[1:])]


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: list[dict]) -> None:
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            break
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        body = json.loads(await reader.readexactly(length))
        served.append(body)
        if body.get("fail"):
            error = b'{"error": "no"}'
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(error), error))
            continue
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i, chunk in enumerate(_chunks()):
            extension = b";x=1" if i == 1 else b""
            writer.write(b"%x%s\r\n%s\r\n" % (len(chunk), extension, chunk))
            await writer.drain()
            await asyncio.sleep(0.001)
        writer.write(b"0\r\n\r\n")
    writer.close()


async def _with_server(work) -> tuple[object, list[dict]]:
    served: list[dict] = []
    server = await asyncio.start_server(lambda r, w: _serve(r, w, served), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        return await asyncio.wait_for(work(url), 20), served
    finally:
        server.close()


def test_each_event_is_handed_over_once_in_order_and_the_connection_is_kept() -> None:
    async def work(url: str) -> list[list[dict]]:
        conn = SseConnection(url)
        got: list[list[dict]] = []
        for _ in range(2):
            got.append([])
            await conn.post("/v1/chat/completions", {"n": len(got)}, lambda e, now, g=got[-1]: g.append(e))
        first = conn._writer
        assert first is not None and not first.is_closing()
        conn.close()
        return got

    got, served = asyncio.run(_with_server(work))
    assert got == [EVENTS, EVENTS]
    assert served == [{"n": 1}, {"n": 2}]


def test_a_status_other_than_200_raises_with_the_body() -> None:
    async def work(url: str) -> None:
        await SseConnection(url).post("/v1/chat/completions", {"fail": True}, lambda e, now: None)

    with pytest.raises(HttpError, match=r"HTTP 400: b'\{\"error\": \"no\"\}'"):
        asyncio.run(_with_server(work))


def test_the_load_generator_counts_requests_tokens_and_first_chunks_over_it() -> None:
    async def work(url: str):
        return await asyncio.to_thread(drive, "chat", url, [{"i": i} for i in range(5)], 2)

    m, served = asyncio.run(_with_server(work))
    assert m.requests == 5 and m.tokens == 10 and len(served) == 5
    assert len(m.ttft) == 5 and len(m.gaps) == 5 * 2  # three events with choices a request: one first, two gaps
    assert m.texts == ["abc\u00e9"] * 5
