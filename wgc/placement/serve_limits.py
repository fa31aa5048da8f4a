"""`[serve]` request limits: what one request to `wgc run --serve` may ask of the server.

    [serve]
    max_body_bytes = "16MiB"
    max_images = 4
    max_audio_seconds = 60

Each key is a limit of the HTTP frontend (runtime/http/limits.py says what it bounds and its
default); `--limit NAME=VALUE` overrides it when serving. Values are checked here, at their line:
sizes as elsewhere in a placement, counts as positive integers, seconds as a positive number. The
plan carries each one given as the setting `serve.<name>`.
"""

from __future__ import annotations

from wgc.placement.document import Node
from wgc.placement.fields import Ctx, Reader, integer, size

MAX_COUNT = 2**31  # beyond any request the frontend could parse
MAX_SECONDS = 86400.0


def seconds(node: Node, ctx: Ctx) -> float | None:
    value = node.value
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= MAX_SECONDS:
        return float(value)
    ctx.error("P003", f"`{node.path[-1]}`: expected seconds, a number above 0 and at most {MAX_SECONDS:g}, found "
              f"{value!r}"[:200], node.span)
    return None


_COUNT = integer(1, MAX_COUNT)

LIMIT_KEYS: dict[str, Reader] = {
    "max_body_bytes": size,
    "max_media_bytes": size,
    "max_parts": _COUNT,
    "max_images": _COUNT,
    "max_image_pixels": _COUNT,
    "max_request_pixels": _COUNT,
    "max_audio_seconds": seconds,
    "max_prompt_chars": _COUNT,
    "max_prompt_tokens": _COUNT,
    "max_stop": _COUNT,
    "max_stop_chars": _COUNT,
    "max_n": _COUNT,
}


def limits_of(serve: object) -> tuple[tuple[str, int | float], ...]:
    """The limits a `[serve]` table (a keys.Fields, or None) gives, in the order of LIMIT_KEYS."""
    get = getattr(serve, "get", None)
    if get is None:
        return ()
    return tuple((name, get(name)) for name in LIMIT_KEYS if isinstance(get(name), int | float))
