"""The Orpheus LM plans each eager decode step's attention while the previous step runs
(runtime/engines/plan_ahead.py): a steady batch hits on every step after the first, page
crossings included; a request joining, leaving, finishing, a speculative rollback and a prefill in
between each cost one miss (or leave nothing to predict); and every token and every logit equals a
twin's that plans every step synchronously. On CUDA (`gpu`) the same with FlashInfer."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from wgc.models.layers.config import LlamaConfig
from wgc.models.orpheus import LanguageModel, OrpheusConfig
from wgc.runtime.components.base import Call
from wgc.runtime.engines.attention import TorchAttention

from tests.models.orpheus.helpers import llm_spec

DEFAULTS = (0.6, 0.8, 1.3)  # temperature, top_p, repetition penalty
DEFAULT = "default"


def planned(lm: LanguageModel) -> tuple[int, int, int]:
    c = lm.counters()
    return c["plan_ahead_hits"], c["plan_ahead_misses"], c["plan_ahead_unpredicted"]


class Driver:
    """Drives an LM like the worker does (prefill, decode with the last token) and records every
    forward's logits, every token and the plan-ahead counters' change at each step."""

    def __init__(self, lm: LanguageModel) -> None:
        self.lm = lm
        self.last: dict[int, int] = {}
        self.tokens: list[list[int]] = []
        self.logits: list[torch.Tensor] = []
        self.changes: list[tuple[int, int, int]] = []
        forward = lm.forward

        def recording(items: list[Any], graphs: bool = False) -> torch.Tensor:
            out = forward(items, graphs)
            self.logits.append(out.clone())
            return out

        lm.forward = recording  # type: ignore[method-assign]

    def _record(self, requests: tuple[int, ...], out: list[int], before: tuple[int, int, int]) -> None:
        self.last.update(zip(requests, out))
        self.tokens.append(out)
        self.changes.append(tuple(a - b for a, b in zip(planned(self.lm), before)))  # type: ignore[arg-type]

    def prefill(self, *requests: int) -> tuple[int, int, int]:
        before = planned(self.lm)
        calls = [Call(r, "", (f"say {r} " * r, "tara", *DEFAULTS)) for r in requests]  # ragged prompts
        self._record(requests, self.lm.prefill(calls), before)
        return self.changes[-1]

    def decode(self, *requests: int) -> tuple[int, int, int]:
        before = planned(self.lm)
        self._record(requests, self.lm.decode([Call(r, "", (self.last[r], *DEFAULTS)) for r in requests]), before)
        return self.changes[-1]


HIT, MISS, UNPREDICTED = (1, 0, 0), (0, 1, 0), (0, 0, 1)


def scenario(d: Driver) -> list[tuple[str, tuple[int, int, int]]]:
    """Every case once; returns (what, counter change) per step for the planning-ahead twin to check."""
    steps: list[tuple[str, tuple[int, int, int]]] = []

    def run(what: str, change: tuple[int, int, int]) -> None:
        steps.append((what, change))

    run("prefill 1-4", d.prefill(1, 2, 3, 4))
    for i in range(20):
        run(f"steady step {i}", d.decode(1, 2, 3))
    run("4 joins", d.decode(1, 2, 3, 4))
    run("after the join", d.decode(1, 2, 3, 4))
    d.lm.release(2)
    run("2 released", d.decode(1, 3, 4))
    run("after the release", d.decode(1, 3, 4))
    marks = {r: d.lm.checkpoint(r, DEFAULT) for r in (1, 3, 4)}
    last = dict(d.last)
    run("speculative step", d.decode(1, 3, 4))
    ahead = d.tokens[-1]
    for r, mark in marks.items():
        d.lm.restore(r, DEFAULT, mark)
    d.last = last
    run("rolled back", d.decode(1, 3, 4))
    assert d.tokens[-1] == ahead  # the same step again draws the same tokens
    run("after the rollback", d.decode(1, 3, 4))
    run("4 finished", d.decode(1, 3))
    run("after 4 finished", d.decode(1, 3))
    run("prefill 5 in between", d.prefill(5))
    run("after the prefill", d.decode(1, 3))
    run("steady again", d.decode(1, 3))
    return steps


EXPECTED = {
    "prefill 1-4": UNPREDICTED, "steady step 0": UNPREDICTED, "4 joins": MISS, "2 released": MISS,
    "rolled back": MISS, "4 finished": MISS, "prefill 5 in between": MISS, "after the prefill": UNPREDICTED,
}


def check_against_synchronous_twin(on: LanguageModel, off: LanguageModel) -> None:
    ahead, sync = Driver(on), Driver(off)
    steps = scenario(ahead)
    scenario(sync)
    for what, change in steps:
        assert change == EXPECTED.get(what, HIT), what
    assert ahead.tokens == sync.tokens
    assert len(ahead.logits) == len(sync.logits) == len(steps)
    for i, (a, b) in enumerate(zip(ahead.logits, sync.logits)):
        assert torch.equal(a, b), steps[i][0]
    assert planned(off) == (0, 0, len(steps))


def twins(**kwargs: Any) -> tuple[LanguageModel, LanguageModel]:
    spec = llm_spec(page_size=4, kv_memory=4 << 20)  # 4-token pages: every row crosses a page every 4 steps
    # Planning ahead is off by default on CPU (no overlap to gain); the logic is the same, so turn it on.
    # The twin plans every step only without the CPU decode step's K/V mirror, which skips planning.
    on = LanguageModel(spec, 0, "cpu", preset="tiny", plan_ahead=True, **kwargs)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WGC_CPU_KV_MIRROR", "0")
        off = LanguageModel(spec, 0, "cpu", preset="tiny", plan_ahead=False, **kwargs)
    return on, off


def test_planning_ahead_is_on_by_default_on_cuda_only() -> None:
    assert LanguageModel(llm_spec(), 0, "cpu", preset="tiny").planner.enabled is False


def test_a_steady_batch_hits_on_every_step_after_the_first() -> None:
    lm, _ = twins()
    d = Driver(lm)
    assert d.prefill(1, 2, 3) == UNPREDICTED
    assert d.decode(1, 2, 3) == UNPREDICTED  # nothing predicted from a prefill
    crossings = 0
    for _ in range(19):
        before = [len(lm.pages.page_table(r, DEFAULT)) for r in (1, 2, 3)]
        assert d.decode(1, 2, 3) == HIT
        crossings += sum(len(lm.pages.page_table(r, DEFAULT)) > n for r, n in zip((1, 2, 3), before))
    assert crossings >= 12  # rows took new pages from the free list, as predicted
    assert planned(lm) == (19, 0, 2)


def test_joins_releases_rollbacks_and_prefills_miss_and_change_no_token_or_logit() -> None:
    check_against_synchronous_twin(*twins())


@pytest.mark.gpu
def test_flashinfer_plans_ahead_with_the_same_hits_and_logits_as_planning_synchronously() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("flashinfer")
    from wgc.runtime.engines.attention_cuda import FlashInferAttention

    # bf16 (FlashInfer's kernels take fp16/bf16; the tiny preset is float32) and a FlashInfer head size
    small = LlamaConfig(vocab=156940, hidden=512, layers=2, heads=8, kv_heads=2, head_dim=64, intermediate=1024,
                        tie_embeddings=True)
    config = OrpheusConfig("small", small)
    spec = llm_spec(page_size=4, kv_memory=4 << 20)
    on, off = (LanguageModel(spec, 0, "cuda", config=config, plan_ahead=flag) for flag in (True, False))
    assert isinstance(on.backend, FlashInferAttention) and isinstance(off.backend, FlashInferAttention)
    check_against_synchronous_twin(on, off)


@pytest.mark.gpu
def test_the_torch_path_plans_ahead_on_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    spec = llm_spec(page_size=4, kv_memory=4 << 20)
    on, off = (LanguageModel(spec, 0, "cuda", preset="tiny", plan_ahead=flag) for flag in (True, False))
    assert isinstance(on.backend, TorchAttention)
    check_against_synchronous_twin(on, off)
