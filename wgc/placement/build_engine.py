"""Engine settings: a component's `engine` table over `[defaults.engine]`, and their rules.

Sizing of the KV pool (`kv_memory_fraction` or `kv_memory`) is taken as a whole from the most
specific table that sets either; every other key is overridden key by key. Settings from
`[defaults.engine]` that only make sense for kv components are not applied to stateless ones;
the same settings written in a stateless component's own table are an error.
"""

from __future__ import annotations

from typing import TypeVar

from wgc.lang.span import Span
from wgc.placement.fields import Ctx
from wgc.placement.keys import Fields
from wgc.placement.schema import Cluster, Engine
from wgc.placement.tables import DEFAULT_MAX_BATCH, DEFAULT_PAGE_SIZE, DEFAULT_PREFIX_CACHING, DEFAULT_TOKEN_BUDGET
from wgc.placement.units import fmt_bytes

T = TypeVar("T")

KV_ONLY: tuple[str, ...] = ("kv_memory_fraction", "kv_memory", "page_size", "token_budget", "prefix_caching")
SIZING: tuple[str, ...] = ("kv_memory_fraction", "kv_memory")


def check_engine_table(f: Fields, cluster: Cluster, ctx: Ctx) -> None:
    """Rules that hold for one engine table on its own (a component's or the defaults')."""
    fraction, at = f.float("kv_memory_fraction"), f.at("kv_memory_fraction")
    if fraction is not None and at is not None:
        if not 0 < fraction <= 1:
            ctx.error("P018", f"kv_memory_fraction must be in (0, 1], found {at.value}", at.span,
                      ("it is the share of the rank's memory given to this component's KV pool",))
        elif cluster.memory is None:
            ctx.error("P018", "kv_memory_fraction on a CPU rank needs cluster.memory (the budget per rank)",
                      at.span, ('set cluster.memory, or size the pool with kv_memory = "256MiB"',))
    pool, pool_at = f.int("kv_memory"), f.at("kv_memory")
    if pool is not None and pool_at is not None and cluster.memory is not None and pool > cluster.memory:
        ctx.error("P018", f"kv_memory {fmt_bytes(pool)} is more than the rank's memory, {fmt_bytes(cluster.memory)} "
                  f"({cluster.memory_source})", pool_at.span,
                  ("the KV pool is allocated on each rank that holds the component: lower kv_memory, or use "
                   "kv_memory_fraction",))
    buckets, bat, max_batch = f.ints("cuda_graph_buckets"), f.at("cuda_graph_buckets"), f.int("max_batch")
    if buckets is not None and max_batch is not None:
        _check_batch("", [f], buckets, max_batch, f.node.key, ctx)
    budget = f.int("token_budget")
    if budget is not None and max_batch is not None:
        _check_budget("", [f], budget, max_batch, ctx)
    if f.has("kv_memory_fraction") and f.has("kv_memory"):
        ctx.error("P018", "set kv_memory_fraction or kv_memory, not both", f.key_span("kv_memory"))
    if buckets is not None and bat is not None and bat.is_array:
        if cluster.device != "cuda" and buckets:
            ctx.error("P018", 'CUDA-graph buckets need cluster.device = "cuda"', bat.span,
                      ("a CPU rank runs eagerly: remove cuda_graph_buckets",))
        for prev, b, node in zip(buckets, buckets[1:], bat.value[1:]):
            if b <= prev:
                ctx.error("P018", f"cuda_graph_buckets must be strictly increasing: {b} follows {prev}", node.span)
                break


def default_token_budget(device: str, max_batch: int) -> int:
    """The token budget when none is set: the device's, at least one round of max_batch decodes."""
    return max(DEFAULT_TOKEN_BUDGET.get(device, DEFAULT_TOKEN_BUDGET["cpu"]), max_batch)


