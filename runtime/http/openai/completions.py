"""POST /v1/completions: OpenAI's text completions (no chat template), whole or streamed as SSE chunks.

The prompt is one string, or one list of token ids where the plan's prompt input is `tokens` (the
request model says which; a batch of prompts is refused by validation, naming `prompt`). A string
is tokenized with the tokenizer's `encode_prompt` when it has one (the specials its post-processor
adds, such as BOS, as vLLM's completions do), else `encode`; the ids go to the plan's first `tokens`
input, or the string to its first `text` input or a text part. Each of the n choices is one runtime
request; text comes out through TextChoice (UTF-8-safe deltas, stop strings, exact token counts)
exactly as in chat, with finish_reason "stop" or "length". The fields are chat's where OpenAI
shares them; `echo`, `logprobs`, `suffix` and `best_of` are not offered (400 unsupported_parameter
naming the field).
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictBool, StrictInt, StrictStr, create_model
from starlette.requests import Request
from starlette.responses import Response
from wgc.runtime.api import DoneEvent, OutputEvent, RequestEvent
from wgc.runtime.http.admission.lease import Lease
from wgc.runtime.http.admission.limits import check_chars, check_stop
from wgc.runtime.http.admission.running import Running
from wgc.runtime.http.openai.chat_input import chat_params, choice_seeds
from wgc.runtime.http.serving.capabilities import TEXT_TYPES
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.serving.plan_schemas import CHAT_FIELDS, TimeoutField, bounded_n, optional_field, stop_field
from wgc.runtime.http.serving.schemas import StreamOptions, Strict, Usage
from wgc.runtime.http.serving.service import Service
from wgc.runtime.http.serving.streaming import (
    SSE_DONE,
    coalesced,
    guarded,
    json_response,
    merged,
    opened,
    sse,
    stream_response,
)
from wgc.runtime.http.text.choice import TextChoice

_OPENAI_BOUNDS = {"temperature": (0, 2), "top_p": (0, 1), "frequency_penalty": (-2, 2),
                  "presence_penalty": (-2, 2), "seed": (None, None)}
TokenIds = Annotated[list[Annotated[StrictInt, Field(ge=0)]], Field(min_length=1)]


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


def request_model(service: Service) -> type[BaseModel]:
    """The request body: the prompt, chat's shared fields, and the plan's params."""
    caps = service.caps
    name = "".join(part.capitalize() for part in caps.model.split("_"))
    fields: dict[str, Any] = {
        "model": (str, Field(..., examples=[caps.model], description=f"`{caps.model}`, the model served here")),
        "prompt": _prompt_field(service),
        "stream": (StrictBool, False),
        "stream_options": (StreamOptions | None, None),
        "n": (bounded_n(service.max_choices), 1),
        "stop": (stop_field(service.limits), None),
        "user": (str | None, None),
        "params": (service.models.params | None, Field(None, description="model-specific params")),
        "timeout": (TimeoutField, None),
    }
    limit = caps.param("max_tokens")
    if limit is not None:
        fields["max_tokens"] = optional_field(limit, ge=1)
    for field, names in CHAT_FIELDS.items():
        p = caps.param(*names)
        if p is not None and p.type in ("int", "float"):
            fields[field] = optional_field(p, *_OPENAI_BOUNDS[field])
    return create_model(f"{name}CompletionRequest", __base__=Strict, **fields)


def _prompt_field(service: Service) -> tuple[Any, Any]:
    """One prompt: text, or token ids too when the plan's prompt input is `tokens`."""
    slot = service.caps.slot
    ids = not slot.via_parts and next((ty.split("[", 1)[0] for _, ty in slot.inputs
                                       if ty.split("[", 1)[0] in TEXT_TYPES), "") == "tokens"
    if ids:
        return StrictStr | TokenIds, Field(..., description="one prompt: text, or token ids")
    return StrictStr, Field(..., description="one prompt (text)")


