"""Media in: data URLs and uploaded files decoded, checked for size, and made into tensors.

Images become uint8 tensors [H, W, 3] (decoded with Pillow, imported only when an image comes);
audio becomes float32 samples [N] in [-1, 1], mono, from WAV (stdlib `wave`). Sizes are checked
before anything is decoded in full: encoded bytes against `max_bytes`, an image's pixel count
(read from its header) against `max_pixels`, audio length against `max_seconds`. The server
never fetches a URL: only `data:` URLs are accepted.
"""

from __future__ import annotations

import base64
import binascii
import io
import wave
from dataclasses import dataclass
from typing import Any

import numpy as np
from wgc.runtime.http.errors import ApiError


@dataclass(frozen=True)
class MediaLimits:
    max_bytes: int = 20 * 1024 * 1024  # encoded, per medium
    max_pixels: int = 4096 * 4096
    max_seconds: float = 600.0


def decode_base64(data: str, param: str, limits: MediaLimits) -> bytes:
    if len(data) * 3 // 4 > limits.max_bytes:
        raise ApiError("media_too_large", f"{param}: more than {limits.max_bytes:,} bytes", param)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError("invalid_media", f"{param}: not valid base64", param) from None


def parse_data_url(url: str, param: str, limits: MediaLimits) -> tuple[str, bytes]:
    """(media type, bytes) of a `data:<type>;base64,<data>` URL."""
    if not url.startswith("data:"):
        raise ApiError("unsupported_value", f"{param}: only data: URLs are accepted (the server fetches nothing)",
                       param)
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        raise ApiError("invalid_media", f"{param}: a data URL must be data:<type>;base64,<data>", param)
    return head.removesuffix(";base64").split(";", 1)[0].lower(), decode_base64(data, param, limits)


def decode_image(data: bytes, param: str, limits: MediaLimits) -> Any:
    """uint8 tensor [H, W, 3]."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise ApiError("unsupported_value", f"{param}: image inputs need Pillow on the server (pip install pillow)",
                       param) from None
    import torch

    try:
        with Image.open(io.BytesIO(data)) as img:
            w, h = img.size
            if w * h > limits.max_pixels:
                raise ApiError("media_too_large", f"{param}: {w}x{h} is more than {limits.max_pixels:,} pixels", param)
            rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        raise ApiError("invalid_media", f"{param}: not a readable image ({err})", param) from None
    return torch.from_numpy(rgb.copy())  # [H, W, 3] u8


def decode_wav(data: bytes, param: str, limits: MediaLimits, rate: int | None = None) -> Any:
    """float32 tensor [N] (channels averaged), resampled to `rate` when given."""
    import torch

    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            width, channels, src_rate, frames = w.getsampwidth(), w.getnchannels(), w.getframerate(), w.getnframes()
            if src_rate <= 0 or frames / src_rate > limits.max_seconds:
                raise ApiError("media_too_large", f"{param}: longer than {limits.max_seconds:g} s", param)
            raw = w.readframes(frames)
    except (wave.Error, EOFError, ValueError) as err:
        raise ApiError("invalid_media", f"{param}: not a readable WAV file ({err})", param) from None
    kinds = {1: (np.uint8, 128.0, 128.0), 2: ("<i2", 0.0, 32768.0), 4: ("<i4", 0.0, 2147483648.0)}
    if width not in kinds:
        raise ApiError("invalid_media", f"{param}: {8 * width}-bit WAV is not supported (8, 16 or 32-bit PCM)", param)
    dtype, offset, scale = kinds[width]
    samples = (np.frombuffer(raw, dtype=dtype).astype(np.float32) - offset) / scale
    mono = samples.reshape(-1, channels).mean(axis=1) if channels > 1 else samples
    out = torch.from_numpy(np.ascontiguousarray(mono, dtype=np.float32))  # [N] f32
    if rate and rate != src_rate and out.numel() > 1:
        n = max(1, round(out.numel() * rate / src_rate))
        out = torch.nn.functional.interpolate(out[None, None], size=n, mode="linear", align_corners=False)[0, 0]
    return out


def decode_media(kind: str, mime: str, data: bytes, param: str, limits: MediaLimits, rate: int | None) -> Any:
    if kind == "image":
        return decode_image(data, param, limits)
    if kind == "audio":
        if mime not in ("", "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave", "wav"):
            raise ApiError("unsupported_value", f"{param}: audio must be WAV (found {mime})", param)
        return decode_wav(data, param, limits, rate)
    raise ApiError("unsupported_value", f"{param}: {kind} inputs must be sent as tensors through /v1/generate", param)
