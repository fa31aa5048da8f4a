"""The parts of the OpenAPI document that FastAPI cannot infer: error answers, streamed bodies,
the multipart edit form, and the Bearer scheme when the server has an API key."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema
from wgc.runtime.http.serving.plan_schemas import size_pattern
from wgc.runtime.http.serving.schemas import ErrorResponse
from wgc.runtime.http.serving.service import Service

from wgc.plan.model import ParamSpec

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": text} for status, text in (
        (400, "bad input: invalid JSON, an unsupported parameter or value, unreadable media"),
        (401, "missing or wrong API key"),
        (404, "unknown model, or a route this model's plan cannot serve (the message says why)"),
        (413, "body or media too large"),
        (422, "the body does not match the schema, or a component failed on it"),
        (429, "over capacity: retry after the Retry-After header"),
        (503, "not ready, a rank is down, or shutting down"),
        (504, "the request ran past its timeout"),
    )
}
_TEXT = {"schema": {"type": "string"}}
_EVENT = {"schema": {"type": "object", "required": ["data"], "properties": {
    "data": {"type": "string", "description": "one JSON object, or [DONE] to end a chat stream"},
    "event": {"type": "string"}}}}
SSE = {"content": {"text/event-stream": _EVENT}, "description": "with stream: true, SSE chunks then `data: [DONE]`"}
BINARY = {"content": {"audio/wav": {"schema": {"type": "string", "format": "binary"}},
                      "audio/pcm": {"schema": {"type": "string", "format": "binary"}},
                      "text/event-stream": _EVENT},
          "description": "audio bytes as they are produced (or SSE events with stream_format: sse)"}
NDJSON = {"content": {"application/x-ndjson": _TEXT, "application/json": {"schema": {"type": "object"}}},
          "description": "NDJSON events (start, output..., done or error); one JSON object with stream: false"}
_JSON_TYPES = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}


def multipart_edit(service: Service) -> dict[str, Any]:
    """The edit form: OpenAI's fields, and each plan param as a `params[NAME]` field (the multipart
    convention for an object), typed and bounded as the plan declares it."""
    props: dict[str, Any] = {
        "image": {"type": "string", "format": "binary", "description": "the image to edit (PNG, JPEG, WebP)"},
        "prompt": {"type": "string", "minLength": 1},
        "model": {"type": "string"},
        "n": {"type": "integer", "minimum": 1, "maximum": service.max_choices},
        "size": {"type": "string", "pattern": size_pattern(service.caps)},
        "response_format": {"type": "string", "enum": ["b64_json"]},
        "output_format": {"type": "string", "enum": ["png"]},
        "user": {"type": "string"},
        "timeout": {"type": "number", "minimum": 1},
    }
    if "seed" in service.caps.params and service.caps.params["seed"].type == "int":
        props["seed"] = _param_schema(service.caps.params["seed"])
    for p in service.plan.params:
        props[f"params[{p.name}]"] = _param_schema(p)
    props["model"]["examples"] = [service.plan.model]
    schema = {"type": "object", "required": ["model", "prompt", "image"], "properties": props,
              "additionalProperties": False}
    encoding = {"image": {"contentType": "image/png, image/jpeg, image/webp"}}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema,
                                                                                  "encoding": encoding}}}}


def _param_schema(p: ParamSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"type": _JSON_TYPES.get(p.type, "string")}
    if p.choices is not None:
        out["enum"] = list(p.choices)
    if p.low is not None:
        out["minimum"] = p.low
    if p.high is not None:
        out["maximum"] = p.high
    return out


def _exact(doc: dict[str, Any], service: Service) -> None:
    """FastAPI's OpenAPI model holds every bound as a float, so an integer bound past 2**53 comes out
    wrong (a seed's 9223372036854775807 as 2**63, which the route refuses): the request schemas and the
    edit form again as pydantic and the plan give them, exactly."""
    m = service.models
    _, top = models_json_schema([(model, "validation") for model in (m.params, m.chat, m.chat_audio, m.speech,
                                                                     m.images, m.generate)],
                                ref_template="#/components/schemas/{model}")
    schemas = doc.get("components", {}).get("schemas", {})
    schemas.update({name: schema for name, schema in top.get("$defs", {}).items() if name in schemas})
    edit = doc.get("paths", {}).get("/v1/images/edits", {}).get("post")
    if edit is not None:
        edit["requestBody"] = multipart_edit(service)["requestBody"]


def customise(app: FastAPI, service: Service) -> dict[str, Any]:
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    _exact(doc, service)
    if service.options.api_key:
        doc.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
            "type": "http", "scheme": "bearer"}
        for path, ops in doc.get("paths", {}).items():
            if path.startswith("/v1/"):
                for op in ops.values():
                    op["security"] = [{"bearer": []}]
    app.openapi_schema = doc
    return doc
