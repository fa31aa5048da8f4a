"""The Gemma-300M action expert and the action/time heads (models-wave2.md §4.3).

π0.5: the 50 action tokens are `action_in_proj(x)`; the time t enters only as adaRMS's condition,
`silu(time_mlp_out(silu(time_mlp_in(sincos(t)))))`, which sets every layer's two norms and the final
norm (scale, shift, gate: `AdaptiveRMSNorm`); each residual is `x + gate·y`.
π0 (`pi05=False`): a state token `state_proj(state)` before the actions, the actions mixed with the
time embedding by `action_time_mlp_out(silu(action_time_mlp_in([a; sincos(t)])))`, plain Gemma norms.

The expert's layer i attends over layer i of the prefix's KV (same heads and head_dim) and never
writes it; its rows are packed [N, width] over every call of a step, one condition per sequence
(`rows` says which sequence each row belongs to).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models.layers.attention import SelfAttention
from wgc.models.layers.config import LlamaConfig
from wgc.models.layers.llama import LlamaBlock
from wgc.models.layers.mlp import SwiGLU
from wgc.models.layers.norm import AdaptiveRMSNorm, RMSNorm
from wgc.models.layers.rope import RotaryEmbedding
from wgc.models.pi05.config import Pi05Config
from wgc.runtime.engines.attention import KVStep


def time_embedding(t: Tensor, dim: int, min_period: float, max_period: float) -> Tensor:
    """t [B] -> [B, dim]: sin then cos of t·2π/period, periods geometric from min to max (float64,
    as openpi computes it: angles reach 2π/0.004 ≈ 1571 rad, where float32 loses 1e-4)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=t.device)  # [dim / 2]
    period = min_period * (max_period / min_period) ** fraction  # [dim / 2]
    angle = t.double()[:, None] * (2 * math.pi / period)[None]  # [B, dim / 2]
    return torch.cat([angle.sin(), angle.cos()], dim=-1)  # [B, dim]


class AdaBlock(nn.Module):
    """A Gemma layer whose two norms are adaptive and whose residuals are gated."""

    def __init__(self, c: LlamaConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = AdaptiveRMSNorm(c.hidden, c.hidden, c.norm_eps)
        self.self_attn = SelfAttention(layer, c.hidden, c.heads, c.kv_heads, c.head_dim)
        self.post_attention_layernorm = AdaptiveRMSNorm(c.hidden, c.hidden, c.norm_eps)
        self.mlp = SwiGLU(c.hidden, c.intermediate, activation=c.activation)

    def forward(self, x: Tensor, cond: Tensor, rows: Tensor | None, cos: Tensor, sin: Tensor,
                kv: KVStep | None) -> Tensor:
        """x [N, hidden]; cond [B, hidden] with rows [N] (AdaptiveRMSNorm), or broadcastable against x."""
        h, gate = self.input_layernorm(x, cond, rows)  # [N, hidden] each
        x = x + gate * self.self_attn(h, cos, sin, kv)  # [N, hidden]
        h, gate = self.post_attention_layernorm(x, cond, rows)
        return x + gate * self.mlp(h)  # [N, hidden]


class ActionExpert(nn.Module):
    """`layers` and `norm` (checkpoint names below `gemma_expert.model.`), adaptive in π0.5."""

    def __init__(self, config: Pi05Config) -> None:
        super().__init__()
        c = config.expert
        self.adaptive = config.pi05
        block = AdaBlock if config.pi05 else LlamaBlock
        self.layers = nn.ModuleList(block(c, i) for i in range(c.layers))
        self.norm = AdaptiveRMSNorm(c.hidden, c.hidden, c.norm_eps) if config.pi05 else \
            RMSNorm(c.hidden, c.norm_eps, unit_offset=True)
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta)

    def forward(self, x: Tensor, positions: Tensor, kv: KVStep | None, cond: Tensor | None = None,
                rows: Tensor | None = None) -> Tensor:
        """x [N, hidden] packed rows, positions [N]; π0.5: cond [B, hidden] per sequence and rows [N]
        (each row's sequence) -> normed hidden [N, hidden]."""
        cos, sin = self.rotary(positions, x.dtype)  # each [N, head_dim]
        for layer in self.layers:
            x = layer(x, cond, rows, cos, sin, kv) if self.adaptive else layer(x, cos, sin, kv)  # [N, hidden]
        if self.adaptive:
            return self.norm(x, cond, rows)[0]  # the final norm's gate has no residual to scale
        return self.norm(x)


class ActionHeads(nn.Module):
    """The projections around the expert (checkpoint names at the top level)."""

    def __init__(self, config: Pi05Config) -> None:
        super().__init__()
        width, d = config.expert.hidden, config.action_dim
        self.config = config
        self.action_in_proj = nn.Linear(d, width)
        self.action_out_proj = nn.Linear(width, d)
        if config.pi05:
            self.time_mlp_in = nn.Linear(width, width)
            self.time_mlp_out = nn.Linear(width, width)
        else:
            self.state_proj = nn.Linear(d, width)
            self.action_time_mlp_in = nn.Linear(2 * width, width)
            self.action_time_mlp_out = nn.Linear(width, width)

    def sincos(self, t: Tensor, dtype: torch.dtype) -> Tensor:
        c = self.config
        return time_embedding(t, c.expert.hidden, c.min_period, c.max_period).to(dtype)  # [B, width]

    def condition(self, t: Tensor, dtype: torch.dtype) -> Tensor:
        """π0.5's adaRMS condition: t [B] -> [B, width]."""
        h = F.silu(self.time_mlp_in(self.sincos(t, dtype)))  # [B, width]
        return F.silu(self.time_mlp_out(h))  # [B, width]

    def actions_in(self, x: Tensor, t: Tensor) -> Tensor:
        """Noisy actions x [B, chunk, d] at times t [B] -> the expert's action rows [B, chunk, width]."""
        a = self.action_in_proj(x)  # [B, chunk, width]
        if self.config.pi05:
            return a
        time = self.sincos(t, a.dtype)[:, None].expand_as(a)  # [B, chunk, width]
        return self.action_time_mlp_out(F.silu(self.action_time_mlp_in(torch.cat([a, time], dim=-1))))
