"""The small operators of a decode step written with fewer dispatches (models/layers/rope.py,
llama.py) compute exactly what their plain expressions compute: rotate-half as a roll by half a head
and a product by signs, tables given with or without the heads axis, bitwise against the textbook
formula in float32 and bf16; and a Llama's forward with the heads axis added once a step is the
same, bit for bit, as one that rotates with the plain expression in every layer."""

from __future__ import annotations

import pytest
import torch
from wgc.models.layers import LlamaConfig, LlamaModel, RotaryEmbedding, apply_rotary
from wgc.models.layers import attention as attention_module


def reference_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Llama's rotate-half, as transformers writes it: x * cos + [-x2, x1] * sin, tables [..., head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[..., None, :] + rotated * sin[..., None, :]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lead", [(1,), (7,), (2, 5)])
@pytest.mark.parametrize("head_dim", [8, 32, 64])
def test_rotary_is_bitwise_the_reference_with_or_without_the_heads_axis(
        dtype: torch.dtype, lead: tuple[int, ...], head_dim: int) -> None:
    torch.manual_seed(head_dim)
    x = torch.randn(*lead, 3, head_dim).to(dtype)  # [..., heads, head_dim]
    positions = torch.randint(0, 4000, lead)
    cos, sin = RotaryEmbedding(head_dim, 500000.0)(positions, dtype)  # [..., head_dim]
    want = reference_rotary(x, cos, sin)
    assert torch.equal(apply_rotary(x, cos, sin), want)
    assert torch.equal(apply_rotary(x, cos.unsqueeze(-2), sin.unsqueeze(-2)), want)  # heads axis given
    assert torch.equal(apply_rotary(x[..., :1, :], cos, sin), want[..., :1, :])  # one head
    wide = torch.randn(*lead, 5, head_dim).to(dtype)[..., 1:4, :]  # heads sliced out of a fused product
    before = wide.clone()
    assert torch.equal(apply_rotary(wide, cos, sin), reference_rotary(wide, cos, sin))
    assert torch.equal(wide, before)  # its input untouched: the CPU path works in place on its own result


def test_a_llama_forward_is_bitwise_the_one_rotating_with_the_plain_expression(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = LlamaModel(LlamaConfig.preset("tiny")).eval()
    tokens = torch.randint(0, 512, (2, 11))
    positions = torch.arange(11).expand(2, -1)
    with torch.no_grad():
        ours = model(tokens, positions)  # [2, 11, vocab]
        monkeypatch.setattr(attention_module, "apply_rotary",
                            lambda x, c, s: reference_rotary(x, c.squeeze(-2), s.squeeze(-2)))
        plain = model(tokens, positions)
    assert torch.equal(ours, plain)
