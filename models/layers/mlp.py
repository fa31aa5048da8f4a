"""Gated feed-forward: down(act(gate(x)) * up(x)); SiLU is Llama's SwiGLU, gelu-tanh Gemma's GeGLU."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch.nn.functional as F
from torch import Tensor, nn

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": F.silu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
}


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int, bias: bool = False, activation: str = "silu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r} (known: {', '.join(ACTIVATIONS)})")
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.act = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))  # [..., hidden]
