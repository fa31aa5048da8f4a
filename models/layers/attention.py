"""Grouped-query self-attention over the paged KV engine (or dense, for a cache-free forward).

Variants are parameters, not copies: `bias` on the q/k/v projections (and on o unless `o_bias` says
otherwise: Qwen2 has q/k/v biases and none on o), and `qk_norm_eps`, an RMSNorm over head_dim on
queries and keys after the projection and before the rotation (Qwen3, BAGEL). A subclass may add a
second set of projections under a suffix (BAGEL's generation expert, `q_proj_moe_gen`, ...) and run
`qkv` / `out` with that suffix: one code path for every expert.
"""

from __future__ import annotations

from torch import Tensor, nn
from wgc.models.layers.norm import RMSNorm
from wgc.models.layers.rope import apply_rotary
from wgc.runtime.engines.attention import KVStep, Mode, dense_attention
from wgc.runtime.engines.cpu_linear import FusedWeight, fused_linear


class SelfAttention(nn.Module):
    """q/k/v projections, rotary embeddings, attention, output projection; kv_heads divides heads.

    With `fused` (set by cpu_linear.pack_linears on CPU for large enough weights) the three projections of the module's own
    expert run as one product over their concatenated weights, and q and k are rotated in one call."""

    fuses_projections = True
    fused: FusedWeight | None = None
    expert_suffixes: tuple[str, ...] = ("",)  # every set of projections (a subclass adds its own): TP cuts each alike

    def __init__(self, layer: int, hidden: int, heads: int, kv_heads: int, head_dim: int, bias: bool = False, *,
                 o_bias: bool | None = None, qk_norm_eps: float | None = None) -> None:
        super().__init__()
        if heads % kv_heads:
            raise ValueError(f"{heads} query heads cannot share {kv_heads} kv heads evenly")
        self.layer, self.heads, self.kv_heads, self.head_dim = layer, heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias if o_bias is None else o_bias)
        self.qk_norm = qk_norm_eps is not None
        if qk_norm_eps is not None:
            self.q_norm = RMSNorm(head_dim, qk_norm_eps)
            self.k_norm = RMSNorm(head_dim, qk_norm_eps)

    def qkv(self, x: Tensor, cos: Tensor, sin: Tensor, expert: str = "") -> tuple[Tensor, Tensor, Tensor]:
        """x [..., hidden] -> rotated q [..., heads, head_dim], k and v [..., kv_heads, head_dim], through
        the projections named with the suffix `expert` ("" for this module's own)."""
        if self.fused is not None and not expert:
            return self._fused_qkv(x, cos, sin, self.fused)
        q = getattr(self, "q_proj" + expert)(x).unflatten(-1, (self.heads, self.head_dim))  # [..., heads, head_dim]
        k = getattr(self, "k_proj" + expert)(x).unflatten(-1, (self.kv_heads, self.head_dim))  # [..., kv_heads, hd]
        v = getattr(self, "v_proj" + expert)(x).unflatten(-1, (self.kv_heads, self.head_dim))  # [..., kv_heads, hd]
        if self.qk_norm:
            q, k = getattr(self, "q_norm" + expert)(q), getattr(self, "k_norm" + expert)(k)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def fusable_parts(self) -> tuple[nn.Linear, ...]:
        return self.q_proj, self.k_proj, self.v_proj

    def _fused_qkv(self, x: Tensor, cos: Tensor, sin: Tensor, fused: FusedWeight) -> tuple[Tensor, Tensor, Tensor]:
        """`qkv` through one product; the same values as the three (to float rounding: tests/engines/test_fused_projections.py)."""
        h, kv = self.heads, self.kv_heads
        out = fused_linear(x, self.fusable_parts(), fused)  # [..., (h + 2 kv) * head_dim]
        out = out.unflatten(-1, (h + 2 * kv, self.head_dim))  # [..., h + 2 kv, head_dim]
        v = out[..., h + kv:, :]  # [..., kv_heads, head_dim]
        if self.qk_norm:
            q, k = self.q_norm(out[..., :h, :]), self.k_norm(out[..., h:h + kv, :])
            return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v
        qk = apply_rotary(out[..., :h + kv, :], cos, sin)  # [..., h + kv, head_dim]: one rotation for both
        return qk[..., :h, :], qk[..., h:, :], v

    def out(self, attended: Tensor, expert: str = "") -> Tensor:
        """attended [..., heads, head_dim] -> [..., hidden] through the output projection of `expert`."""
        return getattr(self, "o_proj" + expert)(attended.flatten(-2))  # [..., hidden]

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, kv: KVStep | None = None, mode: Mode = "causal") -> Tensor:
        """Paged: x [N, hidden] packed new tokens; dense (kv None): x [B, T, hidden]. cos/sin: x's [..., head_dim]."""
        return self.out(self.attend(x, cos, sin, kv, mode))  # [..., hidden]

    def attend(self, x: Tensor, cos: Tensor, sin: Tensor, kv: KVStep | None = None, mode: Mode = "causal") -> Tensor:
        """`forward` before the output projection: x's keys and values written (paged), every row
        attended -> [..., heads, head_dim]."""
        q, k, v = self.qkv(x, cos, sin)
        return dense_attention(q, k, v, mode) if kv is None else kv.attend(self.layer, q, k, v)