def build_engine(
    kind: str, name: str, own: Fields | None, defaults: Fields | None, span: Span, device: str, ctx: Ctx
) -> Engine:
    """The effective settings of component `name` (engine `kind`, on a `device` cluster), with the
    rules across tables."""
    if own is not None and kind != "kv":
        for key in KV_ONLY:
            if own.has(key):
                ctx.error("P018", f"`{key}` applies to kv components; {name} is {kind}", own.key_span(key))
    layers = [t for t in (defaults, own) if t is not None]
    values: dict[str, object] = {}
    for t in layers:
        for key, (value, _) in t.values.items():
            if key not in SIZING and (kind == "kv" or key not in KV_ONLY):
                values[key] = value
    sizing = next((t for t in reversed(layers) if any(t.has(k) for k in SIZING)), None)
    if kind == "kv" and sizing is None:
        ctx.error("P018", f"kv component {name} has no KV pool size", span,
                  (f"set kv_memory_fraction (of the rank's memory) or kv_memory in [components.{name}.engine] "
                   "or [defaults.engine]",))
    fraction = sizing.float("kv_memory_fraction") if sizing and kind == "kv" else None
    kv_memory = sizing.int("kv_memory") if sizing and kind == "kv" else None
    buckets = _typed(values.get("cuda_graph_buckets"), tuple, ())
    max_batch = _typed(values.get("max_batch"), int, max(buckets) if buckets else DEFAULT_MAX_BATCH)
    _check_batch(name, layers, buckets, max_batch, span, ctx)
    budget = values.get("token_budget")
    if isinstance(budget, int):
        _check_budget(name, layers, budget, max_batch, ctx)
    return Engine(
        kv_memory_fraction=fraction if fraction is not None and 0 < fraction <= 1 else None,
        kv_memory=kv_memory,
        page_size=_typed(values.get("page_size"), int, DEFAULT_PAGE_SIZE),
        cuda_graph_buckets=buckets,
        max_batch=max_batch,
        token_budget=_typed(budget, int, default_token_budget(device, max_batch)),
        prefix_caching=_typed(values.get("prefix_caching"), bool, DEFAULT_PREFIX_CACHING),
    )


def _typed(value: object, kind: type[T], default: T) -> T:
    return value if isinstance(value, kind) else default


def _check_batch(name: str, layers: list[Fields], buckets: tuple[int, ...], max_batch: int, span: Span, ctx: Ctx) -> None:
    """max_batch must reach the largest bucket. With `name` empty: one table on its own; with a
    name: a component whose two settings come from different tables (else already reported)."""
    if not buckets or max_batch >= max(buckets):
        return
    source_b = next((t for t in reversed(layers) if t.at("cuda_graph_buckets")), None)
    source_m = next((t for t in reversed(layers) if t.at("max_batch")), None)
    if name and source_b is source_m:
        return
    at = source_m.at("max_batch") if source_m else None
    where = at.span if at else span
    whose = f" of {name}" if name else ""
    ctx.error("P018", f"max_batch {max_batch}{whose} is smaller than the largest CUDA-graph bucket {max(buckets)}",
              where, ("a bucket larger than max_batch is never used: raise max_batch or drop the bucket",))


def _check_budget(name: str, layers: list[Fields], budget: int, max_batch: int, ctx: Ctx) -> None:
    """token_budget must hold a round of max_batch decodes (one token each). Reported at the
    token_budget, like `_check_batch`: with a name, only when the two come from different tables."""
    if budget >= max_batch:
        return
    source_t = next(t for t in reversed(layers) if t.at("token_budget"))
    source_m = next((t for t in reversed(layers) if t.at("max_batch")), None)
    if name and source_t is source_m:
        return
    at = source_t.at("token_budget")
    whose = f" of {name}" if name else ""
    ctx.error("P018", f"token_budget {budget}{whose} is smaller than max_batch {max_batch}",
              at.span if at else source_t.node.key,
              (f"a round of {max_batch} decodes writes {max_batch} tokens: raise token_budget to at least "
               f"{max_batch}, or lower max_batch",))
