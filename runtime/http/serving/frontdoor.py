"""The ASGI layer in front of every route: API key, body size, and per-route request metrics.

`/v1/*` needs `Authorization: Bearer <key>` when the server has a key (health, metrics and the
OpenAPI document stay open, for probes and scrapers). A body larger than the limit is refused
with 413 before it is read when its Content-Length says so, and as soon as it passes the limit
otherwise. Every answer is counted by route (the path template, or `other` for unknown paths,
so a scanner cannot blow up the label set) and status.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from wgc.runtime.http.serving.errors import error_body
from wgc.runtime.http.serving.service import Service
from wgc.runtime.http.serving.streaming import json_bytes


class FrontDoor:
    def __init__(self, app: ASGIApp, service: Service, known: Callable[[], set[str]]) -> None:
        self.app = app
        self.service = service
        self.known = known  # the app's route paths (read lazily: routes are added after the middleware)
        key = service.options.api_key
        self.expected = f"Bearer {key}".encode() if key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        start = time.monotonic()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            refusal = self._refuse(scope)
            if refusal is not None:
                await _answer(sending, *refusal)
                return
            await self.app(scope, self._limited(receive), sending)
        finally:
            route = path if path in self.known() else "other"
            self.service.metrics.requests.labels(route, str(status[0])).inc()
            self.service.metrics.duration.labels(route).observe(time.monotonic() - start)

    def _refuse(self, scope: Scope) -> tuple[int, bytes, dict[str, str]] | None:
        headers = dict(scope["headers"])
        if self.expected is not None and scope["path"].startswith("/v1/"):
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                return 401, json_bytes(error_body("invalid_api_key", "a valid `Authorization: Bearer <key>` header "
                                                                     "is required")), {"WWW-Authenticate": "Bearer"}
        length = headers.get(b"content-length", b"")
        limit = self.service.limits.max_body_bytes
        if length.isdigit() and int(length) > limit:
            return 413, json_bytes(error_body("request_too_large", f"the body is {int(length):,} bytes, more than "
                                              f"the {limit:,} this server accepts (the server's limit "
                                              "`max_body_bytes`)")), {}
        return None

    def _limited(self, receive: Receive) -> Receive:
        limit = self.service.limits.max_body_bytes
        seen = [0]

        async def limited() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen[0] += len(message.get("body", b""))
                if seen[0] > limit:
                    raise HTTPException(413, f"the body is more than the {limit:,} bytes this server accepts "
                                             "(the server's limit `max_body_bytes`)")
            return message

        return limited


async def _answer(send: Send, status: int, body: bytes, headers: dict[str, str]) -> None:
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
