"""The modules a tensor-parallel shard is made of where it differs from the whole model, and the group
interface they communicate through.

Column-parallel linears are plain `nn.Linear`s of fewer output rows (no communication). What needs
a collective is here: a row-parallel linear (partial products all-reduced, the bias added once
after), a vocab-parallel embedding (ids outside the rank's rows look up zeros; the all-reduce fills
in the one real row), a vocab-parallel LM head (each rank's logits all-gathered into the whole
vocabulary, so every rank samples the same token), and an expert-parallel MoE (each rank runs its
own experts whole; tp_cuts.py says why this split and not a cut of every expert).

The group is anything with `rank`, `size`, `all_reduce(t)` (in place, summed) and `all_gather(t)`
(a list of every rank's tensor): a torch.distributed process group in a worker
(runtime/worker/tp_group.py), threads in the shard-arithmetic tests.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models.layers.moe import SparseMoE
from wgc.models.layers.tp_cuts import split
from wgc.models.weights_io import Part


class Group(Protocol):
    rank: int
    size: int

    def all_reduce(self, t: Tensor) -> Tensor: ...

    def all_gather(self, t: Tensor) -> list[Tensor]: ...


class RowParallelLinear(nn.Module):
    """Input features [cut.start, cut.end) of a whole linear; the partial products summed over the group."""

    def __init__(self, linear: nn.Linear, cut: Part, group: Group) -> None:
        super().__init__()
        like = linear.weight
        self.group = group
        self.weight = nn.Parameter(like.new_empty(linear.out_features, cut.end - cut.start), requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(like.new_empty(linear.out_features),
                                                                  requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        y = self.group.all_reduce(F.linear(x, self.weight))  # [..., out], summed over the group
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Module):
    """Rows [start, end) of the embedding; other ids look up zeros, the all-reduce fills them in."""

    def __init__(self, vocab: int, hidden: int, cut: Part, scale: float | None, group: Group, like: Tensor) -> None:
        super().__init__()
        self.group, self.start, self.end, self.scale = group, cut.start, cut.end, scale
        self.weight = nn.Parameter(like.new_empty(cut.end - cut.start, hidden), requires_grad=False)  # [rows, hidden]

    def forward(self, tokens: Tensor) -> Tensor:
        inside = (tokens >= self.start) & (tokens < self.end)
        local = torch.where(inside, tokens - self.start, torch.zeros_like(tokens))
        out = F.embedding(local, self.weight) * inside.unsqueeze(-1).to(self.weight.dtype)  # [..., hidden]
        out = self.group.all_reduce(out)
        if self.scale is None:
            return out
        return out * torch.tensor(self.scale, dtype=self.weight.dtype, device=out.device)


class VocabParallelLMHead(nn.Module):
    """Logits for rows [start, end) of the head; every rank's gathered into the whole vocabulary."""

    def __init__(self, vocab: int, hidden: int, cut: Part, group: Group, like: Tensor) -> None:
        super().__init__()
        self.group = group
        self.width = -(-vocab // group.size)  # the longest part: every rank gathers that many
        self.weight = nn.Parameter(like.new_empty(cut.end - cut.start, hidden), requires_grad=False)
        self.vocab = vocab

    def forward(self, h: Tensor) -> Tensor:
        local = F.linear(h, self.weight)  # [..., end - start]
        padded = F.pad(local, (0, self.width - local.shape[-1]))  # [..., width]: equal parts to gather
        parts = self.group.all_gather(padded.contiguous())
        sizes = [split(self.vocab, self.group.size, r) for r in range(self.group.size)]
        return torch.cat([p[..., : e - s] for p, (s, e) in zip(parts, sizes, strict=True)], dim=-1)  # [..., vocab]


class ExpertParallelMoE(SparseMoE):
    """A SparseMoE holding only experts `owned`, whole (under their global indices: `experts.{e}.*`
    as in the checkpoint); the router and the shared expert's gate stay whole on every rank.

    Every rank routes the same (replicated) input alike, fills the grouped rows of its own experts and
    zeros elsewhere; one all-reduce of the grouped rows gives every rank tp 1's rows bit for bit (each
    row has one non-zero contributor), then SparseMoE's per-token sum, the same as at tp 1. The price:
    the all-reduce carries top_k rows a token instead of one, and a rank's work follows the routing."""

    def __init__(self, moe: SparseMoE, owned: range, group: Group) -> None:
        nn.Module.__init__(self)  # SparseMoE's would build every expert: take moe's own modules instead
        self.hidden, self.num_experts, self.top_k = moe.hidden, moe.num_experts, moe.top_k
        self.norm_topk_prob = moe.norm_topk_prob
        self.gate = moe.gate
        self.experts = nn.ModuleDict({str(e): moe.experts[e] for e in owned})  # type: ignore[assignment]
        self.shared_expert, self.shared_expert_gate = moe.shared_expert, moe.shared_expert_gate
        self.group = group

    def expert_rows(self, grouped: Tensor, scale: Tensor, counts: list[int]) -> Tensor:
        outputs = torch.zeros_like(grouped)  # [N * top_k, hidden]: other ranks' experts' rows stay zero
        start = 0
        for expert, n in enumerate(counts):
            mine = self.experts[str(expert)] if str(expert) in self.experts else None
            if n and mine is not None:
                rows = slice(start, start + n)
                outputs[rows] = mine(grouped[rows]) * scale[rows]  # [n, hidden]
            start += n
        return self.group.all_reduce(outputs)  # [N * top_k, hidden], every row from its one owner
