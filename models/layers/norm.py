"""RMSNorm, computed in float32 and cast back (as Llama and Hugging Face do); Gemma's variant, whose
stored weight w scales by (1 + w) before the cast; and the adaptive RMSNorm of π0.5's action expert,
whose scale, shift and residual gate come from a conditioning vector.

Gemma multiplies in float32 and casts after (`(x * (1 + w)).to(dtype)`), Llama casts first
(`w * x.to(dtype)`): in bf16 the two round differently, so the option keeps each family's order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def rms(x: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the last axis, in float32."""
    h = x.float()  # [..., dim]
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)  # [..., dim]


class RMSNorm(nn.Module):
    """`unit_offset`: Gemma's (1 + w) scale, its weight stored as w (zero is the identity)."""

    def __init__(self, dim: int, eps: float = 1e-5, unit_offset: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim) if unit_offset else torch.ones(dim))  # [dim]
        self.eps = eps
        self.unit_offset = unit_offset

    def forward(self, x: Tensor) -> Tensor:
        weight = self._parameters["weight"]  # one lookup, not three (~0.4 us each; nine norms a step)
        if x.dtype == torch.float32 and weight.dtype == torch.float32 and not self.unit_offset:
            # one call in place of six operators (a decode step of a small model runs ~2 us per operator);
            # bitwise the same as the float32 path below (tests/models/test_layers.py)
            return F.rms_norm(x, weight.shape, weight, self.eps)  # [..., dim]
        h = rms(x, self.eps)  # [..., dim] float32
        if self.unit_offset:
            return (h * (1.0 + self.weight.float())).to(x.dtype)  # [..., dim]
        return self.weight * h.to(x.dtype)  # [..., dim]


class AdaptiveRMSNorm(nn.Module):
    """adaRMS (π0.5's expert): `dense` maps the condition [..., cond] to (scale, shift, gate), each
    [..., dim]; the output is rms(x)·(1 + scale) + shift, and the gate multiplies the residual branch
    the norm feeds (`x + gate·y`). With dense.weight = 0 and dense.bias = [w, 0, 1] it is Gemma's
    RMSNorm with weight w and a plain residual."""

    def __init__(self, dim: int, cond_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.dense = nn.Linear(cond_dim, 3 * dim)
        self.eps = eps

    def forward(self, x: Tensor, cond: Tensor, rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x [..., dim]; cond [..., cond_dim] broadcastable against x, or, with `rows` [N] (each row's
        sequence), one per sequence [B, cond_dim] for packed x [N, dim] -> (normed, gate), like x."""
        modulation = self.dense(cond)  # [..., 3 dim]
        if rows is not None:
            modulation = modulation[rows]  # [N, 3 dim]: computed once per sequence, not per row
        scale, shift, gate = modulation.chunk(3, dim=-1)  # each [..., dim]
        h = rms(x, self.eps) * (1.0 + scale.float()) + shift.float()  # [..., dim]
        return h.to(x.dtype), gate.to(x.dtype)
