"""Token embedding and LM head; the head may share the embedding's weight (tied). Gemma scales its
embeddings by sqrt(hidden), the factor cast to the weight's dtype first as transformers does (so
bf16 gives 45.25 for 2048, not 45.2548)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.runtime.engines.cpu_linear import PackedWeight, linear


class Embedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, scale: float | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab, hidden))  # [vocab, hidden]
        self.scale = scale

    def forward(self, tokens: Tensor) -> Tensor:
        out = F.embedding(tokens, self.weight)  # [..., hidden]
        if self.scale is None:
            return out
        return out * torch.tensor(self.scale, dtype=self.weight.dtype, device=out.device)  # [..., hidden]


class LMHead(nn.Module):
    """Logits = h @ W^T; tied: W is the embedding's own Parameter (one tensor, two names). On CPU a kv
    component may set `packed` (runtime/engines/cpu_linear.py: the product through oneDNN)."""

    packs_weight = True
    packed: PackedWeight | None = None

    def __init__(self, hidden: int, vocab: int, tied: Embedding | None = None) -> None:
        super().__init__()
        if tied is None:
            self.weight = nn.Parameter(torch.randn(vocab, hidden) / hidden**0.5)  # [vocab, hidden]
        else:
            self.weight = tied.weight  # [vocab, hidden], shared

    def forward(self, h: Tensor) -> Tensor:
        return linear(h, self.weight, None, self.packed)  # [..., vocab]
