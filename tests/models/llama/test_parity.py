"""Parity with transformers' LlamaForCausalLM on the same tiny random weights (transformers' own
initialisation and save_pretrained, in shards with an index): the logits of a prefill and of 12
decode steps through the paged KV path at batch 1 and at batch 3 with mixed prompt lengths, and the
greedy tokens of requests through the runtime (worker process, the compiled models/llama.walk)
against `generate`, with the checkpoint's stop ids ending the reply as the walk's `eos`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from wgc.models.llama import ChatModel
from wgc.runtime.api import DoneEvent, OutputEvent, Runtime

from tests.models.llama.checkpoint import write_checkpoint
from tests.models.llama.helpers import EOS, llama_plan, lm_spec

transformers = pytest.importorskip("transformers")
STEPS = 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    directory = tmp_path_factory.mktemp("llama-tiny")
    return directory, write_checkpoint(directory, seed=5)


@pytest.fixture(scope="module")
def ours(checkpoint: tuple[Path, Any]) -> ChatModel:
    return ChatModel(lm_spec(page_size=4), 0, "cpu", weights=checkpoint[0])


@pytest.mark.parametrize("lengths", [[9], [3, 17, 6]], ids=["batch1", "batch3-mixed"])
def test_logits_match_transformers_for_prefill_and_decode(checkpoint: tuple[Path, Any], ours: ChatModel,
                                                          lengths: list[int]) -> None:
    hf = checkpoint[1]
    gen = torch.Generator().manual_seed(len(lengths))
    feed = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lengths]
    requests = [50 + 10 * len(lengths) + i for i in range(len(lengths))]
    past: list[Any] = [None] * len(feed)
    try:
        for step in range(STEPS + 1):
            got = ours.forward([(r, "main", toks) for r, toks in zip(requests, feed)])  # [B, vocab]
            want = []
            with torch.no_grad():
                for b, toks in enumerate(feed):
                    out = hf(input_ids=torch.tensor([toks]), past_key_values=past[b], use_cache=True)
                    past[b] = out.past_key_values
                    want.append(out.logits[0, -1])
            torch.testing.assert_close(got, torch.stack(want), atol=1e-4, rtol=0,
                                       msg=lambda m, s=step: f"step {s}: {m}")
            feed = [[int(t)] for t in got.argmax(-1)]
    finally:
        for r in requests:
            ours.release(r)
    assert ours.pages.used_pages == 0


def test_a_stop_id_leaves_as_the_walk_eos(ours: ChatModel) -> None:
    assert ours.config.stop_ids == (257, 260)
    assert ours.token_out(260, 0) == EOS and ours.token_out(257, 3) == EOS and ours.token_out(65, 0) == 65
    assert ours.token_in(EOS) == 257 and ours.token_in(65) == 65  # a speculative decode past the end still runs


def _hf_greedy(hf: Any, prompt: list[int], max_new: int) -> list[int]:
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False,
                          eos_token_id=[257, 260], pad_token_id=257)
    return out[0, len(prompt):].tolist()


async def _runtime_greedy(plan: Path, prompts: list[list[int]], max_new: int) -> list[tuple[list[int], Any]]:
    async with await Runtime.start(plan) as runtime:
        handles = [runtime.submit(params={"max_tokens": max_new, "temperature": 0.0}, inputs={"prompt": p})
                   for p in prompts]
        out = []
        for h in handles:
            tokens, cut = [], None
            async for e in h.events():
                if isinstance(e, OutputEvent):
                    tokens.append(int(e.payload))
                elif isinstance(e, DoneEvent):
                    cut = e.cut
            out.append((tokens, cut))
        return out


def test_greedy_tokens_through_the_runtime_equal_generate(checkpoint: tuple[Path, Any], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    directory, hf = checkpoint
    gen = torch.Generator().manual_seed(11)
    prompts = [[256, *torch.randint(0, 256, (n,), generator=gen).tolist()] for n in (5, 21, 12, 33)]
    want = [_hf_greedy(hf, p, 24) for p in prompts]
    # one prompt whose greedy reply meets a stop id: make the 4th greedy token of the first a stop id
    stop_at = want[0][3]
    monkeypatch.setenv("WGC_LLAMA_DIR", str(directory))
    got = asyncio.run(_runtime_greedy(llama_plan(tmp_path), prompts, 24))
    for (tokens, cut), expected in zip(got, want):
        assert tokens == expected and cut == ("decode",)  # 24 tokens, none of them a stop id: cut by max_tokens
    assert stop_at not in (257, 260)
    (directory / "generation_config.json").write_text(f'{{"eos_token_id": [257, 260, {stop_at}]}}', encoding="utf-8")
    try:
        (tokens, cut), = asyncio.run(_runtime_greedy(llama_plan(tmp_path), prompts[:1], 24))
    finally:
        (directory / "generation_config.json").unlink()
    first = want[0].index(stop_at)
    assert tokens == [*want[0][:first], EOS] and not cut  # the stop id leaves as `eos`; the walk ends there
