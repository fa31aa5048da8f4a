"""Shard arithmetic of each shared layer kind, in one process (threads as the group's ranks): a module
cut by tp_shard at tp 2 and 4 gives the whole module's output, within float32 tolerance where a
product's inner sum is split across ranks (row-parallel o and down), bit for bit where nothing is
(the vocab-parallel embedding, the expert-parallel MoE: tp_cuts.py says why that split)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from wgc.models.layers import Embedding, LlamaConfig, LlamaModel, LMHead, SelfAttention, SparseMoE, SwiGLU
from wgc.models.layers.tensor_parallel import shard_cuts, shard_structure
from wgc.models.layers.tp_cuts import attention_cuts, expert_range, local_heads
from wgc.models.layers.tp_modules import ExpertParallelMoE, VocabParallelEmbedding, VocabParallelLMHead
from wgc.models.layers.tp_shard import shard_in_place
from wgc.models.weights_io import Part, meta_module
from wgc.runtime.engines.attention import dense_attention

from tests.models.test_tensor_parallel import Member, on_threads
from tests.models.test_tensor_parallel_load import Rank


def lively(module: nn.Module, seed: int) -> nn.Module:
    """Random weights large enough that a wrong cut shows (norms near one)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.1 * noise if "norm" in name else 0.2 * noise)
    return module.eval()


def sharded_outputs(whole: nn.Module, tp: int, run: Callable[[nn.Module], Tensor]) -> list[Tensor]:
    """`run` of each rank's shard (cut in place from a copy of `whole`), every rank on its own thread."""
    def rank(group: Member) -> Tensor:
        shard = shard_in_place(copy.deepcopy(whole), group)
        with torch.no_grad():
            return run(shard)

    return on_threads(tp, rank)


class Attention(nn.Module):
    """A SelfAttention's dense forward (positions 0..T-1), as a module to shard."""

    def __init__(self, **kw: object) -> None:
        super().__init__()
        self.att = SelfAttention(0, 48, 8, 2, 16, **kw)  # type: ignore[arg-type]

    def forward(self, x: Tensor) -> Tensor:
        angles = torch.arange(x.shape[1], dtype=x.dtype)[:, None] * torch.linspace(0.1, 1.0, 8)  # [T, 8]
        cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)  # [T, 16]
        q, k, v = self.att.qkv(x, cos, sin)  # [B, T, heads, 16], [B, T, kv_heads, 16] x2
        return self.att.out(dense_attention(q, k, v, "causal"))


