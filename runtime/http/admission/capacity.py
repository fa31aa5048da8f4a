"""How many requests the front door lets run at once, and where that number came from.

Three sources, the first that applies wins:

    option     --max-running / --max-queued (ServeOptions.capacity)
    kv_pool    once the ranks report their KV pools: the requests whose expected KV fits the
               smallest pool; queue 4 x running
    max_batch  the plan's smallest max_batch (every request passes each component's batch);
               queue 2 x running. Plans without kv components, and every plan until its ranks
               report their pools (fake components report none)

Expected KV per request: the component's `max_seq_len`, capped at the expected context
(WGC_EXPECTED_CONTEXT, 2048 tokens), times the cache labels it declares. Requests beyond the
running slots would wait inside the runtime's scheduler anyway (it never fails a request for lack
of pages), so the front door only bounds the work in flight. Pure functions over the plan and a
health report: unit-tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.runtime.api import HealthReport
from wgc.runtime.http.admission.slots import Capacity

from wgc.plan.model import ComponentSpec, Plan

DEFAULT_RUNNING = 8  # a plan that names no max_batch at all
KV_QUEUE_FACTOR = 4
BATCH_QUEUE_FACTOR = 2


@dataclass(frozen=True)
class Sizing:
    capacity: Capacity
    source: str  # "option", "kv_pool" or "max_batch"
    detail: str  # the arithmetic, for /health and the start-up line

    def as_dict(self) -> dict[str, object]:
        return {"running": self.capacity.max_running, "queued": self.capacity.max_queued,
                "source": self.source, "detail": self.detail}


def from_option(capacity: Capacity) -> Sizing:
    return Sizing(capacity, "option", "--max-running / --max-queued")


def from_max_batch(plan: Plan) -> Sizing:
    batches = {s.key.rsplit(".", 1)[0]: s.value for s in plan.settings
               if s.key.endswith(".max_batch") and isinstance(s.value, int)}
    if not batches:
        return Sizing(Capacity(DEFAULT_RUNNING, BATCH_QUEUE_FACTOR * DEFAULT_RUNNING), "max_batch",
                      f"no max_batch in the plan: {DEFAULT_RUNNING}")
    name = min(batches, key=lambda k: batches[k])
    running = int(batches[name])
    return Sizing(Capacity(running, BATCH_QUEUE_FACTOR * running), "max_batch",
                  f"the smallest max_batch: {name}.max_batch = {running}")


def expected_tokens(spec: ComponentSpec, context: int) -> int:
    """KV tokens one request is expected to hold in `spec`'s pool, over all its cache labels."""
    limit = spec.attrs.get("max_seq_len")
    per_label = min(limit, context) if isinstance(limit, int) and limit > 0 else context
    return per_label * max(1, len(spec.labels))


def from_kv_pools(plan: Plan, report: HealthReport, context: int) -> Sizing | None:
    """Running slots from the pools the ranks report (`<component>.kv_pages`); None while no kv
    component has reported one (a plan without kv components, a fake runtime, an unresponsive rank)."""
    best: tuple[int, str] | None = None
    for spec in plan.components:
        if spec.engine != "kv":
            continue
        pages = [r.counters[f"{spec.name}.kv_pages"] for r in report.ranks
                 if r.rank in spec.ranks and isinstance(r.counters.get(f"{spec.name}.kv_pages"), int)]
        if not pages:
            continue
        size = spec.settings.get("page_size")
        page_size = size if isinstance(size, int) and size > 0 else 1
        expected = expected_tokens(spec, context)
        running = max(1, min(pages) * page_size // expected)
        why = (f"{spec.name}: {min(pages)} pages x {page_size} tokens // {expected} expected tokens per request "
               f"(max_seq_len capped at {context}, x {max(1, len(spec.labels))} label(s))")
        if best is None or running < best[0]:
            best = (running, why)
    if best is None:
        return None
    running, why = best
    return Sizing(Capacity(running, KV_QUEUE_FACTOR * running), "kv_pool", why)
