"""Rotary position embeddings (half-split, as Llama), with Llama-3 frequency scaling.

Llama-3 scaling (Hugging Face `_compute_llama3_parameters`): with original context C, wavelengths
shorter than C / high_freq_factor keep their frequency, longer than C / low_freq_factor are
divided by `factor`, and those in between interpolate smoothly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class Llama3Scaling:
    factor: float = 32.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192


def inverse_frequencies(head_dim: int, theta: float, scaling: Llama3Scaling | None = None) -> Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim  # [head_dim / 2]
    inv_freq = 1.0 / theta**exponents  # [head_dim / 2]
    return inv_freq if scaling is None else llama3_scale(inv_freq, scaling)


def llama3_scale(inv_freq: Tensor, s: Llama3Scaling) -> Tensor:
    context = s.original_max_positions
    wavelen = 2 * math.pi / inv_freq  # [head_dim / 2]
    smooth = (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)  # [head_dim / 2]
    smoothed = (1 - smooth) * inv_freq / s.factor + smooth * inv_freq  # [head_dim / 2]
    scaled = torch.where(wavelen > context / s.low_freq_factor, inv_freq / s.factor, smoothed)  # [head_dim / 2]
    return torch.where(wavelen < context / s.high_freq_factor, inv_freq, scaled)  # [head_dim / 2]


class RotaryEmbedding(nn.Module):
    """cos/sin tables for given positions (any shape), in float32, cast to the activations' dtype."""

    def __init__(self, head_dim: int, theta: float, scaling: Llama3Scaling | None = None) -> None:
        super().__init__()
        self._exact = inverse_frequencies(head_dim, theta, scaling)  # float32, never cast
        self.register_buffer("inv_freq", self._exact.clone(), persistent=False)

    def _apply(self, fn: Any, recurse: bool = True) -> RotaryEmbedding:
        """`model.to(torch.bfloat16)` casts every floating buffer: the frequencies would be rounded to
        bf16 and far positions rotated wrongly. They stay float32, on whatever device the module moves to."""
        super()._apply(fn, recurse)
        self.inv_freq = self._exact.to(self.inv_freq.device)
        return self

    def forward(self, positions: Tensor, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        freqs = positions[..., None].float() * self.inv_freq  # [..., head_dim / 2]
        angles = torch.cat([freqs, freqs], dim=-1)  # [..., head_dim]
        return angles.cos().to(dtype), angles.sin().to(dtype)  # each [..., head_dim]


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: [..., heads, head_dim]; cos, sin: [..., head_dim] (no heads axis) -> [..., heads, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # [..., heads, head_dim]
    return x * cos[..., None, :] + rotated * sin[..., None, :]  # [..., heads, head_dim]
