"""Engine settings: a component's `engine` table over `[defaults.engine]`, and their rules.

Sizing of the KV pool (`kv_memory_fraction` or `kv_memory`) is taken as a whole from the most
specific table that sets either; every other key is overridden key by key. Settings from
`[defaults.engine]` that only make sense for kv components are not applied to stateless ones;
the same settings written in a stateless component's own table are an error. A rule between two
keys of one table is reported once, for that table; across tables, once per component.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from wgc.lang.span import Span
from wgc.placement.fields import Ctx
from wgc.placement.schema import Cluster, Engine
from wgc.placement.spec import EngineTable, default
from wgc.placement.tables import DEFAULT_MAX_BATCH, DEFAULT_PREFILL_TOKEN_BUDGET, DEFAULT_TOKEN_BUDGET
from wgc.placement.units import fmt_bytes

KV_ONLY: tuple[str, ...] = tuple(f.name for f in fields(EngineTable) if f.metadata.get("kv_only"))
SIZING: tuple[str, ...] = ("kv_memory_fraction", "kv_memory")


def check_engine_table(t: EngineTable, cluster: Cluster, ctx: Ctx) -> None:
    """Rules that hold for one engine table on its own (a component's or the defaults')."""
    fraction, at = t.kv_memory_fraction, t.at("kv_memory_fraction")
    if fraction is not None and at is not None:
        if not 0 < fraction <= 1:
            ctx.error("P018", f"kv_memory_fraction must be in (0, 1], found {at.value}", at.span,
                      ("it is the share of the rank's memory given to this component's KV pool",))
        elif cluster.memory is None:
            ctx.error("P018", "kv_memory_fraction on a CPU rank needs cluster.memory (the budget per rank)",
                      at.span, ('set cluster.memory, or size the pool with kv_memory = "256MiB"',))
    pool, pool_at = t.kv_memory, t.at("kv_memory")
    if pool is not None and pool_at is not None and cluster.memory is not None and pool > cluster.memory:
        ctx.error("P018", f"kv_memory {fmt_bytes(pool)} is more than the rank's memory, {fmt_bytes(cluster.memory)} "
                  f"({cluster.memory_source})", pool_at.span,
                  ("the KV pool is allocated on each rank that holds the component: lower kv_memory, or use "
                   "kv_memory_fraction",))
    _check_sizes("", [t], t.cuda_graph_buckets or (), t.max_batch, t.token_budget, t.prefill_token_budget,
                 t.token_budget, ctx)
    if t.has("kv_memory_fraction") and t.has("kv_memory"):
        ctx.error("P018", "set kv_memory_fraction or kv_memory, not both", t.key_span("kv_memory"))
    buckets, nodes = t.cuda_graph_buckets, t.node.get("cuda_graph_buckets")
    if buckets and nodes is not None:
        if cluster.device != "cuda":
            ctx.error("P018", 'CUDA-graph buckets need cluster.device = "cuda"', nodes.span,
                      ("a CPU rank runs eagerly: remove cuda_graph_buckets",))
        for prev, b, node in zip(buckets, buckets[1:], nodes.elements()[1:]):
            if b <= prev:
                ctx.error("P018", f"cuda_graph_buckets must be strictly increasing: {b} follows {prev}", node.span)
                break


def default_token_budget(device: str, max_batch: int) -> int:
    """The token budget when none is set: the device's, at least one round of max_batch decodes."""
    return max(DEFAULT_TOKEN_BUDGET.get(device, DEFAULT_TOKEN_BUDGET["cpu"]), max_batch)


def default_prefill_token_budget(device: str, token_budget: int) -> int:
    """A round of prompts alone when none is set: the device's, at least the token budget."""
    return max(DEFAULT_PREFILL_TOKEN_BUDGET.get(device, DEFAULT_PREFILL_TOKEN_BUDGET["cpu"]), token_budget)


