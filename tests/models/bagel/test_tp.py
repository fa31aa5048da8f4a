"""BAGEL's MoT LLM at tensor-parallel degree 2 and 4 (threads as the group's ranks, in one process):
both experts cut the same way, a mixed und/gen step equal to tp 1 in float32; the component over
its paged KV engine (prefill, greedy decode, a velocity) equal to tp 1; and a rank's shard read
from a miniature BAGEL checkpoint equal, bit for bit, to the whole checkpoint cut in place, with no
split tensor read whole."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from torch import Tensor
from wgc.models import weights_io
from wgc.models.bagel import llm as llm_module
from wgc.models.bagel.config import IM_START, BagelLLMConfig
from wgc.models.bagel.llm import LanguageModel
from wgc.models.bagel.mot import MoTLM
from wgc.models.bagel.weights import Checkpoint
from wgc.models.layers.tp_cuts import attention_cuts
from wgc.models.layers.tp_shard import shard_in_place
from wgc.runtime.worker import tp_group

from tests.models.bagel.checkpoint import write_miniature
from tests.models.bagel.helpers import DenseAttention, block_mask, call, lively, llm_spec
from tests.models.test_tensor_parallel import Member, on_threads
from tests.models.test_tensor_parallel_load import Rank, Reads, assert_bitwise, counting_open
from tests.models.tp_ranks import on_ranks

CONFIG = BagelLLMConfig.preset("tiny")  # 4 query heads over 2 KV heads: tp 4 replicates each KV head


def whole_lm(seed: int) -> MoTLM:
    lm = MoTLM(CONFIG)
    lively(lm, seed)
    return lm.eval()


def mixed_step(n: int = 12) -> tuple[Tensor, Tensor, Tensor, DenseAttention]:
    """Text, then an image block of 5 latents between its two markers, then text."""
    x = torch.randn(n, CONFIG.hidden, generator=torch.Generator().manual_seed(5))  # [n, hidden]
    positions = torch.tensor([0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 4, 5])
    gen = torch.zeros(n, dtype=torch.bool)
    gen[5:10] = True
    return x, positions, gen, DenseAttention(block_mask([(4, False), (7, True), (1, False)]))


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("route", ["mixed", "und", "gen"])
def test_a_sharded_mot_gives_the_whole_mots_hidden_states_and_logits(tp: int, route: str) -> None:
    whole = whole_lm(seed=1)
    x, positions, gen, attn = mixed_step()
    mask = {"mixed": gen, "und": None, "gen": torch.ones(12, dtype=torch.bool)}[route]
    with torch.no_grad():
        hidden = whole(x, positions, attn, mask)
        logits = whole.logits(hidden)

    def rank(group: Member) -> tuple[Tensor, Tensor]:
        shard = shard_in_place(copy.deepcopy(whole), group)
        with torch.no_grad():
            h = shard(x, positions, attn, mask)
            return h, shard.logits(h)

    for h, out in on_threads(tp, rank):
        torch.testing.assert_close(h, hidden, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out, logits, rtol=1e-5, atol=1e-5)


def test_both_experts_are_cut_the_same_way() -> None:
    whole = whole_lm(seed=2)

    def rank(group: Member) -> dict[str, Tensor]:
        return dict(shard_in_place(copy.deepcopy(whole), group).named_parameters())

    full = dict(whole.named_parameters())
    for r, params in enumerate(on_threads(2, rank)):
        cuts = attention_cuts("model.layers.1.self_attn.", 4, 2, 16, 2, r)
        for suffix in ("", "_moe_gen"):
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                name, cut = f"model.layers.1.self_attn.{proj}{suffix}.weight", cuts[f"model.layers.1.self_attn.{proj}.weight"]
                assert torch.equal(params[name], cut.of(full[name])), name
            bias = f"model.layers.1.self_attn.q_proj{suffix}.bias"
            assert torch.equal(params[bias], full[bias][r * 32:(r + 1) * 32])
            down = f"model.layers.1.mlp{suffix}.down_proj.weight"
            assert torch.equal(params[down], full[down][:, r * 64:(r + 1) * 64])
            norm = f"model.layers.1.self_attn.k_norm{suffix}.weight"
            assert torch.equal(params[norm], full[norm])  # per head_dim: whole on every rank


# ---- the component over its paged KV engine --------------------------------------------------


def tp_spec(tp: int) -> Any:
    return msgspec.structs.replace(llm_spec(), ranks=list(range(tp)), tp=tp)


def llm_at(tp: int, rank: int) -> LanguageModel:
    return LanguageModel(tp_spec(tp) if tp > 1 else llm_spec(), rank, "cpu", preset="tiny", seed=3)


def text_and_image(m: LanguageModel) -> tuple[list[int], Tensor, tuple[int, int]]:
    m.prefill_text([call(1, "main", "a red cube"), call(2, "main", "x")])
    tokens = [m.decode([call(1, "main", IM_START, 0.0), call(2, "main", IM_START, 0.0)]) for _ in range(3)]
    z = m.init_latents([call(1, "", 64, 64)])[0]
    v = m.velocity([call(1, "main", z, 0.5)])[0]
    return [t for step in tokens for t in step], v, (m.kv.geometry.heads, m.kv.geometry.kv_heads, m.describe())


@pytest.mark.parametrize("tp", [2, 4])
def test_the_component_at_tp_decodes_and_denoises_as_at_tp_1(tp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_module, "init_random", lively)  # livelier weights than the preset's, on every rank
    tokens, velocity, _ = text_and_image(llm_at(1, 0))
    assert len(set(tokens)) > 1  # the tokens vary: a wrong shard shows
    for rank, (got_tokens, got_velocity, (heads, kv_heads, said)) in enumerate(
            on_ranks(tp, "llm", llm_at, text_and_image, monkeypatch)):
        assert got_tokens == tokens
        torch.testing.assert_close(got_velocity, velocity, rtol=1e-6, atol=1e-6)  # the tiny preset runs float64
        assert (heads, kv_heads) == (4 // tp, max(1, 2 // tp))  # this rank's share of the KV cache
        assert f"tensor-parallel rank {rank} of {tp}; " in said


# ---- per-shard loading ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def miniature(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("BAGEL-7B-MoT-tp")
    write_miniature(directory)
    return directory


@pytest.mark.parametrize("rank", [0, 1])  # 2 query heads over 1 KV head: tp 2 replicates it
def test_a_ranks_own_read_equals_the_whole_checkpoint_cut(miniature: Path, rank: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    whole_then_cut = shard_in_place(Checkpoint(miniature).language_model("cpu", torch.float32), Rank(rank, 2))
    reads = Reads()
    with monkeypatch.context() as patch:
        patch.setattr(weights_io, "safe_open", counting_open(reads))
        own = Checkpoint(miniature).language_model("cpu", torch.float32, Rank(rank, 2))
    assert_bitwise(own, whole_then_cut)
    split = [n for n in reads.whole if "proj" in n or "embed_tokens" in n or "lm_head" in n]
    assert not split, f"read whole: {split}"
    held = sum(p.numel() for p in own.parameters())
    assert sum(reads.sliced.values()) + sum(reads.whole.values()) == held  # exactly the shard's elements


def test_a_degree_the_mot_cannot_be_split_by_is_refused_naming_the_component(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp_group, "group_for", lambda name: Rank(0, 3))
    with pytest.raises(ValueError, match=r"^bagel llm: tp = 3 does not divide the 4 attention heads$"):
        LanguageModel(tp_spec(3), 0, "cpu", preset="tiny")
