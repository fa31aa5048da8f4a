"""Token embedding and LM head; the head may share the embedding's weight (tied)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Embedding(nn.Module):
    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab, hidden))  # [vocab, hidden]

    def forward(self, tokens: Tensor) -> Tensor:
        return F.embedding(tokens, self.weight)  # [..., hidden]


class LMHead(nn.Module):
    """Logits = h @ W^T; tied: W is the embedding's own Parameter (one tensor, two names)."""

    def __init__(self, hidden: int, vocab: int, tied: Embedding | None = None) -> None:
        super().__init__()
        if tied is None:
            self.weight = nn.Parameter(torch.randn(vocab, hidden) / hidden**0.5)  # [vocab, hidden]
        else:
            self.weight = tied.weight  # [vocab, hidden], shared

    def forward(self, h: Tensor) -> Tensor:
        return F.linear(h, self.weight)  # [..., vocab]
