"""Rotary position embeddings (half-split, as Llama), with Llama-3 frequency scaling, and multimodal
rotary embeddings (M-RoPE) as Qwen3-VL / Qwen3-Omni interleave them.

Llama-3 scaling (Hugging Face `_compute_llama3_parameters`): with original context C, wavelengths
shorter than C / high_freq_factor keep their frequency, longer than C / low_freq_factor are
divided by `factor`, and those in between interpolate smoothly.

M-RoPE (`mrope_section` = (t, h, w) frequency counts, summing to head_dim / 2): each token has three
positions (time, height, width; all equal for text, so text alone is plain RoPE) and each frequency
rotates by one of them. Interleaved, as transformers' `Qwen3OmniMoeThinkerTextRotaryEmbedding`
recomposes them (its `interleaved` config flag is not read: always interleaved): frequency j takes h
when j % 3 == 1 and j < 3·h, w when j % 3 == 2 and j < 3·w, else t. ([24, 20, 20] over 64
frequencies: h at 1, 4, .., 58, w at 2, 5, .., 59, t at the other 24.) Not Qwen2-VL's chunked layout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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


def mrope_axes(section: Sequence[int]) -> Tensor:
    """Which position (0 t, 1 h, 2 w) each of the sum(section) frequencies rotates by (interleaved);
    on CPU, real even when the module is built on meta."""
    t, h, w = section
    j = torch.arange(t + h + w, device="cpu")  # [head_dim / 2]
    axis = torch.zeros_like(j)
    axis[(j % 3 == 1) & (j < 3 * h)] = 1
    axis[(j % 3 == 2) & (j < 3 * w)] = 2
    return axis  # [head_dim / 2] int64


class RotaryEmbedding(nn.Module):
    """cos/sin tables for given positions (any shape), in float32, cast to the activations' dtype.
    With `mrope_section`, positions are [3, ...] (t, h, w per token) and the tables [..., head_dim]."""

    def __init__(self, head_dim: int, theta: float, scaling: Llama3Scaling | None = None,
                 mrope_section: Sequence[int] | None = None) -> None:
        super().__init__()
        self._exact = inverse_frequencies(head_dim, theta, scaling)  # float32, never cast
        self.register_buffer("inv_freq", self._exact.clone(), persistent=False)
        self.mrope = mrope_section is not None
        if mrope_section is not None:
            if len(mrope_section) != 3 or sum(mrope_section) * 2 != head_dim:
                raise ValueError(f"mrope_section {list(mrope_section)} must be 3 counts summing to {head_dim // 2}")
            self.register_buffer("axis", mrope_axes(mrope_section), persistent=False)  # [head_dim / 2]

    def _apply(self, fn: Any, recurse: bool = True) -> RotaryEmbedding:
        """`model.to(torch.bfloat16)` casts every floating buffer: the frequencies would be rounded to
        bf16 and far positions rotated wrongly. They stay float32, on whatever device the module moves to."""
        super()._apply(fn, recurse)
        self.inv_freq = self._exact.to(self.inv_freq.device)
        return self

    def forward(self, positions: Tensor, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        freqs = positions[..., None].float() * self.inv_freq  # [..., head_dim / 2] ([3, ...] with M-RoPE)
        if self.mrope:
            if positions.dim() == 0 or positions.shape[0] != 3:
                raise ValueError(f"M-RoPE takes positions [3, ...] (t, h, w), found {list(positions.shape)}")
            pick = self.axis.expand(1, *freqs.shape[1:])  # [1, ..., head_dim / 2]
            freqs = freqs.gather(0, pick)[0]  # [..., head_dim / 2]: each frequency from its axis
        angles = torch.cat([freqs, freqs], dim=-1)  # [..., head_dim]
        return angles.cos().to(dtype), angles.sin().to(dtype)  # each [..., head_dim]


_SIGNS: dict[tuple[int, torch.dtype], Tensor] = {}  # (head_dim, dtype) -> [-1.., +1..]


def _half_signs(head_dim: int, dtype: torch.dtype) -> Tensor:
    """[-1] * (head_dim / 2) + [+1] * (head_dim / 2): a half-rolled x times these is rotate-half
    (a CPU tensor, made once per head_dim and dtype)."""
    key = (head_dim, dtype)
    if key not in _SIGNS:
        half = head_dim // 2
        _SIGNS[key] = torch.cat([-torch.ones(half), torch.ones(head_dim - half)]).to(dtype)  # [head_dim]
    return _SIGNS[key]


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: [..., heads, head_dim]; cos, sin: [..., head_dim], or [..., 1, head_dim] with the heads axis
    already there (`LlamaModel` adds it once a step, not twice a layer) -> [..., heads, head_dim].

    On CPU, where a decode step of a small model costs what it dispatches, rotate-half [-x2, x1] is
    x rolled by half a head times signs (bitwise the same values: the sign is exact) instead of two
    slices, a neg and a cat: 3.2 against 5.5 us at one row, 4.0 against 6.1 at 32, 34 against 30 at
    1024 (an index_select was 254 there). The roll's own result then takes the signs, the sin and
    x * cos in place: the same values (a sum is the same either way round) without three of the five
    results allocated and written, which a prompt's rows paid in memory traffic (the 0.7M shape's q
    and k together, [1024, 6, 32]: 346 against 202 us; 10.0 against 6.9 at one row, an Intel Xeon).
    Elsewhere the plain expression (a CUDA graph replays it whole)."""
    if cos.dim() < x.dim():
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # [..., 1, head_dim]
    half = x.shape[-1] // 2
    if x.device.type == "cpu":
        rotated = x.roll(half, -1)  # [..., heads, head_dim], a new tensor: [x2, x1]
        rotated.mul_(_half_signs(x.shape[-1], x.dtype)).mul_(sin)  # [-x2, x1] * sin
        return rotated.add_(x * cos)  # [..., heads, head_dim]
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # [..., heads, head_dim]
    return x * cos + rotated * sin  # [..., heads, head_dim]
