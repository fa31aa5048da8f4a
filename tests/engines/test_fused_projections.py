"""Fused CPU projections (runtime/engines/cpu_linear.FusedWeight): q/k/v and gate/up as one product
each, set by pack_linears. They give the separate projections' values (to float rounding), follow a
weight changed after the first use, stay off when packing is off, take F.linear on small weights
(the 0.7M shape: its fused gate/up, over the packing threshold as one tensor, must not cross onto
oneDNN), and a Llama decodes the same greedy tokens with them as without."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from wgc.models.layers import LlamaConfig, LlamaModel
from wgc.models.layers.attention import SelfAttention
from wgc.models.layers.mlp import SwiGLU
from wgc.runtime.engines.cpu_linear import MIN_PACKED_WEIGHT, FusedWeight, pack_linears
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, Write


def _cos_sin(n: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.rand(n, dim) * 6
    return angles.cos(), angles.sin()


@pytest.mark.parametrize("qk_norm, bias", [(None, False), (1e-6, False), (None, True)])
def test_fused_qkv_equals_the_three_projections(qk_norm: float | None, bias: bool) -> None:
    torch.manual_seed(0)
    plain = SelfAttention(0, 256, heads=8, kv_heads=4, head_dim=64, bias=bias, qk_norm_eps=qk_norm).eval()
    fused = copy.deepcopy(plain)
    assert pack_linears(fused) and isinstance(fused.fused, FusedWeight)
    x = torch.randn(5, 256)
    cos, sin = _cos_sin(5, 64)
    with torch.no_grad():
        for got, want in zip(fused.qkv(x, cos, sin), plain.qkv(x, cos, sin)):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        with torch.no_grad():
            fused.k_proj.weight.mul_(2.0)  # changed in place after the first use: the fusion follows
            plain.k_proj.weight.mul_(2.0)
        torch.testing.assert_close(fused.qkv(x, cos, sin)[1], plain.qkv(x, cos, sin)[1], atol=1e-5, rtol=1e-5)


def test_fused_gate_up_equals_the_two_projections() -> None:
    torch.manual_seed(1)
    plain = SwiGLU(256, 512).eval()
    fused = copy.deepcopy(plain)
    pack_linears(fused)
    assert isinstance(fused.fused, FusedWeight)
    x = torch.randn(32, 256)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), plain(x), atol=1e-6, rtol=1e-6)
        fused.up_proj.weight = torch.nn.Parameter(torch.randn(512, 256))  # another tensor: made again
        plain.up_proj.weight = fused.up_proj.weight
        torch.testing.assert_close(fused(x), plain(x), atol=1e-5, rtol=1e-5)


def test_packing_off_leaves_the_projections_separate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WGC_CPU_PACKED_LINEAR", "0")
    mlp = SwiGLU(16, 32)
    assert pack_linears(mlp) == 0 and mlp.fused is None


def test_small_weights_are_fused_on_f_linear_whatever_the_fused_size() -> None:
    """The 0.7M shape's projections (each under MIN_PACKED_WEIGHT) are fused over F.linear: the
    fused gate/up is MIN_PACKED_WEIGHT elements, yet never packed (oneDNN was 9% slower at one row)."""
    torch.manual_seed(4)
    plain = LlamaModel(LlamaConfig.preset("tiny")).eval()
    model = copy.deepcopy(plain)
    pack_linears(model)
    mlp, attn = model.layers[0].mlp, model.layers[0].self_attn
    assert mlp.gate_proj.weight.numel() < MIN_PACKED_WEIGHT <= 2 * mlp.gate_proj.weight.numel()
    assert all(isinstance(m.fused, FusedWeight) and not m.fused.packs
               for layer in model.layers for m in (layer.self_attn, layer.mlp))
    x = torch.randn(3, 128)
    cos, sin = _cos_sin(3, attn.head_dim)
    with torch.no_grad():
        torch.testing.assert_close(mlp(x), plain.layers[0].mlp(x), atol=1e-6, rtol=1e-6)
        for got, want in zip(attn.qkv(x, cos, sin), plain.layers[0].self_attn.qkv(x, cos, sin)):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    assert mlp.fused.weight is not None and mlp.fused.weight.numel() == MIN_PACKED_WEIGHT  # fused, used
    assert mlp.fused.packed.tensor is None and attn.fused.packed.tensor is None  # and never packed


def test_a_llama_decodes_the_same_greedy_tokens_fused() -> None:
    config = replace(LlamaConfig.preset("tiny"), hidden=256, layers=2, heads=4, kv_heads=4, head_dim=64,
                     intermediate=512)
    torch.manual_seed(2)
    base = LlamaModel(config).eval()
    with torch.no_grad():
        for name, p in base.named_parameters():
            p.fill_(1.0) if name.endswith("norm.weight") else p.normal_(0.0, 0.05)
    fused = copy.deepcopy(base)
    pack_linears(fused)
    assert all(layer.self_attn.fused is not None and layer.mlp.fused is not None for layer in fused.layers)
    prompts = torch.randint(0, config.vocab, (4, 9), generator=torch.Generator().manual_seed(3)).tolist()
    assert _greedy(fused, config, prompts, 16) == _greedy(base, config, prompts, 16)


def _greedy(model: LlamaModel, config: LlamaConfig, prompts: list[list[int]], steps: int) -> list[list[int]]:
    geometry = Geometry(config.layers, config.heads, config.kv_heads, config.head_dim, config.max_positions)
    kv = KVCacheEngine(geometry, 64, 16, torch.device("cpu"), prefix_caching=False)
    feed, out = prompts, [[] for _ in prompts]
    for _ in range(steps):
        writes = [Write(r, "main", toks, len(toks)) for r, toks in enumerate(feed)]
        with kv.stepping(writes) as prepared, torch.no_grad():
            ids = torch.tensor([t for i in range(len(writes)) for t in prepared.chunk(i)])
            last = torch.cumsum(torch.tensor(prepared.lengths), 0) - 1
            tokens = model(ids, prepared.positions, kv.step(prepared), logits_at=last).argmax(-1).tolist()
        feed = [[t] for t in tokens]
        for row, t in zip(out, tokens):
            row.append(t)
    return out