class CompletionRun:
    """The n choices of one completion as their events arrive."""

    def __init__(self, service: Service, stops: list[str], prompt_tokens: int, n: int, max_tokens: int | None) -> None:
        self.choices = [TextChoice(i, service.tokenizer, service.end_ids, stops, max_tokens) for i in range(n)]
        self.prompt_tokens = prompt_tokens
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self._closed = [False] * n

    def on_event(self, i: int, event: RequestEvent) -> tuple[str, str | None]:
        """The text this event adds to choice i, and its finish_reason once it has finished (once)."""
        choice, text = self.choices[i], ""
        if isinstance(event, OutputEvent) and choice.finish is None and event.modality == "text":
            text = choice.feed(event.payload)
        elif isinstance(event, DoneEvent):
            text = choice.end(cut=bool(event.cut))
        if choice.finish is not None and not self._closed[i]:
            self._closed[i] = True
            return text, choice.finish
        return text, None

    def usage(self) -> dict[str, int]:
        done = sum(c.tokens for c in self.choices)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": done,
                "total_tokens": self.prompt_tokens + done}

    def whole(self, model: str) -> dict[str, Any]:
        choices = [{"index": c.index, "text": c.content, "finish_reason": c.finish or "stop", "logprobs": None}
                   for c in self.choices]
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": model,
                "choices": choices, "usage": self.usage()}

    def chunk(self, model: str, choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict[str, Any]:
        out = {"id": self.id, "object": "text_completion", "created": self.created, "model": model,
               "choices": choices}
        return {**out, "usage": usage} if usage is not None else out


def _prompt_fields(service: Service, prompt: str | list[int]) -> tuple[dict[str, Any], list[int] | None]:
    """`inputs` or `parts` for the runtime, and the prompt's ids when the frontend knows them."""
    caps, tok = service.caps, service.tokenizer
    if caps.slot.via_parts:
        if not isinstance(prompt, str):
            raise ApiError("unsupported_value", f"model `{caps.model}` takes its prompt as text, not token ids", "prompt")
        return {"parts": [{"kind": "text", "payload": prompt}]}, tok.encode(prompt)
    slot = next(((n, ty.split("[", 1)[0]) for n, ty in caps.slot.inputs if ty.split("[", 1)[0] in TEXT_TYPES), None)
    if slot is None:
        raise ApiError("unsupported_value", f"model `{caps.model}` takes no text prompt", "prompt")
    name, kind = slot
    if kind == "text":
        if not isinstance(prompt, str):
            raise ApiError("unsupported_value", f"model `{caps.model}` takes its prompt as text, not token ids", "prompt")
        return {"inputs": {name: prompt}}, tok.encode(prompt)
    ids = prompt if isinstance(prompt, list) else getattr(tok, "encode_prompt", tok.encode)(prompt)
    if not ids:
        raise ApiError("invalid_request", "the prompt has no tokens", "prompt")
    return {"inputs": {name: list(ids)}}, list(ids)


def _prepare(service: Service, body: Any, stops: list[str], params: dict[str, Any],
             explicit: bool) -> tuple[CompletionRun, dict[str, Any]]:
    """The blocking part (off the event loop): tokenizing and the context check, which may lower a
    default max_tokens in `params`."""
    fields, ids = _prompt_fields(service, body.prompt)
    count = len(ids) if ids is not None else 0
    limit = service.context.check(count, params.get("max_tokens"), explicit, "prompt")
    if limit is not None:
        params["max_tokens"] = limit
    return CompletionRun(service, stops, count, body.n, params.get("max_tokens")), fields


async def completions(service: Service, request: Request, body: Any) -> Response:
    service.check("completions", body.model)
    if isinstance(body.prompt, str):
        check_chars(len(body.prompt), service.max_prompt_chars, "prompt")
    stops = check_stop(body.stop, service.limits)
    service.check_n(body.n)
    given = chat_params(service.caps, body)
    params = service.params(given)
    deadline = service.deadline(body.timeout)
    run, fields = await service.offload.run(_prepare, service, body, stops, params, "max_tokens" in given,
                                             request=request)
    requests = [{"params": service.params(p), **fields} for p in choice_seeds(service.caps, params, body.n)]
    lease = Lease(service)
    model = service.plan.model

    if not body.stream:
        async def whole() -> Response:
            try:
                runnings = await lease.open(body.n, deadline, requests)
                async for i, event in merged(runnings):
                    if run.on_event(i, event)[1] is not None:
                        runnings[i].stop()
            finally:
                lease.release()
            return json_response(run.whole(model))

        return await guarded(request, whole())

    runnings, events = await guarded(request, opened(lease, body.n, deadline, requests, merged))
    usage = bool(body.stream_options and body.stream_options.include_usage)
    return stream_response(_sse(run, runnings, events, model, usage), lease, service.metrics, "completions",
                           "text/event-stream", error_frame=lambda err: sse(err.body()))


def _sse(run: CompletionRun, runnings: list[Running], events: Any, model: str, include_usage: bool) -> Any:
    """The chunks, those ready together sent together (streaming.coalesced)."""

    def render(i: int, event: Any) -> list[bytes]:
        text, finish = run.on_event(i, event)
        if finish is not None:
            runnings[i].stop()
        if text or finish is not None:
            return [sse(run.chunk(model, [{"index": i, "text": text, "finish_reason": finish, "logprobs": None}]))]
        return []

    def tail() -> list[bytes]:
        return [*([sse(run.chunk(model, [], run.usage()))] if include_usage else []), SSE_DONE]

    return coalesced(events, runnings, render, tail)
