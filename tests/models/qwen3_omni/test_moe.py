"""The shared sparse MoE block (models/layers/moe.py): against a dense reference that runs every
expert on every token, and against transformers' thinker and talker sparse MoE blocks."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from wgc.models.layers.moe import SparseMoE


def random_moe(shared: int | None = None, *, experts: int = 6, top_k: int = 2, seed: int = 0) -> SparseMoE:
    torch.manual_seed(seed)
    moe = SparseMoE(16, experts, top_k, 8, shared_intermediate=shared)
    with torch.no_grad():
        for p in moe.parameters():
            p.normal_(0, 0.3)
    return moe.eval()


def dense(moe: SparseMoE, x: Tensor) -> Tensor:
    """Every expert on every token, then combined with the router's weights (zero off the top k)."""
    probs = torch.softmax(moe.gate(x).float(), dim=-1)  # [N, E]
    top, chosen = probs.topk(moe.top_k, dim=-1)
    mask = torch.zeros_like(probs).scatter(-1, chosen, 1.0)  # [N, E]
    weights = probs * mask
    if moe.norm_topk_prob:
        weights = weights / weights.sum(-1, keepdim=True)
    every = torch.stack([e(x) for e in moe.experts], dim=1)  # [N, E, H]
    out = (weights[..., None] * every).sum(1)  # [N, H]
    if moe.shared_expert is not None and moe.shared_expert_gate is not None:
        out = out + torch.sigmoid(moe.shared_expert_gate(x)) * moe.shared_expert(x)
    return out


@pytest.mark.parametrize("shared", [None, 12])
@pytest.mark.parametrize("norm", [True, False])
def test_sparse_equals_dense(shared: int | None, norm: bool) -> None:
    moe = random_moe(shared)
    moe.norm_topk_prob = norm
    x = torch.randn(2, 9, 16)  # leading dims kept
    with torch.no_grad():
        out = moe(x)
        assert out.shape == x.shape
        torch.testing.assert_close(out.reshape(-1, 16), dense(moe, x.reshape(-1, 16)), atol=1e-5, rtol=1e-5)


def test_one_token_and_unused_experts() -> None:
    """A decode step's one token touches top_k experts; the others are skipped, not run on nothing."""
    moe = random_moe(experts=8, top_k=3)
    x = torch.randn(1, 16)
    calls: list[int] = []
    for i, e in enumerate(moe.experts):
        e.register_forward_hook(lambda *_, i=i: calls.append(i))
    with torch.no_grad():
        out = moe(x)
        assert len(calls) == 3
        torch.testing.assert_close(out, dense(moe, x), atol=1e-5, rtol=1e-5)


def _load_hf(hf: torch.nn.Module, moe: SparseMoE) -> None:
    """Ours (per-expert, the checkpoint's names) into transformers' fused [E, 2I, H] / [E, H, I] layout."""
    with torch.no_grad():
        hf.gate.weight.copy_(moe.gate.weight)
        hf.experts.gate_up_proj.copy_(torch.stack([torch.cat([e.gate_proj.weight, e.up_proj.weight]) for e in moe.experts]))
        hf.experts.down_proj.copy_(torch.stack([e.down_proj.weight for e in moe.experts]))
        if moe.shared_expert is not None and moe.shared_expert_gate is not None:
            hf.shared_expert.load_state_dict(moe.shared_expert.state_dict())
            hf.shared_expert_gate.weight.copy_(moe.shared_expert_gate.weight)


@pytest.mark.parametrize("part", ["thinker", "talker"])
def test_matches_transformers(part: str) -> None:
    mod = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")
    cfgs = pytest.importorskip("transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe")
    dims = dict(hidden_size=16, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=8, norm_topk_prob=True)
    if part == "thinker":
        config = cfgs.Qwen3OmniMoeTextConfig(**dims)
        hf = mod.Qwen3OmniMoeThinkerTextSparseMoeBlock(config)
        moe = random_moe()
    else:
        config = cfgs.Qwen3OmniMoeTalkerTextConfig(**dims, shared_expert_intermediate_size=12)
        hf = mod.Qwen3OmniMoeTalkerTextSparseMoeBlock(config)
        moe = random_moe(12)
    _load_hf(hf, moe)
    x = torch.randn(1, 11, 16)
    with torch.no_grad():
        torch.testing.assert_close(moe(x), hf(x), atol=1e-6, rtol=1e-6)
