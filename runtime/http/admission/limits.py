"""The server's limits on one request, each checked before the work it bounds (docs/http.md, Limits).

A limit has one name in a placement's `[serve]` table (wgc/placement/spec.py, `ServeTable`, reads it into
the plan's settings as `serve.<name>`) and on the command line (`--limit max_images=4`); the command
line wins over the plan, the plan over the defaults here. Refusals name the limit:

    413 request_too_large   the body (max_body_bytes)
    413 media_too_large     one medium's bytes, an image's or all images' pixels (read from the
                            headers before anything is decoded), the request's audio seconds
    400 limit_exceeded      parts, images, stop strings and their length, n, prompt characters
    400 context_length_exceeded   prompt tokens and max_tokens (context.py)

`MediaBudget` admits a request's media one by one from their headers: count, pixels and seconds are
summed before any medium is decoded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wgc.runtime.http.media.decode import Encoded, MediaLimits, decode_encoded, measure
from wgc.runtime.http.serving.errors import ApiError

from wgc.placement.units import parse_size

MIB = 1024 * 1024
DEFAULT_PROMPT_CHARS = MIB  # without positions to scale from
CHARS_PER_POSITION = 16  # max_prompt_chars by default: far beyond any real text's characters per token


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 64 * MIB
    max_media_bytes: int = 20 * MIB  # encoded bytes of one image or audio input
    max_parts: int = 256  # content parts over all messages; parts and named inputs of /v1/generate
    max_images: int = 8
    max_image_pixels: int = 4096 * 4096  # of one image, also Pillow's MAX_IMAGE_PIXELS
    max_request_pixels: int = 2 * 4096 * 4096  # of all a request's images
    max_audio_seconds: float = 600.0  # of all a request's audio
    max_prompt_chars: int | None = None  # None: 16 x the model's positions, else 1 MiB characters
    max_prompt_tokens: int | None = None  # None: the model's positions (context.py)
    max_stop: int = 4
    max_stop_chars: int = 256
    max_n: int | None = None  # None: the running slots at start-up

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
                raise ValueError(f"limit {f.name}: expected a number above zero, found {value!r}")

    @property
    def media(self) -> MediaLimits:
        return MediaLimits(self.max_media_bytes, self.max_image_pixels, self.max_audio_seconds)

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(Limits))

    @staticmethod
    def of(settings: Iterable[Any], given: Mapping[str, int | float]) -> Limits:
        """The plan's `serve.<name>` settings, then `given` (from --limit, parsed) over them."""
        values: dict[str, Any] = {}
        for s in settings:
            name = s.key.removeprefix("serve.")
            if s.key.startswith("serve.") and name in Limits.names():
                values[name] = s.value
        values.update(given)
        return Limits(**values)


def parse_limit(name: str, text: str) -> int | float:
    """A --limit value: a size ("16MiB" or bytes) for *_bytes, seconds for *_seconds, else a count."""
    if name not in Limits.names():
        raise ValueError(f"--limit {name}: unknown limit (limits: {', '.join(Limits.names())})")
    value: int | float | None
    try:
        if name.endswith("_bytes"):
            value = int(text) if text.strip().isdigit() else parse_size(text)[0]
        elif name.endswith("_seconds"):
            value = float(text)
        else:
            value = int(text)
    except ValueError:
        value = None
    if value is None or not 0 < value < 2**63:
        kind = "a size such as 16MiB" if name.endswith("_bytes") else "seconds" if name.endswith("_seconds") \
            else "a whole number"
        raise ValueError(f"--limit {name}={text}: expected {kind} above zero")
    return value


def over(name: str, what: str, param: str | None, code: str = "limit_exceeded") -> ApiError:
    """`what` is over the limit `name`: the message says which limit, so an operator knows what to raise."""
    return ApiError(code, f"{what} (the server's limit `{name}`)", param)


def check_count(n: int, limit: int, name: str, what: str, param: str | None) -> None:
    if n > limit:
        raise over(name, f"{param + ': ' if param else ''}{n:,} {what}, more than the {limit:,} this server takes "
                   "in one request", param)


def check_stop(stop: str | list[str] | None, limits: Limits) -> list[str]:
    """The stop strings, checked for count and length (a stop string costs work on every token)."""
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    check_count(len(stops), limits.max_stop, "max_stop", "stop strings", "stop")
    for i, s in enumerate(stops):
        if len(s) > limits.max_stop_chars:
            param = "stop" if isinstance(stop, str) else f"stop[{i}]"
            raise over("max_stop_chars", f"{param}: {len(s):,} characters, more than the {limits.max_stop_chars:,} "
                       "this server takes in a stop string", param)
    return stops


def check_chars(n: int, limit: int, param: str) -> None:
    if n > limit:
        raise over("max_prompt_chars", f"{param}: {n:,} characters of text, more than the {limit:,} this server "
                   "takes in one request", param)


class MediaBudget:
    """One request's media, admitted from their headers before any is decoded: the count of images,
    each image's pixels and all of them together, the seconds of all audio."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.images = 0
        self.pixels = 0
        self.seconds = 0.0
        self.admitted: list[Encoded] = []

    def admit(self, medium: Encoded) -> Encoded:
        lim = self.limits
        if medium.kind == "image":
            self.images += 1
            if self.images > lim.max_images:
                raise over("max_images", f"{medium.param}: more than {lim.max_images} images in one request",
                           medium.param)
            self.pixels += int(measure(medium, lim.media))
            if self.pixels > lim.max_request_pixels:
                raise over("max_request_pixels", f"{medium.param}: the request's images have {self.pixels:,} pixels, "
                           f"more than the {lim.max_request_pixels:,} this server decodes for one request",
                           medium.param, "media_too_large")
        elif medium.kind == "audio":
            self.seconds += measure(medium, lim.media)
            if self.seconds > lim.max_audio_seconds:
                raise over("max_audio_seconds", f"{medium.param}: the request's audio is {self.seconds:,.1f} s long, "
                           f"more than the {lim.max_audio_seconds:g} s this server takes", medium.param,
                           "media_too_large")
        self.admitted.append(medium)
        return medium

    def decode(self, medium: Encoded) -> Any:
        """A medium admitted before, as the component takes it (media.decode_encoded)."""
        return decode_encoded(medium, self.limits.media)
