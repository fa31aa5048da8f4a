"""Python's cycle collector in a serving process: the start-up heap frozen once it is built.

Why: a `wgc run --serve` process holds some 220,000-270,000 objects once torch, the model family
and the runtime are loaded (the front end and each worker alike), and a full (generation-2)
collection walks every one of them. Measured at the 0.7M Llama shape and 64 streams (1,280 requests,
~13 s of serving, a shared 2-core host): 6 full collections in the front end and 5 in the worker,
15-143 ms each, growing as start-up objects reached the oldest generation. A worker's pause stalls
its whole decode batch; the front end's, every stream's writes. None of the start-up objects
becomes garbage while serving, so once start-up is done they are moved out of the collector's reach
(`gc.freeze`, as vLLM's engine core does after its own start-up): collections then walk only what
serving made. The start-up's own garbage is collected first, so nothing cyclic is kept for good.
WGC_GC_FREEZE=0 leaves the collector as Python sets it.
"""

from __future__ import annotations

import gc

from wgc import settings

_frozen = 0  # objects frozen at start-up: gc.get_freeze_count() walks them all, ~1 ms at 250,000


def freeze_startup_heap() -> int:
    """Collect, then freeze every object alive now; the objects frozen (0 when turned off)."""
    global _frozen
    if not settings.gc_freeze():
        return 0
    gc.collect()
    gc.freeze()
    _frozen = gc.get_freeze_count()
    return _frozen


def gc_counters() -> dict[str, int]:
    """What a health report shows of this process's collector: the objects frozen at start-up (as
    counted then: counting them again would walk them all, and a health report is asked for on every
    scrape), and the full collections run so far (each one walked the whole heap that is not frozen)."""
    return {"gc_frozen_objects": _frozen, "gc_full_collections": gc.get_stats()[2]["collections"]}
