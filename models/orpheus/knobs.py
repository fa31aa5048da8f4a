"""The environment knobs the Orpheus components read (defined with every other knob in
wgc/settings.py), and the one line each component logs about the weights it runs."""

from __future__ import annotations

import logging
from pathlib import Path

from wgc import settings

log = logging.getLogger("wgc.models.orpheus")


def orpheus_dir() -> Path | None:
    return settings.weights_dir("WGC_ORPHEUS_DIR")


def snac_dir() -> Path | None:
    return settings.weights_dir("WGC_SNAC_DIR")


def announce(component: str, knob: str | None, fallback: str, source: str, detail: str) -> None:
    """The one line a component logs about what it runs. With `knob` (the weights' WGC_ variable,
    left unset), a warning that it fell back to `fallback` on random weights; else what it loaded."""
    if knob is not None:
        log.warning("orpheus %s: no weights given (%s unset), running %s with random weights; %s",
                    component, knob, fallback, detail)
    else:
        log.info("orpheus %s: %s; %s", component, source, detail)
