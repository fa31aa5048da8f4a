"""POST /v1/audio/speech: text in, audio out, sent as it is produced.

`response_format` wav (a streamed WAV header of unknown length, then 16-bit PCM) or pcm (raw
16-bit little-endian mono at the model's sample rate, named in `X-Sample-Rate`). `stream_format`
audio sends the bytes themselves; sse sends `speech.audio.delta` events with base64 chunks, then
`speech.audio.done`. `stream: false` answers with the whole file and its length. A request that
fails after audio has started is cut off: the connection is aborted, never ended cleanly.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any, TypeGuard

from starlette.requests import Request
from starlette.responses import Response
from wgc.runtime.api import OutputEvent, RequestEvent
from wgc.runtime.http.admission.lease import Lease
from wgc.runtime.http.admission.limits import check_chars
from wgc.runtime.http.media.audio import to_pcm16, wav_file, wav_header
from wgc.runtime.http.serving.plan_schemas import VOICE_PARAMS
from wgc.runtime.http.serving.service import Service
from wgc.runtime.http.serving.streaming import guarded, only_events, opened, sse, stream_response
from wgc.runtime.http.text.prompt import Piece, count_prompt, to_request
from wgc.runtime.http.text.template import check_text

MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm"}


def speech_params(service: Service, body: Any) -> tuple[dict[str, Any], bool]:
    """The plan params (checked, defaults filled), and whether the client gave max_tokens."""
    given: dict[str, Any] = body.params.model_dump(exclude_none=True) if body.params is not None else {}
    voice = service.caps.param(*VOICE_PARAMS)
    if voice is not None:
        service.check_voice(body.voice, "voice")
        given[voice.name] = body.voice
    for field in ("speed", "instructions"):
        if getattr(body, field, None) is not None:
            given[field] = getattr(body, field)
    return service.params(given), "max_tokens" in given


def _prepare(service: Service, text: str, params: dict[str, Any], explicit: bool) -> dict[str, Any]:
    """The blocking part (off the event loop): the token count and its check (which may lower a
    default max_tokens in `params`), tokenised inputs."""
    count_prompt(service.tokenizer, service.context, [text], params, explicit, "input")
    return {**to_request(service.caps, service.tokenizer, [Piece("text", text)], "input"), "outputs": ["audio"]}


async def speech(service: Service, request: Request, body: Any) -> Response:
    service.check("speech", body.model)
    check_chars(len(body.input), service.max_prompt_chars, "input")
    params, explicit = speech_params(service, body)
    deadline = service.deadline(body.timeout)
    fields = await service.offload.run(_prepare, service, check_text(body.input, "input"), params, explicit,
                                       request=request)
    rate = service.sample_rate()
    headers = {"X-Sample-Rate": str(rate)}
    lease = Lease(service)

    if not body.stream:
        async def whole() -> Response:
            try:
                (running,) = await lease.open(1, deadline, [{"params": params, **fields}])
                pcm = b"".join([to_pcm16(e.payload) async for e in running.events() if _audio(e)])
            finally:
                lease.release()
            data = wav_file(pcm, rate) if body.response_format == "wav" else pcm
            return Response(data, media_type=MEDIA_TYPES[body.response_format], headers=headers)

        return await guarded(request, whole())

    _, events = await guarded(request, opened(lease, 1, deadline, [{"params": params, **fields}], only_events))
    if body.stream_format == "sse":
        return stream_response(_sse(events), lease, service.metrics, "speech", "text/event-stream", headers,
                               error_frame=lambda err: sse({"type": "error", **err.body()}))
    return stream_response(_bytes(events, body.response_format, rate), lease, service.metrics, "speech",
                           MEDIA_TYPES[body.response_format], headers)


def _audio(event: RequestEvent) -> TypeGuard[OutputEvent]:
    return isinstance(event, OutputEvent) and event.modality == "audio"


async def _bytes(events: AsyncIterator[RequestEvent], fmt: str, rate: int) -> AsyncIterator[bytes]:
    if fmt == "wav":
        yield wav_header(rate)
    async for event in events:
        if _audio(event):
            pcm = to_pcm16(event.payload)
            if pcm:
                yield pcm


async def _sse(events: AsyncIterator[RequestEvent]) -> AsyncIterator[bytes]:
    samples = 0
    async for event in events:
        if _audio(event):
            pcm = to_pcm16(event.payload)
            samples += len(pcm) // 2
            yield sse({"type": "speech.audio.delta", "audio": base64.b64encode(pcm).decode()})
    yield sse({"type": "speech.audio.done", "usage": {"output_samples": samples}})
