"""The base of every kv component: the per-request hooks and the scheduler's questions, answered
from one `KVCacheEngine` (`self.kv`), so that a family writes only its layers and its entries.

A family sets `self.kv` in its constructor and says, per entry, how many tokens a call writes
(`input_tokens`) and whether it may be written in chunks (`chunked_entries`: a causal prompt).
Everything else — fork, export/import between ranks, checkpoint/restore around speculation,
release, preemption, counters, the pages a call needs and the limits it can never meet — is here.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from torch import nn
from wgc.runtime.components.base import Call, Component
from wgc.runtime.engines.capture_report import CaptureReport
from wgc.runtime.engines.cpu_linear import pack_linears, warm_packed
from wgc.runtime.engines.decode_graphs import DecodeGraphs, DecodeStep
from wgc.runtime.engines.kv_engine import KVCacheEngine
from wgc.runtime.worker.scheduler import Demand

T = TypeVar("T")


def in_waves(items: list[T], key: Callable[[T], Hashable], run: Callable[[list[T]], list[Any]]) -> list[Any]:
    """`run` over waves of `items` in which each key appears once, the results in the items' order."""
    keys = [key(x) for x in items]
    if len(set(keys)) == len(keys):  # the usual step (a decode round's rows): one wave, the items as given
        return run(items)
    out: list[Any] = [None] * len(items)
    pending = list(range(len(items)))
    while pending:
        seen: set[Hashable] = set()
        wave, later = [], []
        for i in pending:
            k = key(items[i])
            (later if k in seen else wave).append(i)
            seen.add(k)
        for i, value in zip(wave, run([items[i] for i in wave])):
            out[i] = value
        pending = later
    return out


