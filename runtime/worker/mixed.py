"""One forward for several entries of one component: a round's decode calls beside its prefill calls.

vLLM's scheduler puts the running sequences' decode tokens and the new prompts' chunks in one
batch; wgc's walks reach them as two entries (`lm.decode` in one walk, `lm.prefill` in another),
which the batcher ran as two batched calls, so a round with a new request read the weights twice.
A kv component that can run them together lists them in `mixed_entries` and answers
`call_mixed([(entry, calls), ...])` (models/layers/paged_llama.py). The batcher then dispatches
that component's entries of a round as one batch (`Batcher.together` groups them):

1. the calls of every part are built over all the instances (one lane each);
2. the scheduler decides them as one batch: its order already puts decodes before chunkable
   prompts, so the round's token budget goes to the running sequences first, then prompt chunks;
3. one `call_mixed`; if it raises, each part runs alone through the general path, with its fault
   isolation (a kv step that raised was undone by the engine);
4. results, PARTIAL chunks and deferrals exactly as a single entry's.

Anything else — a part alone, several lanes, more calls than `max_batch` — is dispatched entry by
entry as before.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from wgc.runtime.worker.batching import CallBatch

if TYPE_CHECKING:
    from wgc.runtime.worker.batching import Batcher
    from wgc.runtime.worker.instance import Instance


def dispatch_mixed(b: Batcher, component: str, parts: list[tuple[str, list[Instance]]]) -> bool:
    """Run a round's calls of several entries of `component` in one forward; whether any call ran."""
    parts = [(entry, group) for entry, group in parts if group]
    comp = b.ex.components[component]
    limit = int(comp.spec.settings.get("max_batch", 0) or 0)
    whole = [inst for _, group in parts for inst in group]
    if len(parts) < 2 or (limit and len(whole) > limit) or any(len(i.code[i.pc].labels) != 1 for i in whole):
        ran = False
        for entry, group in parts:
            ran = b.dispatch(component, entry, group) or ran
        return ran
    failures = b.ex.failures
    entry_of = [entry for entry, group in parts for _ in group]  # per instance of `whole`
    batch = b._build(comp, whole)
    entries = [entry_of[owner] for owner in batch.owners]  # per call
    demands: list[Any] | None = []
    for entry, start, stop in _spans(entries):
        part = comp.demands(entry, batch.calls[start:stop])
        demands = None if part is None or demands is None else demands + part
    stays: set[int] = set()
    if batch.calls and demands is not None:
        batch, stays = b._schedule(comp, component, entries, whole, batch, demands)
    ran = _run(b, comp, component, whole, batch, [entry_of[owner] for owner in batch.owners], stays, failures)
    b._move_on(whole, stays)
    return ran


def _spans(entries: list[str]) -> list[tuple[str, int, int]]:
    """(entry, start, stop) of each run of equal entries (a part's calls are adjacent)."""
    out: list[tuple[str, int, int]] = []
    for i, entry in enumerate(entries):
        if out and out[-1][0] == entry:
            out[-1] = (entry, out[-1][1], i + 1)
        else:
            out.append((entry, i, i + 1))
    return out


def _run(b: Batcher, comp: Any, component: str, whole: list[Instance], batch: Any, entries: list[str],
         stays: set[int], failures: int) -> bool:
    calls, owners, outs = batch.calls, batch.owners, batch.outs
    if not calls:
        return False
    spans = _spans(entries)
    if len(spans) > 1 and b.ex.failures == failures:
        began = time.perf_counter()
        try:
            results = comp.call_mixed([(entry, calls[start:stop]) for entry, start, stop in spans])
            if [len(r) for r in results] != [stop - start for _, start, stop in spans]:
                raise RuntimeError(f"{component}.call_mixed returned a wrong number of results")
        except Exception:  # noqa: BLE001 - each part runs alone below, with its own fault isolation
            pass
        else:
            spent = time.perf_counter() - began
            b.stats["mixed_calls"] += 1
            for (entry, start, stop), part in zip(spans, results):
                _count(b, component, entry, stop - start, spent * (stop - start) / len(calls))
                b._store(whole, owners, outs, zip(range(start, stop), part), stays)
            return True
    for entry, start, stop in spans:  # one part, or the mixed call failed: entry by entry
        part = CallBatch(calls[start:stop], owners[start:stop], outs[start:stop])
        b._run(comp, component, entry, whole, part, stays, failures)
    return True


def _count(b: Batcher, component: str, entry: str, n: int, seconds: float) -> None:
    """A part's share of the mixed call in the entry's statistics (calls, items, microseconds)."""
    stats = b.ex.stats
    stats["batched_calls"] += 1
    stats["runs"] += n
    totals = b.ex.entry_stats.setdefault((component, entry), [0, 0, 0])
    totals[0] += 1
    totals[1] += n
    totals[2] += int(seconds * 1e6)