def build_engine(kind: str, name: str, own: EngineTable | None, defaults: EngineTable | None, span: Span, device: str,
                 ctx: Ctx) -> Engine:
    """The effective settings of component `name` (engine `kind`, on a `device` cluster), with the
    rules across tables."""
    if own is not None and kind != "kv":
        for k in KV_ONLY:
            if own.has(k):
                ctx.error("P018", f"`{k}` applies to kv components; {name} is {kind}", own.key_span(k))
    layers = [t for t in (defaults, own) if t is not None]

    def value(k: str) -> Any:
        """The most specific valid value of `k` where this component may have it, else its default."""
        source = None if kind != "kv" and k in KV_ONLY else _source(layers, k)
        return getattr(source, k) if source is not None else default(EngineTable, k)

    sizing = next((t for t in reversed(layers) if any(t.has(k) for k in SIZING)), None) if kind == "kv" else None
    if kind == "kv" and sizing is None:
        ctx.error("P018", f"kv component {name} has no KV pool size", span,
                  (f"set kv_memory_fraction (of the rank's memory) or kv_memory in [components.{name}.engine] "
                   "or [defaults.engine]",))
    fraction = sizing.kv_memory_fraction if sizing else None
    buckets: tuple[int, ...] = value("cuda_graph_buckets") or ()
    max_batch: int = value("max_batch") or (max(buckets) if buckets else DEFAULT_MAX_BATCH)
    given: int | None = value("token_budget")
    budget = given if given is not None else default_token_budget(device, max_batch)
    prefill: int | None = value("prefill_token_budget")
    _check_sizes(name, layers, buckets, max_batch, given, prefill, budget, ctx)
    return Engine(
        kv_memory_fraction=fraction if fraction is not None and 0 < fraction <= 1 else None,
        kv_memory=sizing.kv_memory if sizing else None,
        page_size=value("page_size"),
        cuda_graph_buckets=buckets,
        max_batch=max_batch,
        token_budget=budget,
        prefill_token_budget=prefill if prefill is not None else default_prefill_token_budget(device, budget),
        prefix_caching=value("prefix_caching"),
    )


def _source(layers: list[EngineTable], k: str) -> EngineTable | None:
    """The most specific table giving a valid `k`."""
    return next((t for t in reversed(layers) if getattr(t, k) is not None), None)


def _check_sizes(name: str, layers: list[EngineTable], buckets: tuple[int, ...], max_batch: int | None,
                 budget: int | None, prefill: int | None, prefill_floor: int | None, ctx: Ctx) -> None:
    """max_batch covers the largest CUDA-graph bucket, a round of max_batch decodes (one token
    each) fits in the token budget, and a round of prompts alone takes no fewer tokens than
    `prefill_floor` (the token budget: a table's own, or a component's given or by default). A
    value None is not checked. With `name` empty: one table on its own; with a name: a component
    whose two settings come from different tables (else already reported for that table)."""
    rules = [("max_batch", max_batch, "cuda_graph_buckets", max(buckets) if buckets else 0,
              f"the largest CUDA-graph bucket {max(buckets) if buckets else 0}",
              "a bucket larger than max_batch is never used: raise max_batch or drop the bucket"),
             ("token_budget", budget, "max_batch", max_batch, f"max_batch {max_batch}",
              f"a round of {max_batch} decodes writes {max_batch} tokens: raise token_budget to at least "
              f"{max_batch}, or lower max_batch"),
             ("prefill_token_budget", prefill, "token_budget", prefill_floor, f"the token budget {prefill_floor}",
              "it is what a round with no decode in it may take, at least any round's budget: raise "
              "prefill_token_budget, or lower token_budget")]
    for key, value, other, least, what, advice in rules:
        source = _source(layers, key)
        if value is None or least is None or value >= least or source is None or (
                name and source is _source(layers, other)):
            continue
        whose = f" of {name}" if name else ""
        ctx.error("P018", f"{key} {value}{whose} is smaller than {what}", source.node.children()[key].span, (advice,))
