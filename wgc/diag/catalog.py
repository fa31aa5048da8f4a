"""Every diagnostic code of every stage in one table: language (E/W) and placement (P)."""

from __future__ import annotations

import functools

from wgc.diag.codes import CODES, Code


@functools.cache
def all_codes() -> dict[str, Code]:
    from wgc.placement.codes import PLACEMENT_CODES

    return {**CODES, **PLACEMENT_CODES}
