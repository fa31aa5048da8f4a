"""POST /v1/generate: the native route, for any walk and any modality of any plan.

The body is the runtime's request (params, task, parts, named inputs, outputs, think) in JSON;
the answer is NDJSON, one typed event a line, as they happen:

    {"type": "start", "id": "gen-...", "model": "toy"}
    {"type": "output", "modality": "text", "text": "é", "data": 169, "shape": [], "dtype": "int64", ...}
    {"type": "output", "modality": "action", "data": [[...]], "shape": [4, 2], "dtype": "float32", ...}
    {"type": "done", "outputs": 2, "t": 0.012, "t_first": 0.004}

A text output carries its token ids in `data` and the text they complete in `text` (UTF-8-safe,
as in chat). An error after the start line is an `{"type": "error", "error": {...}}` line.
`stream: false` answers one JSON object with the same events in a list.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from wgc.runtime.api import DoneEvent, OutputEvent, RequestEvent
from wgc.runtime.http.admission.lease import Lease
from wgc.runtime.http.admission.limits import MediaBudget, check_chars, check_count
from wgc.runtime.http.native.values import decoded, value_in, value_out
from wgc.runtime.http.serving.capabilities import TEXT_TYPES
from wgc.runtime.http.serving.service import Service
from wgc.runtime.http.serving.streaming import (
    guarded,
    json_bytes,
    json_response,
    only_events,
    opened,
    stream_response,
)
from wgc.runtime.http.text.choice import token_ids
from wgc.runtime.http.text.detok import Detokenizer
from wgc.runtime.http.text.prompt import count_prompt


def _inputs(service: Service, body: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The runtime request (off the event loop): values read, media admitted together then decoded,
    the prompt's text counted and checked (admission/context.py) before any medium is decoded."""
    budget = MediaBudget(service.limits)
    types = {name: ty.split("[", 1)[0] for name, ty in service.caps.slot.inputs}
    parts = [{"kind": p.kind, "payload": value_in(p.data, p.kind, f"parts[{i}].data", budget)}
             for i, p in enumerate(body.parts)]
    inputs = {}
    texts = [p["payload"] for p in parts if p["kind"] == "text" and isinstance(p["payload"], str)]
    for name, value in body.inputs.items():
        kind = types.get(name, "")
        if kind == "tokens" and isinstance(value, str):
            inputs[name] = service.tokenizer.encode(value)
            texts.append(value)
        else:
            inputs[name] = value_in(value, kind, f"inputs.{name}", budget)
            if kind == "text" and isinstance(value, str):
                texts.append(value)
    explicit = body.params is not None and body.params.model_dump(exclude_none=True).get("max_tokens") is not None
    count_prompt(service.tokenizer, service.context, texts, params, explicit, "parts")
    return {"params": params, "task": body.task, "outputs": list(body.outputs),
            "parts": [{**p, "payload": decoded(p["payload"], budget)} for p in parts],
            "inputs": {name: decoded(v, budget) for name, v in inputs.items()},
            "input_modalities": body.input_modalities, "think": body.think}


def _check_size(service: Service, body: Any) -> None:
    """Counts and characters, read from the body before any work."""
    check_count(len(body.parts) + len(body.inputs), service.limits.max_parts, "max_parts", "parts and inputs",
                "parts")
    types = {name: ty.split("[", 1)[0] for name, ty in service.caps.slot.inputs}
    chars = sum(len(p.data) for p in body.parts if p.kind == "text" and isinstance(p.data, str))
    chars += sum(len(v) for k, v in body.inputs.items() if types.get(k) in TEXT_TYPES and isinstance(v, str))
    check_chars(chars, service.max_prompt_chars, "parts")


class EventLines:
    """A request's events as JSON objects, text decoded incrementally."""

    def __init__(self, service: Service, encoding: str) -> None:
        self.detok = Detokenizer(service.tokenizer)
        self.encoding = encoding

    def line(self, event: RequestEvent) -> dict[str, Any]:
        if isinstance(event, OutputEvent):
            out: dict[str, Any] = {"type": "output", "modality": event.modality}
            if event.modality == "text":
                out["text"] = self.detok.push(token_ids(event.payload))
            out.update(value_out(event.payload, self.encoding))
            out.update({"shape": list(event.shape), "dtype": event.dtype, "walk": event.walk, "rank": event.rank,
                        "seq": event.seq, "t": round(event.t_since_submit, 6)})
            return out
        if not isinstance(event, DoneEvent):  # Running.events raises for errors and cancellations
            return {"type": "end"}
        out = {"type": "done", "outputs": event.outputs, "t": round(event.t_since_submit, 6),
               "t_first": None if event.t_first is None else round(event.t_first, 6), "cut": list(event.cut)}
        tail = self.detok.finish()
        if tail:
            out["text"] = tail
        return out


async def generate(service: Service, request: Request, body: Any) -> Response:
    service.check("generate", body.model)
    _check_size(service, body)
    params = service.params(body.params.model_dump(exclude_none=True) if body.params else {})
    deadline = service.deadline(body.timeout)
    fields = await service.offload.run(_inputs, service, body, params, request=request)
    lines = EventLines(service, body.tensor_encoding)
    gen_id = f"gen-{uuid.uuid4().hex}"
    head = {"type": "start", "id": gen_id, "model": service.plan.model}
    lease = Lease(service)

    if not body.stream:
        async def whole() -> Response:
            try:
                (running,) = await lease.open(1, deadline, [fields])
                events = [lines.line(e) async for e in running.events()]
            finally:
                lease.release()
            return json_response({"id": gen_id, "model": service.plan.model, "events": events})

        return await guarded(request, whole())

    _, events = await guarded(request, opened(lease, 1, deadline, [fields], only_events))
    return stream_response(_ndjson(head, events, lines), lease, service.metrics, "generate", "application/x-ndjson",
                           error_frame=lambda err: json_bytes({"type": "error", **err.body()}) + b"\n")


async def _ndjson(head: dict[str, Any], events: AsyncIterator[RequestEvent], lines: EventLines) -> AsyncIterator[bytes]:
    """The lines; an error after the start line is one error line (stream_response)."""
    yield json_bytes(head) + b"\n"
    async for event in events:
        yield json_bytes(lines.line(event)) + b"\n"
