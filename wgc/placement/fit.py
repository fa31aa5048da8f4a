"""Does the plan fit? Diagnostics from the memory table: a rank over budget (with the arithmetic),
a KV pool shorter than one sequence, a stream whose buffer cannot be sized.

Only bounded ranks are checked: a CPU rank without `cluster.memory` runs tiny presets whose
sizes are not the ones the program declares, so its table is shown but not enforced.
"""

from __future__ import annotations

from wgc.diag.diagnostic import Diagnostic, Note
from wgc.placement.facts import ProgramFacts
from wgc.placement.memory import MemoryTable
from wgc.placement.schema import Placement
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
    out: list[Diagnostic] = []
    cluster = placement.cluster
    for rank in table.ranks:
        if rank.fits or rank.budget is None:
            continue
        over = rank.total - rank.budget
        message = (f"rank {rank.rank} needs {fmt_bytes(rank.total)} but has {fmt_bytes(rank.budget)} "
                   f"({rank.budget_source}): {fmt_bytes(over)} over")
        biggest = max(rank.lines, key=lambda line: line.bytes)
        advice = f"the largest item is the {biggest.kind} of {biggest.owner or 'the runtime'}: {ADVICE[biggest.kind]}"
        out.append(Diagnostic("P022", message, cluster.memory_span, (*rank.render(), advice)))
    bounded = {r.rank for r in table.ranks if r.budget is not None}
    for kv in table.kv:
        if kv.rank not in bounded or kv.tokens is None or kv.max_seq_len is None or kv.tokens >= kv.max_seq_len:
            continue
        comp = placement.component(kv.component)
        where = comp.span if comp else cluster.memory_span
        declared = facts.components[kv.component].attr_spans.get("max_seq_len")
        notes = (Note(f"max_seq_len of `{kv.component}` is declared here", declared),) if declared else ()
        out.append(Diagnostic(
            "P023",
            f"the KV pool of `{kv.component}` on rank {kv.rank} holds {kv.tokens:,} tokens, "
            f"fewer than one sequence of max_seq_len {kv.max_seq_len:,}",
            where,
            ("raise kv_memory_fraction or kv_memory of this component",),
            notes,
        ))
    for name, why in table.unsized if bounded else ():
        settings = placement.stream(name)
        where = settings.span if settings else facts.streams[name].span
        out.append(Diagnostic(
            "P021", f"cannot size the buffer of stream `{name}`: {why}", where,
            (f'set [streams.{name}] dims = {{ NAME = SIZE }} (`"_" = SIZE` for wildcards), or item_bytes',),
        ))
    return out
