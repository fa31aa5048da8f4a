"""Grouped-query self-attention over the paged KV engine (or dense, for a cache-free forward)."""

from __future__ import annotations

from torch import Tensor, nn
from wgc.models.layers.rope import apply_rotary
from wgc.runtime.engines.attention import KVStep, Mode, dense_attention


class SelfAttention(nn.Module):
    """q/k/v projections, rotary embeddings, attention, output projection; kv_heads divides heads."""

    def __init__(self, layer: int, hidden: int, heads: int, kv_heads: int, head_dim: int, bias: bool = False) -> None:
        super().__init__()
        if heads % kv_heads:
            raise ValueError(f"{heads} query heads cannot share {kv_heads} kv heads evenly")
        self.layer, self.heads, self.kv_heads, self.head_dim = layer, heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, kv: KVStep | None = None, mode: Mode = "causal") -> Tensor:
        """Paged: x [N, hidden] packed new tokens; dense (kv None): x [B, T, hidden]. cos/sin: x's [..., head_dim]."""
        q = self.q_proj(x).unflatten(-1, (self.heads, self.head_dim))  # [..., heads, head_dim]
        k = self.k_proj(x).unflatten(-1, (self.kv_heads, self.head_dim))  # [..., kv_heads, head_dim]
        v = self.v_proj(x).unflatten(-1, (self.kv_heads, self.head_dim))  # [..., kv_heads, head_dim]
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = dense_attention(q, k, v, mode) if kv is None else kv.attend(self.layer, q, k, v)  # [..., heads, head_dim]
        return self.o_proj(out.flatten(-2))  # [..., hidden]
