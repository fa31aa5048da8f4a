"""A prompt (text and media, in order) as the plan takes it: request parts, or named walk inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wgc.runtime.http.admission.context import Context
from wgc.runtime.http.serving.capabilities import TEXT_TYPES, Capabilities
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.text.tokenizer import Tokenizer


@dataclass(frozen=True)
class Piece:
    kind: str  # text, image, audio
    payload: Any  # a str for text, a tensor for media


def to_request(caps: Capabilities, tokenizer: Tokenizer, pieces: list[Piece], param: str) -> dict[str, Any]:
    """`parts` or `inputs` for Runtime.submit; 400 when the plan takes no input of a piece's kind."""
    for p in pieces:
        if not caps.slot.takes(p.kind):
            raise ApiError("unsupported_value", f"model `{caps.model}` takes no {p.kind} input", param)
    if caps.slot.via_parts:
        return {"parts": [{"kind": p.kind, "payload": p.payload} for p in pieces if p.kind != "text" or p.payload]}
    inputs: dict[str, Any] = {}
    free = list(caps.slot.inputs)
    text = "".join(p.payload for p in pieces if p.kind == "text")
    for name, ty in free:
        base = ty.split("[", 1)[0]
        if base in TEXT_TYPES and name not in inputs:
            inputs[name] = tokenizer.encode(text) if base == "tokens" else text
            break
    for p in pieces:
        if p.kind == "text":
            continue
        slot = next((n for n, ty in free if ty.split("[", 1)[0] == p.kind and n not in inputs), None)
        if slot is None:
            raise ApiError("unsupported_value", f"model `{caps.model}` takes fewer {p.kind} inputs than given",
                           param)
        inputs[slot] = p.payload
    return {"inputs": inputs}


def count_prompt(tokenizer: Tokenizer, context: Context, texts: list[str], params: dict[str, Any], explicit: bool,
                 param: str) -> int:
    """Tokens of the prompt's text (media have no token count the frontend could know), checked
    against the model's positions and KV pool with the params' `max_tokens` (admission/context.py), which is
    lowered in `params` when it was the plan's default and the prompt leaves less."""
    tokens = sum(len(tokenizer.encode(t)) for t in texts)
    limit = context.check(tokens, params.get("max_tokens"), explicit, param)
    if limit is not None:
        params["max_tokens"] = limit
    return tokens
