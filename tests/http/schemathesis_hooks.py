"""Generators for the schemathesis runs (test_schemathesis.py, loaded through SCHEMATHESIS_HOOKS): the
values the OpenAPI document names by `format` or content type but no JSON schema can check, and the
one rule across fields it cannot state.

- `image-data-url`, `audio-data-url`, `wav-base64` and the edit form's image/png, image/jpeg and
  image/webp: small real images and a WAV, so a schema-valid request carries media that decode.
- Rules across fields: a prompt and the max_tokens asked for must fit the model's positions together
  (runtime/http/admission/context.py): generated bodies keep max_tokens within half the positions and their
  text within the other half (WGC_ST_POSITIONS, set by the test; unset: no bound); and the images
  and content parts of all messages together stay within the server's limits (limits.py).
- The run's cost: max_tokens at most WGC_ST_MAX_TOKENS (unset: no bound), so that a real model on a
  CPU answers each request in seconds.
"""

from __future__ import annotations

import base64
import io
import json
import os
import struct
import wave
from typing import Any

import schemathesis
from hypothesis import strategies as st
from wgc.runtime.http.admission.limits import Limits


def _image(fmt: str) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 40, 90)).save(buf, format=fmt)
    return buf.getvalue()


def _wav() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(struct.pack("<160h", *range(160)))
    return buf.getvalue()


PNG, JPEG, WEBP, WAV = _image("PNG"), _image("JPEG"), _image("WEBP"), _wav()
schemathesis.openapi.format("image-data-url", st.sampled_from(
    [f"data:image/{kind};base64,{base64.b64encode(data).decode()}"
     for kind, data in (("png", PNG), ("jpeg", JPEG), ("webp", WEBP))]))
schemathesis.openapi.format("audio-data-url", st.just(f"data:audio/wav;base64,{base64.b64encode(WAV).decode()}"))
schemathesis.openapi.format("wav-base64", st.just(base64.b64encode(WAV).decode()))
for media_type, data in (("image/png", PNG), ("image/jpeg", JPEG), ("image/webp", WEBP)):
    schemathesis.openapi.media_type(media_type, st.just(data))

POSITIONS = int(os.environ.get("WGC_ST_POSITIONS", "0"))
MAX_TOKENS = int(os.environ.get("WGC_ST_MAX_TOKENS", "0"))
LIMITS = Limits()


def _within_limits(body: dict[str, Any]) -> bool:
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    parts = [p for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list) for p in m["content"]]
    images = [p for p in parts if isinstance(p, dict) and p.get("type") == "image_url"]
    return len(parts) <= LIMITS.max_parts and len(images) <= LIMITS.max_images


def _fits(body: Any) -> bool:
    """Within the request limits; prompt text (its UTF-8 bytes, more than its tokens with these plans'
    tokenizers) and max_tokens within the positions, half each."""
    if not isinstance(body, dict):
        return True
    params = body.get("params") if isinstance(body.get("params"), dict) else {}
    asked = [v for v in (body.get("max_tokens"), body.get("max_completion_tokens"), params.get("max_tokens"))
             if isinstance(v, int)]
    if not _within_limits(body) or (MAX_TOKENS and max(asked, default=0) > MAX_TOKENS):
        return False
    if not POSITIONS:
        return True
    text = {k: v for k, v in body.items() if k in ("messages", "input", "prompt", "parts", "inputs")}
    size = len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    half = (POSITIONS - 256) // 2  # the template adds a few dozen tokens
    return max(asked, default=0) <= half and size <= half


@schemathesis.hook
def filter_body(ctx: Any, body: Any) -> bool:
    return _fits(body)
