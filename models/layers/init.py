"""Random weights for the tiny presets and random-weight runs: normal(0, std) as transformers
initialises Qwen and Llama, every norm's weight at one (zero for a Gemma norm, whose scale is
1 + w), frozen parameters kept as built."""

from __future__ import annotations

import torch
from torch import nn
from wgc.models.layers.norm import RMSNorm


def init_random(module: nn.Module, seed: int = 0, std: float = 0.02) -> None:
    """In place, from one CPU generator seeded with `seed` (the same weights on every device)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            owner = name.split(".")[-2] if "." in name else ""
            if "norm" in owner:
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * std)
        for part in module.modules():
            if isinstance(part, RMSNorm) and part.unit_offset and part.weight.requires_grad:
                part.weight.zero_()
