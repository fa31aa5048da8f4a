"""The serving fast paths: a small request is prepared on the event loop and a large one on a worker
thread (offload.py), httptools and uvloop are what `wgc run --serve` uses when installed, and
WGC_HTTP_PLAIN=1 takes every one of them back (the bench's baseline)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from starlette.requests import Request
from wgc.runtime.http.admission.offload import INLINE_BODY_BYTES, Offload
from wgc.runtime.http.serving.server import http_parser, loop_factory

from wgc.cli.run_cmd import _loop_factory


def request_of(length: int | None) -> Request:
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers})


def thread_of(offload: Offload, request: Request | None) -> str:
    async def main() -> str:
        return await offload.run(lambda: threading.current_thread().name, request=request)

    return asyncio.run(main())


def test_a_small_body_is_prepared_on_the_loop_and_a_large_one_on_a_thread() -> None:
    offload = Offload()
    here = threading.current_thread().name
    assert thread_of(offload, request_of(200)) == here
    assert thread_of(offload, request_of(INLINE_BODY_BYTES)) != here  # at the bound: a thread
    assert thread_of(offload, request_of(None)) != here  # no Content-Length (chunked): a thread
    assert thread_of(offload, None) != here  # work not tied to a body (e.g. a PNG to encode)


def test_plain_serving_prepares_every_request_on_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WGC_HTTP_PLAIN", "1")
    assert thread_of(Offload(), request_of(200)) != threading.current_thread().name
    assert http_parser() == "h11" and loop_factory() is None and _loop_factory(":0") is None


def test_serving_uses_httptools_and_uvloop_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WGC_HTTP_PLAIN", raising=False)
    httptools = pytest.importorskip("httptools")
    uvloop = pytest.importorskip("uvloop")
    assert httptools is not None and http_parser() == "httptools"
    assert loop_factory() is uvloop.new_event_loop and _loop_factory(":0") is uvloop.new_event_loop
    assert _loop_factory(None) is None  # `wgc run` without --serve keeps asyncio's loop
    loop = _loop_factory(":0")()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
