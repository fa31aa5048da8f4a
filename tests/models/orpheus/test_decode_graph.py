"""The decode step a CUDA graph captures equals the dynamic decode path.

On CPU: the static-shaped step (inputs padded to a bucket, block tables padded to a fixed width,
a length mask) gives the dynamic path's logits, step after step, with mixed lengths and padding;
and the decode entry, served through GraphRunner's replay code with CPU stand-ins for the graphs,
samples the same tokens. On CUDA (`gpu`): real capture and replay equal eager, and a bucket whose
capture fails is reported and runs eagerly.
"""

from __future__ import annotations

import pytest
import torch
from wgc.models.orpheus import LanguageModel
from wgc.runtime.components.base import Call
from wgc.runtime.engines.attention import TorchAttention
from wgc.runtime.engines.cuda_graphs import Captured, GraphRunner
from wgc.runtime.engines.decode_graphs import static_inputs

from tests.models.orpheus.helpers import llm_spec

DEFAULTS = (0.6, 0.8, 1.3)  # temperature, top_p, repetition penalty
PROMPTS = {1: 3, 2: 17, 3: 33, 4: 6}  # request → prompt tokens: mixed lengths across 4-token pages


def twins(device: str = "cpu", page_size: int = 4, context: int = 128) -> tuple[LanguageModel, LanguageModel]:
    """Two identical tiny models (same random weights), each with its own KV pool."""
    spec = llm_spec(page_size=page_size, kv_memory=4 << 20)
    return tuple(LanguageModel(spec, 0, device, preset="tiny", graph_context=context) for _ in range(2))  # type: ignore[return-value]


def prompt(request: int) -> list[int]:
    return [(request * 31 + i * 7) % 300 for i in range(PROMPTS[request])]


@pytest.mark.parametrize(("requests", "bucket"), [([2], 2), ([1, 2, 3, 4], 8)])
def test_the_static_decode_step_equals_the_dynamic_path(requests: list[int], bucket: int) -> None:
    dynamic, static = twins()
    items = [(r, "", prompt(r)) for r in requests]
    logits = dynamic.forward(items)
    assert torch.equal(static.forward(items), logits)  # the same prefill on both
    for _ in range(6):  # several steps: the static step's own KV writes are read back by the next
        items = [(r, "", [int(t)]) for r, t in zip(requests, logits.argmax(-1))]
        logits = dynamic.forward(items)  # [B, vocab]
        got = static.forward_static(items, bucket)  # padded to the bucket
        assert got.shape == logits.shape
        torch.testing.assert_close(got, logits, atol=1e-5, rtol=1e-5)
    assert static.pages.free_pages == dynamic.pages.free_pages  # padding rows wrote only to the scratch page
    scratch = static.pages.num_pages
    assert not static.storage.k[:, :scratch].isnan().any()


class _EagerGraph:
    """Stands in for torch.cuda.CUDAGraph on CPU: `replay` runs the step on the static inputs, in place."""

    def __init__(self, runner: GraphRunner, bucket: int) -> None:
        self.step = runner.step
        self.inputs = runner.make_inputs(bucket)
        with torch.no_grad():
            self.output = self.step(self.inputs)

    def replay(self) -> None:
        with torch.no_grad():
            self.output.copy_(self.step(self.inputs))


def serve_with_cpu_graphs(lm: LanguageModel, buckets: list[int]) -> None:
    """Install a GraphRunner whose buckets are 'captured' with CPU stand-ins: its real run() pads and copies."""
    g = lm.graphs
    runner = GraphRunner(g.step, lambda b: static_inputs(b, g.max_pages, g.device), buckets)
    for bucket in buckets:
        graph = _EagerGraph(runner, bucket)
        runner.graphs[bucket] = Captured(graph.inputs, graph.output, graph)  # type: ignore[arg-type]
    g.runner = runner


