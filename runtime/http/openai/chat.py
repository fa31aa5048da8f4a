"""POST /v1/chat/completions: OpenAI chat completions, whole or streamed as SSE chunks.

Each of the n choices is one runtime request. Text comes out through TextChoice (incremental,
UTF-8-safe, stop strings, exact token counts); audio, when the model speaks and the client asks
for it, as 16-bit PCM (base64 chunks when streaming, a WAV file otherwise), the text then also as
the audio's transcript. A choice that meets a stop string is cancelled at once on every rank;
one whose walks stopped a loop at its `max` bound (the text's max_tokens, a talker's frame bound)
finishes with "length".
"""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from wgc.runtime.api import DoneEvent, OutputEvent, RequestEvent
from wgc.runtime.http.admission.lease import Lease
from wgc.runtime.http.admission.limits import check_chars, check_count, check_stop
from wgc.runtime.http.admission.running import Running
from wgc.runtime.http.media.audio import to_pcm16, wav_file
from wgc.runtime.http.openai.chat_input import chat_params, chat_pieces, chat_size, choice_seeds, wants_audio
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
from wgc.runtime.http.text.prompt import count_prompt, to_request


@dataclass
class Delta:
    index: int
    delta: dict[str, Any]
    finish: str | None = None


class ChatRun:
    """The n choices of one completion as their events arrive."""

    def __init__(self, service: Service, body: Any, stops: list[str], prompt_tokens: int, n: int,
                 max_tokens: int | None, audio: bool) -> None:
        self.choices = [TextChoice(i, service.tokenizer, service.end_ids, stops, max_tokens) for i in range(n)]
        self.pcm = [bytearray() for _ in range(n)]
        self.prompt_tokens = prompt_tokens
        self.audio = audio
        self.audio_format = getattr(getattr(body, "audio", None), "format", "wav")
        self.sample_rate = service.sample_rate()
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.audio_id = f"audio-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.expires_at = self.created + 3600
        self._opened = [False] * n
        self._closed = [False] * n

    def on_event(self, i: int, event: RequestEvent) -> list[Delta]:
        choice, out = self.choices[i], []
        if not self._opened[i]:
            self._opened[i] = True
            out.append(Delta(i, {"role": "assistant", "content": ""}))
        if isinstance(event, OutputEvent) and choice.finish is None:
            if event.modality == "text":
                out += self._text(i, choice.feed(event.payload))
            elif event.modality == "audio":
                pcm = to_pcm16(event.payload)
                self.pcm[i] += pcm
                out.append(Delta(i, {"audio": {"id": self.audio_id, "data": base64.b64encode(pcm).decode()}}))
        elif isinstance(event, DoneEvent):
            out += self._text(i, choice.end(cut=bool(event.cut)))
        if choice.finish is not None and not self._closed[i]:
            self._closed[i] = True
            if self.audio:  # OpenAI's last audio update: only its expiry
                out.append(Delta(i, {"audio": {"id": self.audio_id, "expires_at": self.expires_at}}))
            out.append(Delta(i, {}, choice.finish))
        return out

    def _text(self, i: int, text: str) -> list[Delta]:
        """A text delta; with audio out also the audio's transcript, as OpenAI streams it."""
        if not text:
            return []
        return [Delta(i, {"content": text, "audio": {"id": self.audio_id, "transcript": text}} if self.audio
                      else {"content": text})]

    def usage(self) -> dict[str, int]:
        done = sum(c.tokens for c in self.choices)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": done,
                "total_tokens": self.prompt_tokens + done}

    def completion(self, model: str, audio: bool) -> dict[str, Any]:
        choices = []
        for c in self.choices:
            message: dict[str, Any] = {"role": "assistant", "content": c.content}
            if audio:
                pcm = bytes(self.pcm[c.index])
                data = wav_file(pcm, self.sample_rate) if self.audio_format == "wav" else pcm
                message["audio"] = {"id": self.audio_id, "data": base64.b64encode(data).decode(),
                                    "expires_at": self.expires_at, "transcript": c.content}
            choices.append({"index": c.index, "message": message, "finish_reason": c.finish or "stop",
                            "logprobs": None})
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": model,
                "choices": choices, "usage": self.usage()}

    def chunk(self, model: str, d: Delta) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": model,
                "choices": [{"index": d.index, "delta": d.delta, "finish_reason": d.finish, "logprobs": None}]}


def _prepare(service: Service, body: Any, stops: list[str], params: dict[str, Any], explicit: bool,
             audio: bool) -> tuple[ChatRun, dict[str, Any]]:
    """The blocking part (off the event loop): template, token counts and their check (which may lower
    a default max_tokens in `params`), media decoded."""
    counted: list[int] = []

    def check(texts: list[str]) -> None:
        counted.append(count_prompt(service.tokenizer, service.context, texts, params, explicit, "messages"))

    pieces = chat_pieces(service.caps, service.template, body.messages, service.limits, check)
    fields = {**to_request(service.caps, service.tokenizer, pieces, "messages"),
              "outputs": ["text", "audio"] if audio else ["text"]}
    return ChatRun(service, body, stops, counted[0], body.n, params.get("max_tokens"), audio), fields


async def chat_completions(service: Service, request: Request, body: Any) -> Response:
    service.check("chat", body.model)
    limits = service.limits
    parts, images, chars = chat_size(body.messages)
    check_count(parts, limits.max_parts, "max_parts", "content parts", "messages")
    check_count(images, limits.max_images, "max_images", "images", "messages")
    check_chars(chars, service.max_prompt_chars, "messages")
    stops = check_stop(body.stop, limits)
    service.check_n(body.n)
    audio = wants_audio(body)
    if getattr(body, "audio", None) is not None:
        service.check_voice(body.audio.voice, "audio.voice")
    given = chat_params(service.caps, body)
    params = service.params(given)
    deadline = service.deadline(body.timeout)
    run, fields = await service.offload.run(_prepare, service, body, stops, params, "max_tokens" in given, audio,
                                             request=request)
    per_choice = [service.params(p) for p in choice_seeds(service.caps, params, body.n)]
    lease = Lease(service)
    requests = [{"params": p, **fields} for p in per_choice]

    if not body.stream:
        async def whole() -> Response:
            try:
                runnings = await lease.open(body.n, deadline, requests)
                async for i, event in merged(runnings):
                    run.on_event(i, event)
                    if run.choices[i].finish is not None:
                        runnings[i].stop()
            finally:
                lease.release()
            return json_response(run.completion(service.plan.model, audio))

        return await guarded(request, whole())

    runnings, events = await guarded(request, opened(lease, body.n, deadline, requests, merged))
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return stream_response(_sse(run, runnings, events, service.plan.model, include_usage), lease,
                           service.metrics, "chat", "text/event-stream", error_frame=lambda err: sse(err.body()))


def _sse(run: ChatRun, runnings: list[Running], events: Any, model: str, include_usage: bool) -> Any:
    """The chunks, those ready together sent together (streaming.coalesced); an error after the first
    is one `data: {"error": ...}` event (stream_response)."""

    def render(i: int, event: Any) -> list[bytes]:
        frames = [sse(run.chunk(model, d)) for d in run.on_event(i, event)]
        if run.choices[i].finish is not None:
            runnings[i].stop()
        return frames

    def tail() -> list[bytes]:
        usage = [sse({"id": run.id, "object": "chat.completion.chunk", "created": run.created, "model": model,
                      "choices": [], "usage": run.usage()})] if include_usage else []
        return [*usage, SSE_DONE]

    return coalesced(events, runnings, render, tail)
