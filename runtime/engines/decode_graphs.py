"""A token model's decode step with static shapes, captured as CUDA graphs at start-up (the KV
engine's capture hook: any model called as `model(tokens, positions, step)` over a KVStorage).

`DecodeStep` is one decode forward over the paged KV cache whose every shape depends only on the
batch bucket: inputs padded to the bucket (token ids, positions, block tables padded to a fixed
number of pages per sequence, sequence lengths), attention over the gathered pages with a length
mask (runtime/engines/attention_static.py). It is plain torch and runs on CPU too, where the tests
prove it gives the dynamic path's logits. `DecodeGraphs` wraps it in a GraphRunner on CUDA.

The graph path attends with torch (SDPA over the gathered pages), not FlashInfer: FlashInfer's
wrappers plan on the host per step with data-dependent sizes, and capturing them needs their
CUDA-graph mode with fixed-size index buffers, which is not wired here. The eager path keeps
FlashInfer. The price of static shapes: a captured step reads `max_pages` pages per row whatever
the row's length, so sequences longer than `context` tokens run eagerly (see GRAPH_CONTEXT).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from wgc.runtime.engines.attention import KVStep, KVStorage
from wgc.runtime.engines.attention_static import StaticAttention, plan_static
from wgc.runtime.engines.capture_report import CaptureReport

if TYPE_CHECKING:
    from wgc.runtime.engines.cuda_graphs import GraphRunner

GRAPH_CONTEXT = 2048  # tokens (prompt + generated) a captured decode step covers; longer rows run eagerly


def static_inputs(bucket: int, max_pages: int, device: torch.device) -> dict[str, Tensor]:
    """A bucket's inputs, all zeros (every row padding)."""
    def zeros(*shape: int) -> Tensor:
        return torch.zeros(shape, dtype=torch.int64, device=device)

    return {"tokens": zeros(bucket), "positions": zeros(bucket), "block_table": zeros(bucket, max_pages),
            "seq_lens": zeros(bucket)}


def pack_decode(tokens: Sequence[int], tables: Sequence[Sequence[int]], cached: Sequence[int], max_pages: int,
                rows: int, device: torch.device, positions: Sequence[int] | None = None) -> dict[str, Tensor]:
    """One decode batch as static inputs of `rows` rows (>= len(tokens)); the rows past the batch are padding.
    `cached[b]`: tokens already in row b's pages (its new token goes in the slot after them);
    `positions[b]`: the new token's rope position (by default `cached[b]`: no block was written)."""
    table = torch.zeros(rows, max_pages, dtype=torch.int64)  # [rows, P]
    for b, pages in enumerate(tables):
        table[b, : len(pages)] = torch.as_tensor(pages, dtype=torch.int64)
    n = len(tokens)
    pad = [0] * (rows - n)
    host = {"tokens": torch.tensor([*tokens, *pad], dtype=torch.int64),  # [rows]
            "positions": torch.tensor([*(cached if positions is None else positions), *pad], dtype=torch.int64),
            "block_table": table,
            "seq_lens": torch.tensor([*(c + 1 for c in cached), *pad], dtype=torch.int64)}  # [rows]
    return {k: v.to(device, non_blocking=True) for k, v in host.items()}


class DecodeStep:
    """One decode forward of `model` with static shapes: inputs → logits [B, vocab] in the model's dtype."""

    def __init__(self, model: nn.Module, storage: KVStorage, page_size: int, scratch_slot: int) -> None:
        self.model = model
        self.storage = storage
        self.page_size = page_size
        self.scratch_slot = scratch_slot
        self.attention = StaticAttention()

    def __call__(self, inputs: dict[str, Tensor]) -> Tensor:
        plan = plan_static(inputs["block_table"], inputs["seq_lens"], self.page_size, self.scratch_slot)
        step = KVStep(self.storage, self.attention, plan)
        return self.model(inputs["tokens"], inputs["positions"], step)  # [B, vocab]


class DecodeGraphs:
    """The decode step's CUDA graphs, one per captured bucket; `runner` is None until a capture succeeds."""

    def __init__(self, step: DecodeStep, max_pages: int, device: torch.device) -> None:
        self.step = step
        self.max_pages = max_pages
        self.device = device
        self.runner: GraphRunner | None = None
        self.report: CaptureReport | None = None
        self.replays = 0  # decode batches served by a graph (a counter for health)

    @property
    def context(self) -> int:
        return self.max_pages * self.step.page_size

    def capture(self, buckets: list[int], progress: Callable[[str], None]) -> CaptureReport:
        """Capture every bucket, largest first, into one memory pool; failures are reported, never raised."""
        if self.report is not None:  # a second walk running decode: the graphs are shared
            return self.report
        from wgc.runtime.engines.cuda_graphs import GraphRunner

        runner = GraphRunner(self.step, lambda b: static_inputs(b, self.max_pages, self.device), list(buckets))
        with torch.no_grad():
            runner.capture(progress)
        self.runner = runner if runner.graphs else None
        self.report = CaptureReport(sorted(runner.graphs, reverse=True), dict(runner.failed),
                                    "" if runner.graphs else "every bucket's capture failed")
        return self.report

    def fits(self, lengths: Sequence[int]) -> bool:
        """A graph serves this batch: captured, a bucket holds it, every row (new token included) fits."""
        runner = self.runner
        return (runner is not None and runner.bucket_for(len(lengths)) is not None
                and max(lengths, default=0) + 1 <= self.context)

    def replay(self, tokens: Sequence[int], tables: Sequence[Sequence[int]], cached: Sequence[int],
               positions: Sequence[int] | None = None) -> Tensor:
        """Logits [B, vocab] of a batch that `fits`: copied into the nearest bucket's inputs, replayed."""
        assert self.runner is not None
        batch = len(tokens)
        inputs = pack_decode(tokens, tables, cached, self.max_pages, batch, self.device, positions)
        self.replays += 1
        # a view of the graph's output: read it (sample) before the next replay overwrites it
        return self.runner.run(inputs, batch)

    def eager(self, tokens: Sequence[int], tables: Sequence[Sequence[int]], cached: Sequence[int],
              bucket: int, positions: Sequence[int] | None = None) -> Tensor:
        """The same step run eagerly, padded to `bucket` rows: what a replay computes (for tests, on CPU)."""
        inputs = pack_decode(tokens, tables, cached, self.max_pages, bucket, self.device, positions)
        return self.step(inputs)[: len(tokens)]

    def counters(self) -> dict[str, Any]:
        return {"graph_replays": self.replays}
