"""Every diagnostic code of every stage in one table: language (E/W) and placement (P)."""

from __future__ import annotations

import functools

from wgc.diag.codes import CODES, PLACEMENT_CODES, Code


@functools.cache
def all_codes() -> dict[str, Code]:
    return {**CODES, **PLACEMENT_CODES}
