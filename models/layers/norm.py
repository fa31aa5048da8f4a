"""RMSNorm, computed in float32 and cast back (as Llama and Hugging Face do)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))  # [dim]
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()  # [..., dim]
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # [..., dim]
        return self.weight * h.to(x.dtype)  # [..., dim]
