"""Media in: data URLs and uploaded files decoded, checked for size, and made into tensors.

Images become uint8 tensors [H, W, 3] (decoded with Pillow, imported only when an image comes);
audio becomes `{"samples": float32 [N] in [-1, 1], mono, "rate": Hz}` from WAV (stdlib `wave`), at
the file's own rate: the component that takes it resamples to its own. Sizes are checked
before anything is decoded in full: encoded bytes against `max_bytes`, an image's pixel count
(read from its header) against `max_pixels`, audio length against `max_seconds`. The server
never fetches a URL: only `data:` URLs are accepted. Anything a decoder raises on a client's bytes
is that client's 400 `invalid_media` (a header over the pixel limit: 413), never a server error.
`Encoded` is a medium not yet decoded, so a request's media can be measured together first
(limits.MediaBudget).
"""

from __future__ import annotations

import base64
import binascii
import io
import warnings
import wave
from dataclasses import dataclass
from typing import Any

import numpy as np
from wgc.runtime.http.serving.errors import ApiError


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


def configure_pillow(max_pixels: int) -> None:
    """Pillow's own bomb check at the server's pixel limit, raising rather than warning: an image over
    it is refused as it opens (413), whichever plugin reads it. Once per server process."""
    try:
        from PIL import Image
    except ImportError:
        return
    Image.MAX_IMAGE_PIXELS = max_pixels
    warnings.simplefilter("error", Image.DecompressionBombWarning)


def _pillow(param: str) -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise ApiError("unsupported_value", f"{param}: image inputs need Pillow on the server (pip install pillow)",
                       param) from None
    return Image


def _too_many_pixels(param: str, limits: MediaLimits, size: str = "") -> ApiError:
    return ApiError("media_too_large", f"{param}: {size or 'the image'} is more than the {limits.max_pixels:,} "
                    "pixels this server decodes", param)


def _unreadable_image(Image: Any, param: str, err: Exception) -> ApiError:
    if isinstance(err, Image.DecompressionBombError | Image.DecompressionBombWarning):
        return ApiError("media_too_large", f"{param}: the image's header claims more pixels than this server decodes",
                        param)
    return ApiError("invalid_media", f"{param}: not a readable image ({type(err).__name__}: {err})"[:300], param)


def image_size(data: bytes, param: str, limits: MediaLimits) -> tuple[int, int]:
    """(width, height) from the header alone (Pillow opens lazily): nothing is decoded."""
    Image = _pillow(param)
    try:
        with Image.open(io.BytesIO(data)) as img:
            w, h = img.size
    except Exception as err:  # noqa: BLE001 - any failure of a decoder on client bytes is the client's
        raise _unreadable_image(Image, param, err) from None
    if w * h > limits.max_pixels:
        raise _too_many_pixels(param, limits, f"{w}x{h}")
    return w, h


def decode_image(data: bytes, param: str, limits: MediaLimits) -> Any:
    """uint8 tensor [H, W, 3]; the pixel count is checked from the header before decoding."""
    Image = _pillow(param)
    import torch

    try:
        with Image.open(io.BytesIO(data)) as img:
            w, h = img.size
            if w * h > limits.max_pixels:
                raise _too_many_pixels(param, limits, f"{w}x{h}")
            rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    except ApiError:
        raise
    except Exception as err:  # noqa: BLE001 - any failure of a decoder on client bytes is the client's
        raise _unreadable_image(Image, param, err) from None
    return torch.from_numpy(rgb.copy())  # [H, W, 3] u8


_PCM = {1: (np.uint8, 128.0, 128.0), 2: ("<i2", 0.0, 32768.0), 4: ("<i4", 0.0, 2147483648.0)}


@dataclass(frozen=True)
class WavHeader:
    width: int  # bytes a sample
    channels: int
    rate: int
    frames: int  # as many as the header declares and the bytes hold

    @property
    def seconds(self) -> float:
        return self.frames / self.rate


