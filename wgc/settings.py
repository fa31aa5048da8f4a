"""Every environment knob wgc reads, in one place; all are prefixed WGC_."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Per-user cache: WGC_CACHE_DIR, else $XDG_CACHE_HOME/wgc, else ~/.cache/wgc."""
    explicit = os.environ.get("WGC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "wgc"


def max_nesting() -> int:
    """Deepest bracket nesting a .walk program may use (WGC_MAX_NESTING, default 64)."""
    try:
        return max(8, int(os.environ.get("WGC_MAX_NESTING", "64")))
    except ValueError:
        return 64


def color_enabled(stream_is_tty: bool) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return stream_is_tty and "NO_COLOR" not in os.environ
