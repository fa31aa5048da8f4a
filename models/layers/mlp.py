"""Gated feed-forward: down(act(gate(x)) * up(x)); SiLU is Llama's SwiGLU, gelu-tanh Gemma's GeGLU."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch.nn.functional as F
from torch import Tensor, nn
from wgc.runtime.engines.cpu_linear import FusedWeight, fused_linear

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": F.silu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
}


class SwiGLU(nn.Module):
    """With `fused` (set by cpu_linear.pack_linears on CPU for large enough weights) gate and up run as
    one product."""

    fuses_projections = True
    fused: FusedWeight | None = None

    def __init__(self, hidden: int, intermediate: int, bias: bool = False, activation: str = "silu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r} (known: {', '.join(ACTIVATIONS)})")
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.act = ACTIVATIONS[activation]

    def fusable_parts(self) -> tuple[nn.Linear, ...]:
        return self.gate_proj, self.up_proj

    def forward(self, x: Tensor) -> Tensor:
        if self.fused is not None:
            # the submodules read from `_modules` once: a Module attribute lookup costs ~0.4 us, and a
            # small model's decode step is a few hundred such microseconds
            modules = self._modules
            parts = (modules["gate_proj"], modules["up_proj"])
            gate, up = fused_linear(x, parts, self.fused).chunk(2, dim=-1)  # type: ignore[arg-type]  # [..., inter]
            return modules["down_proj"](self.act(gate) * up)  # type: ignore[misc]  # [..., hidden]
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))  # [..., hidden]
