"""Parity with transformers: the same tiny random weights, saved as a Hugging Face directory (sharded,
with an index) and loaded through our loader, give the same logits in LlamaForCausalLM and in our
component — for a prefill and for 20 decode steps through the paged KV path, at batch 1 and at
batch 4 with mixed prompt lengths (fp32, atol 1e-4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from wgc.models.layers import LlamaModel
from wgc.models.orpheus import LanguageModel, OrpheusConfig, save_llama
from wgc.models.orpheus.llm import tiny_init

from tests.models.orpheus.helpers import llm_spec

transformers = pytest.importorskip("transformers")

STEPS = 20
PAGE = 4  # small pages: every sequence crosses several page boundaries


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = OrpheusConfig.preset("tiny")
    model = LlamaModel(config.llama)
    tiny_init(model, config, seed=3)
    return save_llama(model, config.hf_config(), tmp_path_factory.mktemp("orpheus-tiny"), shards=3)


@pytest.fixture(scope="module")
def hf_model(hf_dir: Path):
    return transformers.LlamaForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def ours(hf_dir: Path) -> LanguageModel:
    return LanguageModel(llm_spec(page_size=PAGE), 0, "cpu", weights=hf_dir)


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
@pytest.mark.parametrize("lengths", [[13], [5, 19, 2, 11]], ids=["batch1", "batch4-mixed"])
def test_logits_match_transformers_for_prefill_and_20_decode_steps(hf_model, ours: LanguageModel,
                                                                   lengths: list[int]) -> None:
    vocab = ours.config.llama.vocab
    gen = torch.Generator().manual_seed(len(lengths))
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]
    requests = [100 * len(lengths) + i for i in range(len(lengths))]
    past: list = [None] * len(prompts)
    feed = prompts
    try:
        for step in range(STEPS + 1):
            got = ours.forward([(r, "main", toks) for r, toks in zip(requests, feed)])  # [B, vocab]
            want = []
            with torch.no_grad():
                for b, toks in enumerate(feed):
                    out = hf_model(input_ids=torch.tensor([toks]), past_key_values=past[b], use_cache=True)
                    past[b] = out.past_key_values
                    want.append(out.logits[0, -1])
            torch.testing.assert_close(got, torch.stack(want), atol=1e-4, rtol=0,
                                       msg=lambda m, s=step: f"step {s} ({'prefill' if s == 0 else 'decode'}): {m}")
            feed = [[int(t)] for t in got.argmax(-1)]
        assert all(ours.pages.length(r, "main") == n + STEPS for r, n in zip(requests, lengths))
    finally:
        for r in requests:
            ours.release(r)
    assert ours.pages.used_pages == 0


def test_loaded_weights_equal_the_saved_ones(hf_dir: Path, ours: LanguageModel) -> None:
    config = OrpheusConfig.preset("tiny")
    fresh = LlamaModel(config.llama)
    tiny_init(fresh, config, seed=3)
    for (name, a), (_, b) in zip(fresh.named_parameters(), ours.model.named_parameters()):
        assert torch.equal(a, b), name
    assert (hf_dir / "model.safetensors.index.json").is_file()
    assert ours.config.vocab == "compact" and ours.config.llama == config.llama
