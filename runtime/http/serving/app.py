"""The FastAPI application of one served plan: its routes, error handlers and OpenAPI document.

Routes whose request models the plan decides (plan_schemas.py) are registered with those models,
so validation and the OpenAPI document follow the plan. A route the plan cannot serve is left
out of the document and answers 404 with the reason. Every error, FastAPI's and Starlette's
included, leaves in the OpenAI error shape with a code from errors.CODES.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from wgc.runtime.http.native import generate, info, policy, world_model
from wgc.runtime.http.openai import chat, completions, images, speech
from wgc.runtime.http.serving import page
from wgc.runtime.http.serving.errors import ApiError, error_body
from wgc.runtime.http.serving.frontdoor import FrontDoor
from wgc.runtime.http.serving.openapi import BINARY, ERRORS, NDJSON, SSE, customise, multipart_edit
from wgc.runtime.http.serving.schemas import ChatCompletion, HealthStatus, ImagesResponse, ModelCard, ModelList
from wgc.runtime.http.serving.service import Service
from wgc.runtime.http.serving.streaming import ClientGone, json_response
from wgc.runtime.http.serving.validation import text_error, validation_error

from wgc import __version__

log = logging.getLogger("wgc.http")
Endpoint = Callable[[Service, Request, Any], Awaitable[Response]]
INLINE_BYTES = 64 * 1024  # a body this small is checked for text on the event loop (a thread hop costs more)
_HTTP_CODES = {400: "invalid_json", 401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed",
               413: "request_too_large", 422: "validation_error"}


def build_app(service: Service) -> FastAPI:
    app = FastAPI(title=f"wgc: {service.plan.model}", version=__version__, docs_url="/docs", redoc_url=None,
                  description="OpenAI-compatible and native routes of one compiled plan (see docs/http.md).")
    app.state.service = service
    _handlers(app, service)
    _routes(app, service)
    page.add_routes(app)
    app.openapi = lambda: customise(app, service)  # type: ignore[method-assign]
    app.add_middleware(FrontDoor, service=service, known=lambda: {r.path for r in app.routes})  # type: ignore[arg-type]
    return app


def _post(app: FastAPI, service: Service, path: str, route: str, endpoint: Endpoint, model: type,
          response: dict[int | str, Any], **kw: Any) -> None:
    async def handler(request: Request, body: Any) -> Response:
        length = request.headers.get("content-length", "")
        small = length.isdigit() and int(length) < INLINE_BYTES
        err = text_error(body) if small else await service.offload.run(text_error, body)
        if err is not None:  # before any route code: no tokenizer or encoder meets a lone surrogate
            raise err
        return await endpoint(service, request, body)

    handler.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request),
        inspect.Parameter("body", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=model),
    ])
    handler.__name__ = route
    app.add_api_route(path, handler, methods=["POST"], include_in_schema=service.caps.unsupported(route) is None,
                      responses={**ERRORS, **response}, **kw)


def _routes(app: FastAPI, service: Service) -> None:
    m = service.models
    _post(app, service, "/v1/chat/completions", "chat", chat.chat_completions, m.chat, {200: SSE},
          response_model=ChatCompletion, summary="Chat completion (SSE when stream is true)")
    _post(app, service, "/v1/completions", "completions", completions.completions, completions.request_model(service),
          {200: SSE}, response_model=completions.Completion, summary="Text completion (SSE when stream is true)")
    _post(app, service, "/v1/audio/speech", "speech", speech.speech, m.speech, {200: BINARY},
          response_class=Response, summary="Text to speech, streamed as it is produced")
    _post(app, service, "/v1/images/generations", "images", images.generations, m.images, {},
          response_model=ImagesResponse, summary="Images from a prompt (PNG, b64_json)")
    _post(app, service, "/v1/generate", "generate", generate.generate, m.generate, {200: NDJSON},
          summary="Native route: any walk, any modality, NDJSON events")
    rollout, plan = world_model.request_models(service)
    _post(app, service, "/v1/world_model/rollout", "world_model", world_model.rollout, rollout, {},
          summary="World model: frames and actions in, predicted embeddings out")
    _post(app, service, "/v1/world_model/plan", "world_model", world_model.plan, plan, {},
          summary="World model: plan actions from frames to a goal image; the trajectory and its cost")
    _post(app, service, "/v1/policy/actions", "policy", policy.actions, policy.request_model(service), {},
          summary="Robot policy: camera images, the state and the task in; one action chunk out")

    async def image_edits(request: Request) -> Response:
        return await images.edits(service, request)

    app.add_api_route("/v1/images/edits", image_edits, methods=["POST"], response_model=ImagesResponse,
                      include_in_schema=service.caps.unsupported("edits") is None, responses=ERRORS,
                      openapi_extra=multipart_edit(service), summary="Edit images (multipart form), PNG b64_json out")

    async def list_models() -> Response:
        return info.models(service)

    async def get_model(model_id: str) -> Response:
        return info.model(service, model_id)

    async def health() -> Response:
        return await info.health(service)

    async def metrics() -> Response:
        return await info.metrics(service)

    app.add_api_route("/v1/models", list_models, methods=["GET"], response_model=ModelList, responses=ERRORS)
    app.add_api_route("/v1/models/{model_id}", get_model, methods=["GET"], response_model=ModelCard,
                      responses=ERRORS)
    app.add_api_route("/health", health, methods=["GET"], response_model=HealthStatus, responses=ERRORS,
                      summary="200 while every rank is alive; 503 naming the rank that is not")
    app.add_api_route("/metrics", metrics, methods=["GET"], response_class=Response,
                      responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
                      summary="Prometheus metrics")


def _handlers(app: FastAPI, service: Service) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, err: ApiError) -> Response:
        return json_response(err.body(), err.status, err.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, err: RequestValidationError) -> Response:
        return api_error_response(validation_error(service.plan, err.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, err: HTTPException) -> Response:
        code = _HTTP_CODES.get(err.status_code, "invalid_request")
        message = err.detail if isinstance(err.detail, str) else str(err.detail)
        if err.status_code == 404:
            message = "no such path (see /openapi.json for this server's routes)"
        return json_response(error_body(code, message), err.status_code, dict(err.headers or {}))

    @app.exception_handler(ClientGone)
    async def gone(_: Request, err: ClientGone) -> Response:
        return Response(status_code=499)  # nobody reads it: the client has left

    @app.exception_handler(Exception)
    async def bug(_: Request, err: Exception) -> Response:
        log.exception("wgc http: unexpected error")
        return json_response(error_body("internal_error", f"internal error: {type(err).__name__}"), 500)


def api_error_response(err: ApiError) -> Response:
    return json_response(err.body(), err.status, err.headers)
