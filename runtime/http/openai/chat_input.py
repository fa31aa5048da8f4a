"""A chat request as the plan takes it: messages through the chat template into prompt pieces
(text and decoded media, in order), OpenAI fields into plan params."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wgc.runtime.http.admission.limits import Limits, MediaBudget
from wgc.runtime.http.media.decode import Encoded, decode_base64, encoded, parse_data_url
from wgc.runtime.http.serving.capabilities import Capabilities
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.serving.plan_schemas import CHAT_FIELDS, VOICE_PARAMS
from wgc.runtime.http.serving.schemas import AudioPart, AudioUrlPart, ImagePart, TextPart
from wgc.runtime.http.text.prompt import Piece
from wgc.runtime.http.text.template import ChatTemplate, check_text, sentinel


def _medium(caps: Capabilities, part: Any, param: str, limits: Limits) -> Encoded:
    """A media part's bytes (base64 read, type checked), not yet decoded."""
    kind = "image" if isinstance(part, ImagePart) else "audio"
    if not caps.slot.takes(kind):
        raise ApiError("unsupported_value", f"model `{caps.model}` takes no {kind} input", param)
    if isinstance(part, AudioPart):
        if part.input_audio.format != "wav":
            raise ApiError("unsupported_value", f"{param}: audio must be WAV (found {part.input_audio.format})", param)
        return encoded("audio", "audio/wav", decode_base64(part.input_audio.data, param, limits.media), param)
    url = part.image_url.url if isinstance(part, ImagePart) else part.audio_url.url
    mime, data = parse_data_url(url, param, limits.media)
    return encoded(kind, mime, data, param)


def chat_size(messages: list[Any]) -> tuple[int, int, int]:
    """(content parts, images, characters of text) over all messages: cheap, read before any work."""
    parts = images = chars = 0
    for m in messages:
        if isinstance(m.content, str):
            chars += len(m.content)
        elif m.content is not None:
            parts += len(m.content)
            images += sum(isinstance(p, ImagePart) for p in m.content)
            chars += sum(len(p.text) for p in m.content if isinstance(p, TextPart))
    return parts, images, chars


def chat_pieces(caps: Capabilities, template: ChatTemplate, messages: list[Any], limits: Limits,
                before_decoding: Callable[[list[str]], None] | None = None) -> list[Piece]:
    """The prompt in order: the template's text and the decoded media. The media are admitted from
    their headers (limits.MediaBudget) and `before_decoding` sees the rendered text (to count and
    check its tokens) before any medium is decoded."""
    budget = MediaBudget(limits)
    media: list[Encoded] = []
    rendered: list[dict[str, Any]] = []
    for mi, m in enumerate(messages):
        if m.content is None or isinstance(m.content, str):
            text = check_text(m.content or "", f"messages[{mi}].content")
        else:
            pieces = []
            for pi, part in enumerate(m.content):
                param = f"messages[{mi}].content[{pi}]"
                if isinstance(part, TextPart):
                    pieces.append(check_text(part.text, param))
                elif isinstance(part, ImagePart | AudioPart | AudioUrlPart):
                    media.append(budget.admit(_medium(caps, part, param, limits)))
                    pieces.append(sentinel(len(media) - 1))
            text = "".join(pieces)
        rendered.append({"role": m.role, "content": text, **({"name": m.name} if m.name else {})})
    parts = template.render(rendered, [e.kind for e in media])
    if before_decoding is not None:
        before_decoding([p.text for p in parts if p.kind == "text"])
    decoded = [budget.decode(e) for e in media]
    return [Piece("text", p.text) if p.kind == "text" else Piece(p.kind, decoded[p.media]) for p in parts]


def wants_audio(body: Any) -> bool:
    return "audio" in (getattr(body, "modalities", None) or []) or getattr(body, "audio", None) is not None


def chat_params(caps: Capabilities, body: Any) -> dict[str, Any]:
    """The plan params a chat body asks for (before defaults and checks)."""
    given: dict[str, Any] = body.params.model_dump(exclude_none=True) if body.params is not None else {}
    limit = getattr(body, "max_completion_tokens", None) or getattr(body, "max_tokens", None)
    if limit is not None:
        given["max_tokens"] = limit
    for field, names in CHAT_FIELDS.items():
        value = getattr(body, field, None)
        p = caps.param(*names)
        if value is not None and p is not None:
            given[p.name] = value
    audio = getattr(body, "audio", None)
    voice = caps.param(*VOICE_PARAMS)
    if audio is not None and voice is not None:
        given[voice.name] = audio.voice
    return given


def choice_seeds(caps: Capabilities, params: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Params for each of n choices: with a `seed` param, choice i draws with seed + i (wrapped into
    the param's bounds), so the choices differ and each is reproducible."""
    seed = caps.param("seed")
    if n == 1 or seed is None or seed.type != "int":
        return [dict(params) for _ in range(n)]
    low = int(seed.low if seed.low is not None else 0)
    span = int(seed.high) - low + 1 if seed.high is not None else 2**63
    base = int(params["seed"])
    return [{**params, "seed": low + (base - low + i) % span} for i in range(n)]
