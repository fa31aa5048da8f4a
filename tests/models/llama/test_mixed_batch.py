"""Prefill and decode calls of one round in one forward (PagedLlama.call_mixed, runtime/worker/mixed.py):
the same tokens as running the entries apart, greedy and sampled, with prompts chunked under a
token budget; through the runtime with requests arriving while others decode, the same replies with
the mixed dispatch on and off, and fewer forwards with it on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from wgc.models.layers.paged_llama import PagedLlama
from wgc.models.llama import ChatModel
from wgc.runtime.components.base import PARTIAL, Call, load_class
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster

from tests.models.llama.helpers import llama_plan, lm_spec
from tests.runtime.cluster import outputs_by_request
from wgc.plan.file import load_plan

SAMPLED = (0.8, 0.9)  # temperature, top_p


def model() -> ChatModel:
    return ChatModel(lm_spec(page_size=4), 0, "cpu", preset="tiny")


def prompts(seed: int, lengths: tuple[int, ...]) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [[256, *torch.randint(0, 256, (n,), generator=gen).tolist()] for n in lengths]


@pytest.mark.parametrize("sampling", [(0.0, 1.0), SAMPLED], ids=["greedy", "sampled"])
def test_a_mixed_call_gives_each_entry_what_it_gives_alone(sampling: tuple[float, float]) -> None:
    mixed, apart = model(), model()
    first = prompts(1, (5, 12, 7))
    for lm in (mixed, apart):
        lm.prefill([Call(r, "", (p, *sampling)) for r, p in enumerate(first)])
    new = prompts(2, (9, 30))  # request 11's prompt goes in chunks of at most 8 tokens
    tokens = {r: [3 + r] for r in range(3)}
    for step in range(6):
        decodes = [Call(r, "", (tokens[r][-1], *sampling)) for r in range(3)]
        fills = [Call(10 + i, "", (p, *sampling), 8 if i else 0) for i, p in enumerate(new)] if step < 4 else []
        got_decode, got_fill = mixed.call_mixed([("decode", decodes), ("prefill", fills)]) if fills else \
            (mixed.call("decode", decodes), [])
        want_decode = apart.call("decode", decodes)
        want_fill = apart.call("prefill", fills) if fills else []
        assert got_decode == want_decode and got_fill == want_fill
        for r, t in enumerate(got_decode):
            tokens[r].append(t)
        if step == 0:
            assert got_fill[0] is not PARTIAL and got_fill[1] is PARTIAL  # the 31-token prompt: a chunk
        if step == 3:
            assert got_fill[1] is not PARTIAL  # its fourth chunk was its last
            new = []
    assert mixed.stats["forwards"] < apart.stats["forwards"]


def test_a_mixed_call_refuses_an_entry_it_cannot_mix() -> None:
    with pytest.raises(ValueError, match="cannot share a forward"):
        model().call_mixed([("prefill", []), ("other", [])])


def _replies(plan: Path, mixed: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[int, list[Any]], dict[str, int]]:
    monkeypatch.setattr(PagedLlama, "mixed_entries", frozenset({"prefill", "decode"}) if mixed else frozenset())
    _, loaded = load_plan(plan)
    cluster = LocalCluster(loaded, lambda spec, r: load_class(spec.cls)(spec, r, "cpu"), fake_inputs=False, rounds=1)
    ids = []
    for wave, temperature in enumerate((0.0, 0.8, 0.0, 0.8)):  # each wave arrives while the earlier ones decode
        for p in prompts(10 + wave, (6, 17)):
            spec = RequestSpec(params={"max_tokens": 12, "temperature": temperature}, inputs={"prompt": p})
            ids.append(cluster.submit(spec))
        cluster.pump(limit=25)
    out = outputs_by_request(cluster, ids)
    ex = cluster.executors[0]
    return out, {"mixed_calls": ex.batcher.stats["mixed_calls"], "forwards": ex.components["lm"].stats["forwards"]}


def test_replies_through_the_runtime_are_the_same_with_prefill_and_decode_in_one_forward(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WGC_LLAMA_DIR", raising=False)
    plan = llama_plan(tmp_path)
    together, on = _replies(plan, True, monkeypatch)
    apart, off = _replies(plan, False, monkeypatch)
    assert together == apart and all(len(reply) == 12 for reply in apart.values())
    assert on["mixed_calls"] > 0 and off["mixed_calls"] == 0
    assert on["forwards"] < off["forwards"]


def _tight_replies(plan: Path, mixed: bool, budget: int, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[int, list[Any]], dict[str, int]]:
    """Eight requests, two waves, on a pool of 14 pages of 4 tokens and a token budget: rounds that defer,
    chunk prompts and preempt, mixed or not."""
    monkeypatch.setattr(PagedLlama, "mixed_entries", frozenset({"prefill", "decode"}) if mixed else frozenset())
    _, loaded = load_plan(plan)

    def factory(spec: Any, rank: int) -> Any:
        probe = load_class(spec.cls)(spec, rank, "cpu")
        k = probe.kv.storage.k
        page = 2 * k[:, 0].numel() * k.element_size() // probe.page_size * 4  # K and V of one 4-token page
        settings = {**spec.settings, "kv_memory": 14 * page, "page_size": 4, "token_budget": budget}
        return load_class(spec.cls)(msgspec.structs.replace(spec, settings=settings), rank, "cpu")

    cluster = LocalCluster(loaded, factory, fake_inputs=False, rounds=1)
    ids = []
    for wave, temperature in enumerate((0.8, 0.0)):
        for p in prompts(20 + wave, (9, 14, 3, 11)):
            spec = RequestSpec(params={"max_tokens": 10, "temperature": temperature}, inputs={"prompt": p})
            ids.append(cluster.submit(spec))
        cluster.pump(limit=40)
    out = outputs_by_request(cluster, ids)
    ex = cluster.executors[0]
    return out, {**ex.batcher.stats, "pages": ex.components["lm"].kv.pages.num_pages}


@pytest.mark.parametrize("budget", [12, 1 << 20])
def test_a_tight_pool_and_budget_give_the_same_replies_mixed_or_not(budget: int, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WGC_LLAMA_DIR", raising=False)
    plan = llama_plan(tmp_path)
    together, on = _tight_replies(plan, True, budget, monkeypatch)
    apart, off = _tight_replies(plan, False, budget, monkeypatch)
    assert on["pages"] == 14
    assert together == apart and all(len(reply) == 10 for reply in apart.values())
    assert on["mixed_calls"] > 0 and on["preemptions"] > 0 and on["deferred_calls"] > 0
    if budget == 12:
        assert on["partial_calls"] > 0  # prompts written in chunks beside decodes


def test_prefill_and_decode_mix_on_cpu_only_and_not_around_a_subclass_override() -> None:
    lm = model()
    assert lm.mixed_entries == {"prefill", "decode"}
    lm.kv.device = torch.device("meta")  # as a CUDA engine would say (only the device's type is read)
    assert lm.mixed_entries == frozenset()

    class Logged(ChatModel):
        def decode(self, calls: list[Call]) -> list[Any]:
            return super().decode(calls)

    assert Logged(lm_spec(page_size=4), 0, "cpu", preset="tiny").mixed_entries == frozenset()
