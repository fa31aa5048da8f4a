"""Serving a plan over HTTP: bind, start uvicorn at once, start the ranks, report ready, stop cleanly.

The socket is bound before anything loads, so a busy port fails in a second, not after the ranks
have loaded. Routes answer 503 `not_ready` while the ranks load; `on_ready` is called only once
every rank reported ready (components loaded, CUDA graphs captured). Stopping (the caller cancels
`serve`): new requests get 503, requests in flight are cancelled on every rank, uvicorn drains its
connections, every worker process is stopped.

uvicorn's own signal handling is switched off: the caller owns SIGINT and SIGTERM.

Parser and loop: uvicorn parses HTTP/1.1 with httptools (llhttp, in C) when it is installed and
`wgc run --serve` runs on uvloop's event loop (`loop_factory`): in a profile of the server under a
trivial walk, h11's pure-Python parsing and framing and asyncio's selector loop were the largest
shares of the server's own CPU per request after the socket writes. WGC_HTTP_PLAIN=1 keeps h11
and asyncio's loop (the bench's baseline); without the packages both fall back by themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from wgc.runtime.api import StartupLine
from wgc.runtime.http.serving.app import build_app
from wgc.runtime.http.serving.service import ServeOptions, Service

from wgc import settings
from wgc.plan.model import Plan

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @staticmethod
    def parse(text: str) -> Address:
        """`[host]:port`: `:8000` binds loopback; `0.0.0.0:8000`, `[::1]:8000`; port 0 picks a free one."""
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"--serve {text!r}: expected [host]:port, e.g. :8000 or 0.0.0.0:8000")
        host = host.strip("[]") or LOOPBACK
        return Address(host, int(port))

    def url(self, port: int) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}"


def _no_cut_off_line(record: logging.LogRecord) -> bool:
    """uvicorn's line for a response that never completed: streaming.stream_response cuts off a raw-audio
    stream on purpose when it fails, and has logged why in its own line."""
    return record.msg != "ASGI callable returned without completing response."


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the caller handles signals
        yield


def http_parser() -> str:
    """uvicorn's HTTP implementation: "httptools" when installed (unless WGC_HTTP_PLAIN), else "h11"."""
    return "httptools" if importlib.util.find_spec("httptools") and not settings.http_plain() else "h11"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop for serving when installed (unless WGC_HTTP_PLAIN); None: asyncio's own."""
    if settings.http_plain() or importlib.util.find_spec("uvloop") is None:
        return None
    import uvloop

    return uvloop.new_event_loop


def bind(address: Address) -> socket.socket:
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says it is TCP; without it every keep-alive answer waits ~40 ms (Nagle
    # against delayed ACKs).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.host, address.port))
        sock.listen(2048)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def serve(plan: Plan, address: Address, options: ServeOptions, on_ready: Callable[[dict[str, Any]], None],
                on_progress: Callable[[StartupLine], None] | None = None) -> None:
    """Serve until cancelled. OSError when the address cannot be bound; StartError when a rank fails.
    `on_progress` gets the ranks' start-up lines (Runtime.start)."""
    sock = bind(address)
    service = Service(plan, options)
    logging.getLogger("uvicorn.error").addFilter(_no_cut_off_line)
    config = uvicorn.Config(build_app(service), log_config=None, access_log=False, lifespan="off",
                            timeout_graceful_shutdown=5, timeout_keep_alive=30, http=http_parser())
    server = _Server(config)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]), name="wgc-http")
    try:
        runtime = await service.start(on_progress)
        port = sock.getsockname()[1]
        ranks = [{"rank": r.rank, "pid": runtime.pids[r.rank], "device": r.device} for r in plan.ranks]
        on_ready({"event": "ready", "model": plan.model, "fake": options.fake, "url": address.url(port),
                  "routes": service.caps.routes(), "capacity": service.sizing.as_dict(), "ranks": ranks})
        await asyncio.shield(task)
    finally:
        await service.close()
        server.should_exit = True
        await asyncio.wait([task], timeout=10)
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        sock.close()
