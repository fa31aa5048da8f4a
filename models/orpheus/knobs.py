"""The environment knobs the Orpheus components read (defined with every other knob in
wgc/settings.py); the components choose and announce their weights with models/weights_io.py."""

from __future__ import annotations

from pathlib import Path

from wgc import settings


def orpheus_dir() -> Path | None:
    return settings.weights_dir("WGC_ORPHEUS_DIR")


def snac_dir() -> Path | None:
    return settings.weights_dir("WGC_SNAC_DIR")



def snac_whole_windows() -> bool:
    """WGC_SNAC_WHOLE_WINDOWS=1: decode every window whole and slice the kept frame (the way before
    the kept-region decoder), for comparing the two (bench/peer/orpheus.py)."""
    return settings.snac_whole_windows()
