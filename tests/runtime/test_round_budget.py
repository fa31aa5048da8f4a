"""A kv component's round takes `prefill_token_budget` when its first batch of the round is prompt
chunks alone (decodes go first, so then none of its sequences decodes this round), and
`token_budget` when a decode is in it (runtime/worker/batching.py `round_budget`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from wgc.runtime.components.base import Call
from wgc.runtime.worker.batching import Batcher, CallBatch, round_budget
from wgc.runtime.worker.scheduler import Demand

SETTINGS = {"token_budget": 100, "prefill_token_budget": 400}


def _batcher() -> Batcher:
    ex: Any = SimpleNamespace(components={}, failures=0, dead=set(), stats={}, fail=lambda *a: None)
    return Batcher(ex)


def _round(batcher: Batcher, demands: list[Demand]) -> list[int]:
    comp: Any = SimpleNamespace(spec=SimpleNamespace(settings=SETTINGS), pool_free=lambda: 1000,
                                pool_holders=lambda: {})
    calls = [Call(d.request, "", ("x",)) for d in demands]
    group: Any = [SimpleNamespace(waited=0) for _ in demands]
    batch, stays = batcher._schedule(comp, "lm", "prefill", group, CallBatch(calls, list(range(len(calls))),
                                                                              [""] * len(calls)), demands)
    return [c.budget for c in batch.calls]


def test_a_round_of_prompts_alone_takes_the_prefill_budget() -> None:
    prompts = [Demand(r, 90, True, 16) for r in range(4)]  # 360 tokens: over token_budget, within 400
    assert _round(_batcher(), prompts) == [90, 90, 90, 90]


def test_a_round_with_a_decode_in_it_takes_the_token_budget() -> None:
    demands = [Demand(0, 1, False, 16), *(Demand(r, 90, True, 16) for r in range(1, 5))]
    grants = _round(_batcher(), demands)
    assert sum(grants) <= 100 and grants[0] == 1, grants


def test_the_budget_is_set_by_the_rounds_first_batch_and_spent_by_the_next() -> None:
    batcher = _batcher()
    _round(batcher, [Demand(0, 300, True, 16)])
    assert batcher.budgets["lm"] == 100  # 400 - 300: a later batch of the round shares what is left
    batcher.new_round()
    assert _round(batcher, [Demand(1, 1, False, 16)]) == [1] and batcher.budgets["lm"] == 99


def test_round_budget_never_goes_below_the_token_budget() -> None:
    prompt = [Demand(0, 5, True, 16)]
    assert round_budget({"token_budget": 512}, prompt) == 512  # a plan written before the key
    assert round_budget({"token_budget": 512, "prefill_token_budget": 64}, prompt) == 512
    assert round_budget({"token_budget": 512, "prefill_token_budget": 2048}, prompt) == 2048
    assert round_budget({"token_budget": 512, "prefill_token_budget": 2048}, [Demand(0, 1, False, 16)]) == 512
    assert round_budget({}, prompt) == 1 << 30
