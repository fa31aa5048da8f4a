"""CUDA graphs for a component entry: captured at start-up for every batch bucket, replayed per step.

Buckets are captured largest first into one memory pool per component (smaller graphs reuse the
largest one's memory). A batch is padded to the nearest bucket; a batch larger than every bucket
runs eagerly; a bucket whose capture fails is reported and runs eagerly. Nothing here is imported
or touched without CUDA.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

Step = Callable[[dict[str, torch.Tensor]], torch.Tensor]
MakeInputs = Callable[[int], dict[str, torch.Tensor]]  # bucket → static input tensors, batch-major


@dataclass
class Captured:
    inputs: dict[str, torch.Tensor]
    output: torch.Tensor
    graph: torch.cuda.CUDAGraph


@dataclass
class GraphRunner:
    step: Step
    make_inputs: MakeInputs
    buckets: list[int]
    graphs: dict[int, Captured] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    pool: object | None = None

    def capture(self, progress: Callable[[str], None] = lambda _msg: None, warmup: int = 2) -> None:
        """Capture every bucket, largest first; failures are recorded, never raised."""
        for bucket in sorted(set(self.buckets), reverse=True):
            try:
                self.graphs[bucket] = self._capture_one(bucket, warmup)
                progress(f"captured bucket {bucket}")
            except RuntimeError as err:
                self.failed[bucket] = str(err).splitlines()[0]
                progress(f"bucket {bucket} runs eagerly: capture failed ({self.failed[bucket]})")

    def _capture_one(self, bucket: int, warmup: int) -> Captured:
        inputs = self.make_inputs(bucket)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as torch requires before capture
            for _ in range(warmup):
                self.step(inputs)
        torch.cuda.current_stream().wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            output = self.step(inputs)
        return Captured(inputs, output, graph)

    def bucket_for(self, batch: int) -> int | None:
        ready = sorted(self.graphs)
        i = bisect.bisect_left(ready, batch)
        return ready[i] if i < len(ready) else None

    def run(self, inputs: dict[str, torch.Tensor], batch: int) -> torch.Tensor:
        """One step for `batch` rows: replay the nearest captured bucket (padded), else eager."""
        bucket = self.bucket_for(batch)
        if bucket is None:
            return self.step(inputs)
        captured = self.graphs[bucket]
        for name, value in inputs.items():
            static = captured.inputs[name]
            static[:batch].copy_(value[:batch])
            if batch < bucket:
                static[batch:].zero_()  # padding rows: harmless values, results dropped below
        captured.graph.replay()
        return captured.output[:batch]
