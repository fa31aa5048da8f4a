"""GET /: a small page for trying the served plan in a browser (the files under static/).

The page reads the model card (/v1/models) and shows a form for each route the plan serves: type
text and hear it (speech), type a prompt and see the image, chat with an image or a WAV attached
(the SSE stream shown as it arrives), and the native route's NDJSON events. An error from the
server is shown as its text. The API key is a field of the page, sent as a Bearer header.

Static files only, shipped as package data: no build step, nothing fetched from anywhere else;
the Content-Security-Policy lets the page reach only this server. Like /docs, the page itself
needs no key: the routes it calls do.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.responses import Response

FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
         "style.css": "text/css; charset=utf-8"}
POLICY = ("default-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self'; "
          "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


class Page:
    """The static files, read once when the app is built."""

    def __init__(self) -> None:
        folder = resources.files("wgc.runtime.http.serving") / "static"
        self.files = {name: (folder / name).read_bytes() for name in FILES}

    def response(self, name: str) -> Response:
        if name not in self.files:
            raise HTTPException(404)  # answered in the OpenAI error shape, as every other unknown path
        return Response(self.files[name], media_type=FILES[name],
                        headers={"Content-Security-Policy": POLICY, "Cache-Control": "no-cache",
                                 "X-Content-Type-Options": "nosniff"})


def add_routes(app: FastAPI) -> None:
    """GET / and GET /static/{name}, left out of the OpenAPI document (they are not the API)."""
    page = Page()

    async def index() -> Response:
        return page.response("index.html")

    async def static(name: str) -> Response:
        return page.response(name)

    app.add_api_route("/", index, methods=["GET"], include_in_schema=False)
    app.add_api_route("/static/{name}", static, methods=["GET"], include_in_schema=False)
