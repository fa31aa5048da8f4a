"""The decode mirror (runtime/engines/kv_mirror.py) under the runtime's own batching: the llama plan's
replies are the same with it on and off (greedy and sampled, requests arriving while others decode),
and a batch decoding together keeps its rows: each request's keys are gathered from the pages about
once, not every step, also when requests leave the middle of the batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from wgc.runtime.components.base import load_class
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster

from tests.models.llama.helpers import llama_plan
from tests.runtime.cluster import outputs_by_request
from wgc.plan.file import load_plan


def prompts(seed: int, lengths: tuple[int, ...]) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [[256, *torch.randint(0, 256, (n,), generator=gen).tolist()] for n in lengths]


def replies(plan: Path, mirror: bool, waves: list[tuple[float, tuple[int, ...]]], monkeypatch: pytest.MonkeyPatch,
            max_tokens: tuple[int, ...] = (12,)) -> tuple[dict[int, list[Any]], dict[str, int]]:
    """Each wave's prompts submitted while the earlier ones decode; request i generates
    max_tokens[i % len(max_tokens)] tokens. The replies, and the lm's KV counters."""
    monkeypatch.setenv("WGC_CPU_KV_MIRROR", "1" if mirror else "0")
    _, loaded = load_plan(plan)
    cluster = LocalCluster(loaded, lambda spec, r: load_class(spec.cls)(spec, r, "cpu"), fake_inputs=False, rounds=1)
    ids = []
    for wave, (temperature, lengths) in enumerate(waves):  # each wave arrives while the earlier ones decode
        for p in prompts(30 + wave, lengths):
            budget = max_tokens[len(ids) % len(max_tokens)]
            ids.append(cluster.submit(RequestSpec(params={"max_tokens": budget, "temperature": temperature},
                                                  inputs={"prompt": p})))
        cluster.pump(limit=25)
    return outputs_by_request(cluster, ids), cluster.executors[0].components["lm"].kv.counters()


def test_replies_are_the_same_with_the_mirror_on_and_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WGC_LLAMA_DIR", raising=False)
    plan = llama_plan(tmp_path)
    waves = [(0.0, (6, 17)), (0.8, (9, 3)), (0.0, (12,)), (0.8, (5, 20))]
    on, counters = replies(plan, True, waves, monkeypatch)
    off, plain = replies(plan, False, waves, monkeypatch)
    assert on == off and all(on.values()) and sum(map(len, on.values())) > 40
    assert counters["mirror_steps"] > 0 and "mirror_steps" not in plain


def test_a_batch_decoding_together_is_gathered_once_per_request(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WGC_LLAMA_DIR", raising=False)
    _, counters = replies(llama_plan(tmp_path), True, [(0.0, (5, 9, 14, 3, 7, 11, 6, 8))], monkeypatch)
    assert counters["mirror_steps"] >= 10
    assert counters["mirror_rows_gathered"] < 2 * 8, counters  # re-gathering every step: ~8 a step


def test_requests_leaving_the_middle_of_a_batch_move_one_row_each(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Every other request of eight ends early, each at another step: each leaving costs at most the
    gather of the row moved into its place (in the batch's order, every row after it was gathered)."""
    monkeypatch.delenv("WGC_LLAMA_DIR", raising=False)
    plan = llama_plan(tmp_path)
    waves = [(0.0, (5, 9, 14, 3, 7, 11, 6, 8))]
    lengths = (3, 14, 5, 14, 7, 14, 9, 14)
    on, counters = replies(plan, True, waves, monkeypatch, lengths)
    off, _ = replies(plan, False, waves, monkeypatch, lengths)
    assert on == off and [len(on[i]) for i in sorted(on)] == list(lengths)
    assert counters["mirror_rows_gathered"] <= 8 + 4, counters