class KVComponent(Component):
    kv: KVCacheEngine
    chunked_entries: frozenset[str] = frozenset()  # entries whose calls may be written over several rounds
    read_only_entries: frozenset[str] = frozenset()  # entries that read the cache and write nothing
    graph_entries: frozenset[str] = frozenset()  # one-token decode entries captured as CUDA graphs
    # entries whose calls of one round may run in one forward: `call_mixed([(entry, calls), ...])` gives
    # each part's results (the batcher's mixed dispatch, batching.py)
    mixed_entries: frozenset[str] = frozenset()
    graphs: DecodeGraphs
    packed_model: nn.Module | None = None  # the model whose CPU products `use_graphs` packed (warmed at start-up)

    def use_graphs(self, model: nn.Module, context: int) -> None:
        """Capture `graph_entries` as `model(tokens, positions, step)` over this engine's pages, for
        rows of up to `context` tokens. The storage's page `num_pages` (one more than the allocator
        hands out) is the scratch page a replay's padding rows write to. On CPU the model's matrix
        products go through oneDNN over packed weights (cpu_linear.py: 2-2.7x at a decode batch)."""
        kv = self.kv
        if kv.device.type == "cpu" and pack_linears(model):
            self.packed_model = model
        max_pages = -(-min(kv.geometry.max_positions, context) // kv.page_size)
        step = DecodeStep(model, kv.storage, kv.page_size, kv.pages.num_pages * kv.page_size)
        self.graphs = DecodeGraphs(step, max_pages, kv.device)

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """On CPU: the packed weights packed and oneDNN's kernels built for every decode row count up to
        `max_batch` now, not by the first requests (cpu_linear.warm_packed: the 34M shape's first prompt
        paid ~0.3 s, each new decode batch size ~5 ms)."""
        if self.packed_model is None:
            return
        rows = int(self.spec.settings.get("max_batch") or 1)
        products = warm_packed(self.packed_model, range(1, rows + 1))
        if products:
            progress(f"packed weights ready, {products} products run at 1-{rows} rows")

    def capture(self, entry: str, walk: str, buckets: list[int], progress: Callable[[str], None]) -> CaptureReport:
        """CUDA graphs of a decode entry, one per bucket (largest first); every other entry runs eagerly."""
        if entry not in self.graph_entries or getattr(self, "graphs", None) is None:
            return CaptureReport.eager_only(f"{entry} takes a varying number of tokens per call: runs eagerly")
        if self.kv.device.type != "cuda":
            return CaptureReport.eager_only(f"on {self.device}: {entry} runs eagerly")
        self.kv.planner.discard()  # no side-thread planning while a graph is captured
        return self.graphs.capture(buckets, progress)

    # ---- what a family says about its entries ---------------------------------------------

    def input_tokens(self, entry: str, call: Call) -> int:
        """Tokens the call writes in all (its whole prompt, 1 for a decode step)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how many tokens `{entry}` writes")

    def call_mixed(self, parts: list[tuple[str, list[Call]]]) -> list[list[Any]]:
        raise NotImplementedError(f"{type(self).__name__} runs no entries together")

    def label_of(self, call: Call) -> str:
        return call.label or self.default_label()

    def waves(self, calls: list[Call], run: Callable[[list[Call]], list[Any]]) -> list[Any]:
        """`run` over waves in which each (request, label) appears once (normally one wave: a label
        written twice in one step would see neither write), the results in the calls' order."""
        return in_waves(calls, lambda c: (c.request, self.label_of(c)), run)

    # ---- the scheduler's questions ---------------------------------------------------------

    def demands(self, entry: str, calls: list[Call]) -> list[Demand] | None:
        """What each call needs of the pool, in one pass over the calls with one allocator query (the
        engine's `pages_for` and `limit_error` per call asked it a dozen times a row); the limit's
        message is written only for a call over it."""
        kv = self.kv
        chunkable = entry in self.chunked_entries
        read_only = entry in self.read_only_entries
        default = self.default_label()
        keys = [(c.request, c.label or default) for c in calls]  # label_of, without a call a row
        seqs, ps = kv.seqs, kv.page_size
        limit, room = kv.geometry.max_positions, kv.pages.num_pages * ps
        out: list[Demand] = []
        for c, key, (length, shared) in zip(calls, keys, kv.pages.tails(keys)):
            total = self.input_tokens(entry, c)
            seq = seqs.get(key)
            left, position, setup = total, 0, 1 if shared else 0  # a shared partial last page is copied first
            if seq is not None:
                left, position = total - seq.progress, seq.position
                if seq.swapped is not None:  # preempted: brought back (all its pages) before the write
                    length = seq.swapped.length
                    setup = -(-length // ps)
            error = ""
            if not read_only and (position + left > limit or length + left > room):
                error = self.limit_error(c.request, key[1], total, left)
            out.append(Demand(c.request, 0 if read_only else left, chunkable, ps, (-length) % ps, setup, error))
        return out

    def limit_error(self, request: int, label: str, total: int, left: int) -> str:
        """Why writing `left` more tokens (of a call of `total`) can never succeed, or ''."""
        kv = self.kv
        seq = kv.seq(request, label)
        position = seq.position if seq is not None else 0
        limit = kv.geometry.max_positions
        fresh = kv.length(request, label) == 0 and (seq is None or not seq.progress)
        if position + left > limit:
            if fresh:
                return f"the input is {total} tokens, more than the model's {limit} positions"
            return f"the sequence would reach {position + left} tokens, past the model's {limit} positions"
        pages = -(-(kv.length(request, label) + left) // kv.page_size)
        if pages > kv.pages.num_pages:
            return (f"the input needs {pages} KV pages of {kv.page_size} tokens, more than the whole pool "
                    f"({kv.pages.num_pages} pages) of {self.spec.name}")
        return ""

    def preempt(self, request: int) -> int:
        return self.kv.preempt(request)

    def pool_holders(self) -> dict[int, int]:
        return self.kv.holders()

    def pool_free(self) -> int:
        return self.kv.pages.free_pages

    # ---- per-request state -----------------------------------------------------------------

    def fork(self, request: int, target: str, source: str) -> None:
        self.kv.fork(request, target, source)

    def export_label(self, request: int, label: str) -> Any:
        return self.kv.export_label(request, label)

    def import_label(self, request: int, label: str, state: Any) -> None:
        self.kv.import_label(request, label, state)

    def checkpoint(self, request: int, label: str) -> Any:
        return self.kv.checkpoint(request, label)

    def restore(self, request: int, label: str, checkpoint: Any) -> None:
        self.kv.restore(request, label, checkpoint)

    def release(self, request: int) -> None:
        self.kv.release(request)

    def counters(self) -> dict[str, int]:
        return self.kv.counters()