def test_the_decode_entry_replays_a_bucket_when_the_batch_fits_and_runs_eagerly_otherwise() -> None:
    eager, graphed = twins(context=64)
    serve_with_cpu_graphs(graphed, [1, 2, 4])
    requests = [1, 2, 4]  # 3 rows: padded to bucket 4
    calls = [Call(r, "", (f"prompt {r}" * (r + 1), "tara", *DEFAULTS)) for r in requests]
    out = {lm: lm.prefill(calls) for lm in (eager, graphed)}
    assert out[eager] == out[graphed]
    for step in range(8):
        for lm in (eager, graphed):
            out[lm] = lm.decode([Call(r, "", (t, *DEFAULTS)) for r, t in zip(requests, out[lm])])
        assert out[eager] == out[graphed], step
    assert eager.counters()["graph_replays"] == 0
    assert graphed.counters()["graph_replays"] == 8
    # five rows: more than the largest bucket, so eager
    more = [Call(r, "", ("more", "leo", *DEFAULTS)) for r in (7, 8)]
    for lm in (eager, graphed):
        lm.prefill(more)
        lm.decode([Call(r, "", (out[lm][0], *DEFAULTS)) for r in (*requests, 7, 8)])
    assert graphed.counters()["graph_replays"] == 8
    # past the graph context (64 tokens): eager again
    longest = max(graphed.pages.length(r, "default") for r in requests)
    for _ in range(64 - longest):
        graphed.decode([Call(4, "", (out[graphed][2], *DEFAULTS))])
    before = graphed.counters()["graph_replays"]
    graphed.decode([Call(4, "", (out[graphed][2], *DEFAULTS))])
    assert graphed.counters()["graph_replays"] == before


def test_capture_on_cpu_and_of_prefill_reports_eager_and_never_raises() -> None:
    lm, _ = twins()
    lines: list[str] = []
    decode = lm.capture("decode", "decode", [4, 2, 1], lines.append)
    assert decode.state == "eager" and "on cpu" in decode.eager and not decode.captured
    prefill = lm.capture("prefill", "prefill", [4, 2, 1], lines.append)
    assert prefill.state == "eager" and "varying number of tokens" in prefill.eager
    assert lines == [] and lm.graphs.runner is None


# ---- on CUDA ------------------------------------------------------------------------------------


def _cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")


def _reference(device: str) -> tuple[LanguageModel, LanguageModel]:
    """A graphed model and its eager twin on the torch attention path (the one the CPU tests pin down)."""
    eager, graphed = twins(device, page_size=16, context=256)
    eager.backend = TorchAttention(eager.torch_device)
    graphed.backend = TorchAttention(graphed.torch_device)
    return eager, graphed


def _steps(eager: LanguageModel, graphed: LanguageModel, requests: list[int], steps: int = 4) -> int:
    """Decode `steps` steps on both; logits equal; how many of the graphed model's steps replayed."""
    items = [(r, "", prompt(r % 4 + 1)) for r in requests]
    logits = eager.forward(items)
    torch.testing.assert_close(graphed.forward(items), logits)
    before = graphed.graphs.replays
    for _ in range(steps):
        items = [(r, "", [int(t)]) for r, t in zip(requests, logits.argmax(-1))]
        logits = eager.forward(items)
        got = graphed.forward(items, graphs=True).clone()
        torch.testing.assert_close(got, logits, atol=1e-4, rtol=1e-4)
    return graphed.graphs.replays - before


@pytest.mark.gpu
def test_captured_decode_replays_equal_eager_for_tiny_at_batch_1_3_8() -> None:
    _cuda()
    eager, graphed = _reference("cuda")
    lines: list[str] = []
    report = graphed.capture("decode", "decode", [8, 4, 2, 1], lines.append)
    assert report.captured == [8, 4, 2, 1] and not report.failed and report.state == "captured", report
    assert lines == [f"captured bucket {b}" for b in (8, 4, 2, 1)]
    first = 0
    for batch in (1, 3, 8):  # 3 replays bucket 4 with a padding row
        requests = list(range(first, first + batch))
        first += batch
        assert _steps(eager, graphed, requests) == 4


@pytest.mark.gpu
def test_a_bucket_whose_capture_fails_is_reported_and_its_batches_run_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    _cuda()
    real = GraphRunner._capture_one

    def flaky(self: GraphRunner, bucket: int, warmup: int) -> Captured:
        if bucket == 8:
            raise RuntimeError("forced capture failure\nsecond line")
        return real(self, bucket, warmup)

    monkeypatch.setattr(GraphRunner, "_capture_one", flaky)
    eager, graphed = _reference("cuda")
    lines: list[str] = []
    report = graphed.capture("decode", "decode", [8, 4, 1], lines.append)
    assert report.captured == [4, 1] and report.failed == {8: "forced capture failure"}
    assert report.state == "partial" and "bucket 8 failed: forced capture failure" in report.summary()
    assert any("bucket 8 runs eagerly" in line for line in lines)
    assert _steps(eager, graphed, [0, 1, 2, 3, 4, 5, 6, 7]) == 0  # batch 8: no bucket holds it, eager
    assert _steps(eager, graphed, [10, 11, 12]) == 4  # batch 3: bucket 4 replays
