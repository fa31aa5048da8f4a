"""Does the plan fit? Diagnostics from the memory table: a rank over budget (with the arithmetic),
a KV pool shorter than one sequence or one page, a max_batch its pool cannot hold, a stream whose
buffer cannot be sized.

Bounded ranks are checked against their memory. A CPU rank without `cluster.memory` runs tiny
presets whose sizes are not the ones the program declares, so its table is shown but checked
only against what no rank can hold: MAX_SIZE in all, and a KV pool of less than one page.
"""

from __future__ import annotations

from wgc.diag.diagnostic import Diagnostic, Note
from wgc.placement.facts import ProgramFacts
from wgc.placement.memory import KvCapacity, MemoryTable
from wgc.placement.schema import Placement
from wgc.placement.tables import MAX_SIZE
from wgc.placement.units import fmt_bytes

# What to change when a kind of memory line is the largest on a rank that does not fit.
ADVICE: dict[str, str] = {
    "weights": "raise its tp, or move it or another component to another rank",
    "kv pool": "lower its kv_memory_fraction or kv_memory",
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