def wav_header(data: bytes, param: str, limits: MediaLimits) -> WavHeader:
    """The WAV header, checked: PCM of 8, 16 or 32 bits, a rate, at most `max_seconds`."""
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            width, channels, rate, frames = w.getsampwidth(), w.getnchannels(), w.getframerate(), w.getnframes()
    except Exception as err:  # noqa: BLE001 - wave raises several kinds on a damaged header
        raise ApiError("invalid_media", f"{param}: not a readable WAV file ({err})"[:300], param) from None
    if width not in _PCM or channels < 1 or rate < 1:
        raise ApiError("invalid_media", f"{param}: {8 * width}-bit, {channels}-channel WAV at {rate} Hz is not "
                       "supported (8, 16 or 32-bit PCM)", param)
    header = WavHeader(width, channels, rate, min(frames, len(data) // (width * channels)))
    if header.seconds > limits.max_seconds:
        raise ApiError("media_too_large", f"{param}: longer than {limits.max_seconds:g} s", param)
    return header


def read_wav(data: bytes, param: str, limits: MediaLimits) -> tuple[Any, int]:
    """(float32 tensor [N] with the channels averaged, the file's sample rate)."""
    import torch

    head = wav_header(data, param, limits)
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            raw = w.readframes(head.frames)
    except Exception as err:  # noqa: BLE001
        raise ApiError("invalid_media", f"{param}: not a readable WAV file ({err})"[:300], param) from None
    frame = head.width * head.channels
    if len(raw) % frame:
        raise ApiError("invalid_media", f"{param}: the WAV data ends inside a sample ({len(raw)} bytes are not whole "
                       f"frames of {frame} bytes)", param)
    dtype, offset, scale = _PCM[head.width]
    samples = (np.frombuffer(raw, dtype=dtype).astype(np.float32) - offset) / scale
    mono = samples.reshape(-1, head.channels).mean(axis=1) if head.channels > 1 else samples
    return torch.from_numpy(np.ascontiguousarray(mono, dtype=np.float32)), head.rate  # [N] f32


def decode_wav(data: bytes, param: str, limits: MediaLimits, rate: int | None = None) -> Any:
    """float32 tensor [N] (channels averaged), linearly resampled to `rate` when given."""
    import torch

    out, found = read_wav(data, param, limits)
    if rate and rate != found and out.numel() > 1:
        n = max(1, round(out.numel() * rate / found))
        out = torch.nn.functional.interpolate(out[None, None], size=n, mode="linear", align_corners=False)[0, 0]
    return out


def audio_clip(data: bytes, param: str, limits: MediaLimits) -> dict[str, Any]:
    """An audio input as every component receives it: `{"samples": float32 [N] in [-1, 1], mono, "rate":
    the file's rate in Hz}`; the component resamples to the rate it needs."""
    samples, rate = read_wav(data, param, limits)
    return {"samples": samples, "rate": rate}


@dataclass(frozen=True)
class Encoded:
    """A medium as it came (its bytes), before it is measured and decoded."""

    kind: str  # image or audio
    mime: str
    data: bytes
    param: str


def encoded(kind: str, mime: str, data: bytes, param: str) -> Encoded:
    if kind == "audio" and mime not in _WAV_TYPES:
        raise ApiError("unsupported_value", f"{param}: audio must be WAV (found {mime})", param)
    if kind not in ("image", "audio"):
        raise ApiError("unsupported_value", f"{param}: {kind} inputs must be sent as tensors through /v1/generate",
                       param)
    return Encoded(kind, mime, data, param)


def measure(medium: Encoded, limits: MediaLimits) -> float:
    """An image's pixels or an audio clip's seconds, from the header alone."""
    if medium.kind == "image":
        w, h = image_size(medium.data, medium.param, limits)
        return w * h
    return wav_header(medium.data, medium.param, limits).seconds


def decode_encoded(medium: Encoded, limits: MediaLimits) -> Any:
    """An image as a uint8 tensor [H, W, 3]; audio as `audio_clip`'s {"samples", "rate"}."""
    if medium.kind == "image":
        return decode_image(medium.data, medium.param, limits)
    return audio_clip(medium.data, medium.param, limits)


_WAV_TYPES = ("", "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave", "wav")
