"""Per-rank memory estimate: weights, KV pools (and on CPU their decode mirrors), CUDA-graph pools,
stream buffers, runtime reserve; and whether the plan fits.

Each line keeps the arithmetic that produced it, so a rank that does not fit can print why, and
`wgc inspect` can show the same table. The graph-pool and reserve constants are estimates
(documented in docs/placement.md); everything else follows from the program and the placement.

The fit's diagnostics: a rank over budget (with the arithmetic), a KV pool shorter than one
sequence or one page, a max_batch its pool cannot hold, a stream whose buffer cannot be sized.
Bounded ranks are checked against their memory. A CPU rank without `cluster.memory` runs tiny
presets whose sizes are not the ones the program declares, so its table is shown but checked
only against what no rank can hold: MAX_SIZE in all, and a KV pool of less than one page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wgc.diag.diagnostic import Diagnostic, Note
from wgc.lang import ast
from wgc.placement.facts import ComponentFacts, ProgramFacts, StreamFacts, item_bytes, program_facts, stream_facts
from wgc.placement.schema import ComponentPlacement, Placement
from wgc.placement.tables import DEFAULT_STREAM_CAPACITY, MAX_SIZE
from wgc.placement.units import fmt_bytes, fmt_count

# CUDA-graph pool per captured bucket b: a fixed cost (graph, workspaces) plus the bucket's live
# activations, b × hidden × dtype bytes × GRAPH_ACTIVATION_FACTOR (qkv, attention output and the
# MLP's widened intermediate alive at once). Without `hidden`, only the fixed cost is counted.
GRAPH_FIXED_BYTES = 16 * 2**20
GRAPH_ACTIVATION_FACTOR = 16
# Per rank: CUDA context, communicator buffers and allocator slack the runtime holds.
RUNTIME_RESERVE: dict[str, int] = {"cuda": 2**30, "cpu": 0}


@dataclass(frozen=True)
class MemoryLine:
    kind: str  # "weights" | "kv pool" | "kv mirror" | "cuda graphs" | "stream" | "reserve"
    owner: str  # the component or stream ("" for the reserve)
    bytes: int
    formula: str  # the arithmetic, as printed


@dataclass(frozen=True)
class KvCapacity:
    component: str
    rank: int
    tokens: int | None  # None: the component does not declare its KV shape
    max_seq_len: int | None
    pool: int = 0  # bytes
    page_bytes: int | None = None  # one page of page_size tokens; None: no declared KV shape
    page_formula: str = ""  # "16 tokens × 112.00 KiB/token"

    @property
    def pages(self) -> int | None:
        return None if not self.page_bytes else self.pool // self.page_bytes


@dataclass(frozen=True)
class RankMemory:
    rank: int
    budget: int | None  # None: unbounded (a CPU rank without cluster.memory)
    budget_source: str
    lines: tuple[MemoryLine, ...]

    @property
    def total(self) -> int:
        return sum(line.bytes for line in self.lines)

    @property
    def fits(self) -> bool:
        return self.budget is None or self.total <= self.budget

    def render(self) -> list[str]:
        budget = "unbounded" if self.budget is None else f"{fmt_bytes(self.budget)} ({self.budget_source})"
        out = [f"rank {self.rank}: {budget}"]
        width = max((len(line.formula) for line in self.lines), default=0)
        for line in self.lines:
            out.append(f"  {line.kind:<11} {line.owner:<10} {line.formula:<{width}}  = {fmt_bytes(line.bytes):>11}")
        verdict = "" if self.budget is None else (" fits" if self.fits else f" > {fmt_bytes(self.budget)}")
        out.append(f"  {'total':<11} {'':<10} {'':<{width}}  = {fmt_bytes(self.total):>11}{verdict}")
        return out


@dataclass(frozen=True)
class MemoryTable:
    ranks: tuple[RankMemory, ...]
    kv: tuple[KvCapacity, ...]
    unsized: tuple[tuple[str, str], ...]  # (stream, why its item size is unknown)

    def render(self) -> str:
        return "\n".join(line for r in self.ranks for line in r.render())


def estimate_memory(placement: Placement, program: ast.Program) -> MemoryTable:
    """The per-rank memory table of a loaded placement (what `wgc inspect` shows)."""
    return estimate(placement, program_facts(program))


def estimate(placement: Placement, facts: ProgramFacts) -> MemoryTable:
    cluster = placement.cluster
    kv: list[KvCapacity] = []
    unsized: dict[str, str] = {}
    ranks = []
    for rank in range(cluster.ranks):
        lines: list[MemoryLine] = []
        for comp in placement.on_rank(rank):
            f = facts.components[comp.name]
            lines.append(_weights(comp, f))
            if comp.engine_kind == "kv":
                line, capacity = _kv_pool(comp, f, rank, cluster.memory)
                lines.append(line)
                kv.append(capacity)
                if cluster.device == "cpu" and line.bytes:
                    lines.append(_kv_mirror(line))
            if cluster.device == "cuda" and comp.engine.cuda_graph_buckets:
                lines.append(_graphs(comp, f))
        for stream in facts.streams.values():
            consumer = placement.component(stream.consumer)
            if consumer is not None and rank in consumer.ranks:
                line, why = _stream(stream, placement, facts, consumer)
                lines.append(line)
                if why:
                    unsized[stream.name] = why
        reserve = RUNTIME_RESERVE[cluster.device]
        if reserve:
            lines.append(MemoryLine("reserve", "", reserve, "CUDA context, communicators, allocator slack"))
        ranks.append(RankMemory(rank, cluster.memory, cluster.memory_source, tuple(lines)))
    return MemoryTable(tuple(ranks), tuple(kv), tuple(unsized.items()))


def _weights(comp: ComponentPlacement, f: ComponentFacts) -> MemoryLine:
    if f.params is None:
        return MemoryLine("weights", comp.name, 0, "weights not declared (counted as 0)")
    tp = f" / tp {comp.tp}" if comp.tp > 1 else ""
    formula = f"{fmt_count(f.params)} params × {f.dtype_bytes} B ({f.dtype}){tp}"
    return MemoryLine("weights", comp.name, f.params * f.dtype_bytes // comp.tp, formula)


def _kv_pool(comp: ComponentPlacement, f: ComponentFacts, rank: int, memory: int | None
             ) -> tuple[MemoryLine, KvCapacity]:
    e = comp.engine
    if e.kv_memory is not None:
        pool, formula = e.kv_memory, "kv_memory"
    elif e.kv_memory_fraction is not None and memory is not None:
        pool, formula = int(e.kv_memory_fraction * memory), f"{e.kv_memory_fraction:g} × {fmt_bytes(memory)}"
    else:
        pool, formula = 0, "no KV pool size"
    layers, heads, head_dim = (f.ints.get(k, 0) for k in ("kv_layers", "kv_heads", "head_dim"))
    tokens, page, page_formula = None, None, ""
    if layers > 0 and heads > 0 and head_dim > 0 and pool:
        per_token = 2 * layers * math.ceil(heads / comp.tp) * head_dim * f.dtype_bytes
        page, page_formula = e.page_size * per_token, f"{e.page_size} tokens × {fmt_bytes(per_token)}/token"
        tokens = pool // page * e.page_size
        formula += f" → {tokens:,} tokens at {fmt_bytes(per_token)}/token"
    capacity = KvCapacity(comp.name, rank, tokens, f.ints.get("max_seq_len"), pool, page, page_formula)
    return MemoryLine("kv pool", comp.name, pool, formula), capacity


def _kv_mirror(pool: MemoryLine) -> MemoryLine:
    """A CPU kv component's decode step keeps a dense copy of its batch's K/V across steps
    (runtime/engines/kv_mirror.py), bounded by the pool's own bytes: counted at that bound, as the
    pool is, though it grows only with the batch and is never allocated with WGC_CPU_KV_MIRROR=0."""
    return MemoryLine("kv mirror", pool.owner, pool.bytes, "the kv pool again, at most (the CPU decode mirror)")


def _graphs(comp: ComponentPlacement, f: ComponentFacts) -> MemoryLine:
    buckets, hidden = comp.engine.cuda_graph_buckets, f.ints.get("hidden")
    total, formula = len(buckets) * GRAPH_FIXED_BYTES, f"{len(buckets)} × {fmt_bytes(GRAPH_FIXED_BYTES)}"
    if hidden:
        total += sum(buckets) * hidden * f.dtype_bytes * GRAPH_ACTIVATION_FACTOR // comp.tp
        tp = f" / tp {comp.tp}" if comp.tp > 1 else ""
        formula += f" + {sum(buckets)} × {hidden} × {f.dtype_bytes} B × {GRAPH_ACTIVATION_FACTOR}{tp}"
    return MemoryLine("cuda graphs", comp.name, total, formula + f" (buckets {', '.join(map(str, buckets))})")


def capacity_of(placement: Placement, decl: ast.Stream | StreamFacts) -> int:
    """Items buffered per request on stream `decl`: the placement's, the program's, else the default."""
    stream = stream_facts(decl) if isinstance(decl, ast.Stream) else decl
    settings = placement.stream(stream.name)
    if settings is not None and settings.capacity is not None:
        return settings.capacity
    if stream.capacity is not None:
        return stream.capacity
    return max(DEFAULT_STREAM_CAPACITY, 2 * (stream.chunk_items or 1))  # at least two chunks


def _stream(stream: StreamFacts, placement: Placement, facts: ProgramFacts, consumer: ComponentPlacement
            ) -> tuple[MemoryLine, str]:
    """The stream's buffer on its consumer's rank: capacity × item bytes × max_batch requests."""
    settings = placement.stream(stream.name)
    if settings is not None and settings.item_bytes is not None:
        size, how = settings.item_bytes, f"{settings.item_bytes} B"
    else:
        size, how = item_bytes(stream, dict(settings.dims) if settings else {}, facts.components.get(stream.producer))
    if size is None:
        return MemoryLine("stream", stream.name, 0, f"item size unknown: {how} (counted as 0)"), how
    capacity, requests = capacity_of(placement, stream), consumer.engine.max_batch
    formula = f"{capacity} items × {how} × {requests} requests"
    return MemoryLine("stream", stream.name, capacity * size * requests, formula), ""


# What to change when a kind of memory line is the largest on a rank that does not fit.
ADVICE: dict[str, str] = {
    "weights": "raise its tp, or move it or another component to another rank",
    "kv pool": "lower its kv_memory_fraction or kv_memory",
    "kv mirror": "lower its kv_memory_fraction or kv_memory (the mirror holds at most the pool again), or serve "
                 "with WGC_CPU_KV_MIRROR=0",
    "cuda graphs": "capture fewer or smaller cuda_graph_buckets",
    "stream": "lower the stream's capacity in [streams.NAME]",
    "reserve": "use a device with more memory",
}


def fit_diagnostics(table: MemoryTable, placement: Placement, facts: ProgramFacts) -> list[Diagnostic]:
    out = _over_budget(table, placement)
    bounded = {r.rank for r in table.ranks if r.budget is not None}
    for kv in table.kv:
        found = _kv_problem(kv, kv.rank in bounded, placement, facts)
        if found is not None:
            out.append(found)
    for name, why in table.unsized if bounded else ():
        settings = placement.stream(name)
        where = settings.span if settings else facts.streams[name].span
        out.append(Diagnostic(
            "P021", f"cannot size the buffer of stream `{name}`: {why}", where,
            (f'set [streams.{name}] dims = {{ NAME = SIZE }} (`"_" = SIZE` for wildcards), or item_bytes',),
        ))
    return out


def _over_budget(table: MemoryTable, placement: Placement) -> list[Diagnostic]:
    """P022 for each rank over its memory; an unbounded rank is held to MAX_SIZE (no rank holds more)."""
    out = []
    for rank in table.ranks:
        budget = MAX_SIZE if rank.budget is None else rank.budget
        if rank.total <= budget:
            continue
        has = f"has {fmt_bytes(budget)} ({rank.budget_source})" if rank.budget is not None else \
            f"no rank holds more than {fmt_bytes(MAX_SIZE)}"
        message = f"rank {rank.rank} needs {fmt_bytes(rank.total)} but {has}: {fmt_bytes(rank.total - budget)} over"
        biggest = max(rank.lines, key=lambda line: line.bytes)
        advice = f"the largest item is the {biggest.kind} of {biggest.owner or 'the runtime'}: {ADVICE[biggest.kind]}"
        out.append(Diagnostic("P022", message, placement.cluster.memory_span, (*rank.render(), advice)))
    return out


def _kv_problem(kv: KvCapacity, bounded: bool, placement: Placement, facts: ProgramFacts) -> Diagnostic | None:
    """A pool below one page (any rank); on a bounded rank, below one sequence, or fewer pages than max_batch."""
    comp = placement.component(kv.component)
    where = comp.span if comp else placement.cluster.memory_span
    if kv.page_bytes is not None and kv.pool < kv.page_bytes:
        return Diagnostic(
            "P023", f"the KV pool of `{kv.component}` on rank {kv.rank} is {fmt_bytes(kv.pool)}, less than one page "
            f"({kv.page_formula} = {fmt_bytes(kv.page_bytes)}): every request would fail", where,
            (f"raise kv_memory of this component to at least {fmt_bytes(kv.page_bytes)}, or lower its page_size",))
    if not bounded or kv.tokens is None:
        return None
    if kv.max_seq_len is not None and kv.tokens < kv.max_seq_len:
        declared = facts.components[kv.component].attr_spans.get("max_seq_len")
        notes = (Note(f"max_seq_len of `{kv.component}` is declared here", declared),) if declared else ()
        return Diagnostic(
            "P023", f"the KV pool of `{kv.component}` on rank {kv.rank} holds {kv.tokens:,} tokens, "
            f"fewer than one sequence of max_seq_len {kv.max_seq_len:,}", where,
            ("raise kv_memory_fraction or kv_memory of this component",), notes)
    batch = comp.engine.max_batch if comp else 0
    if kv.pages is not None and batch > kv.pages:
        return Diagnostic(
            "P018", f"max_batch {batch:,} of `{kv.component}` is more than the {kv.pages:,} pages its KV pool holds "
            f"on rank {kv.rank}: a batch of {batch:,} requests, each holding a page at least, can never form", where,
            (f"lower max_batch to at most {kv.pages:,}, or raise the KV pool",))
    return None