@pytest.mark.parametrize("tp", [2, 4])  # 2: the 2 KV heads sharded; 4: each replicated on two ranks
@pytest.mark.parametrize("variant", ["plain", "qwen2", "qk_norm"])
def test_attention_shards_give_the_whole_attention(tp: int, variant: str) -> None:
    kw = {"plain": {}, "qwen2": {"bias": True, "o_bias": False}, "qk_norm": {"qk_norm_eps": 1e-6}}[variant]
    whole = lively(Attention(**kw), seed=1)
    x = torch.randn(2, 5, 48, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = whole(x)
    for out in sharded_outputs(whole, tp, lambda m: m(x)):
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_a_shards_attention_keeps_its_heads_and_the_qk_norm_whole() -> None:
    whole = lively(Attention(qk_norm_eps=1e-6), seed=1)

    def rank(group: Member) -> tuple[int, int, Tensor, Tensor]:
        att = shard_in_place(copy.deepcopy(whole), group).att  # type: ignore[union-attr]
        return att.heads, att.kv_heads, att.q_norm.weight, att.k_proj.weight

    k = whole.att.k_proj.weight  # [2 heads * 16, 48]
    for r, (heads, kv, q_norm, k_rows) in enumerate(on_threads(4, rank)):
        assert (heads, kv) == (2, 1) == local_heads(8, 2, 4)
        assert torch.equal(q_norm, whole.att.q_norm.weight)  # per head_dim, shared by every head: whole
        assert torch.equal(k_rows, k[(r // 2) * 16:(r // 2 + 1) * 16])  # the KV head its query heads share
    assert attention_cuts("", 8, 2, 16, 4, 3)["o_proj.weight"] == Part(1, 96, 128)


@pytest.mark.parametrize("tp", [2, 4])
def test_swiglu_shards_give_the_whole_mlp(tp: int) -> None:
    whole = lively(SwiGLU(48, 64), seed=3)
    x = torch.randn(7, 48, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = whole(x)
    for out in sharded_outputs(whole, tp, lambda m: m(x)):
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tp", [2, 4])
def test_expert_parallel_moe_is_the_whole_moe_bit_for_bit(tp: int) -> None:
    whole = nn.Sequential(lively(SparseMoE(48, 8, 3, 32), seed=5))  # a holder: the MoE itself is replaced
    x = torch.randn(2, 9, 48, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        expected = whole(x)
    outs = sharded_outputs(whole, tp, lambda m: m(x) if isinstance(m[0], ExpertParallelMoE) else None)
    for out in outs:
        assert torch.equal(out, expected)  # each expert whole on one rank, one contributor per row


@pytest.mark.parametrize("tp", [2, 4])
def test_a_moe_shard_holds_its_experts_whole_the_router_whole_and_cuts_the_shared_expert(tp: int) -> None:
    whole = nn.Sequential(lively(SparseMoE(48, 8, 3, 32, shared_intermediate=40), seed=7))
    x = torch.randn(11, 48, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        expected = whole(x)

    def rank(group: Member) -> tuple[Tensor, list[str], bool, int]:
        moe = shard_in_place(copy.deepcopy(whole), group)[0]
        assert isinstance(moe, ExpertParallelMoE)
        with torch.no_grad():
            out = moe(x)
        return out, list(moe.experts.keys()), torch.equal(moe.gate.weight, whole[0].gate.weight), \
            moe.shared_expert.gate_proj.out_features

    for r, (out, experts, router_whole, shared_rows) in enumerate(on_threads(tp, rank)):
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)  # the shared expert's down is row-parallel
        assert experts == [str(e) for e in expert_range(8, tp, r)]
        assert router_whole and shared_rows == 40 // tp


class Vocab(nn.Module):
    def __init__(self, tied: bool) -> None:
        super().__init__()
        self.embed = Embedding(101, 24)
        self.head = LMHead(24, 101, self.embed if tied else None)

    def forward(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        rows = self.embed(tokens)
        return rows, self.head(rows)


@pytest.mark.parametrize("tp", [2, 4])  # 101 rows: uneven parts
@pytest.mark.parametrize("tied", [False, True])
def test_vocab_parallel_embedding_and_head_give_the_whole_ones(tp: int, tied: bool) -> None:
    whole = lively(Vocab(tied), seed=9)
    tokens = torch.tensor([[0, 25, 26, 50, 51, 75, 76, 100]])
    with torch.no_grad():
        rows, logits = whole(tokens)

    def rank(group: Member) -> tuple[Tensor, Tensor, bool, bool]:
        shard = shard_in_place(copy.deepcopy(whole), group)
        kinds = isinstance(shard.embed, VocabParallelEmbedding) and isinstance(shard.head, VocabParallelLMHead)
        with torch.no_grad():
            out = shard(tokens)
        return *out, kinds, shard.head.weight is shard.embed.weight

    for got_rows, got_logits, kinds, shared in on_threads(tp, rank):
        assert kinds and shared == tied
        assert torch.equal(got_rows, rows)  # one real row and zeros: exact
        torch.testing.assert_close(got_logits, logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("tied", [False, True])
def test_a_llama_configs_cuts_are_the_walkers_cuts_of_its_model(tp: int, tied: bool) -> None:
    """tensor_parallel.shard_cuts (from the config, for the per-shard reader) and the walker over a
    LlamaModel (tp_shard.shard_structure) state one split."""
    config = LlamaConfig(vocab=301, hidden=64, layers=2, heads=8, kv_heads=2, head_dim=16, intermediate=96,
                         rope_scaling=None, max_positions=256, tie_embeddings=tied)
    for rank in range(tp):
        model = meta_module(lambda: LlamaModel(config))
        assert shard_structure(model, Rank(rank, tp)) == shard_cuts(config, tp, rank)
