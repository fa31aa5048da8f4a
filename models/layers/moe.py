"""A sparse mixture-of-experts feed-forward: a top-k softmax router over SwiGLU experts, with an
optional shared expert behind a sigmoid gate (Qwen2-MoE / Qwen3-MoE / Qwen3-Omni thinker and talker).

Per token: probabilities = softmax(router(x)) in float32, the top k of them kept (renormalised to sum
to one when `norm_topk_prob`), and the output is the sum of the chosen experts' outputs weighted by
them; with a shared expert, `sigmoid(shared_expert_gate(x)) * shared_expert(x)` is added.

Computed by grouping, not densely: the (token, expert) pairs are sorted by expert, so each expert
that was chosen at all runs once over the contiguous run of its tokens, and experts nobody chose
cost nothing. The weighted outputs are summed back per token in expert order (the order
transformers' eager `...Experts.forward` adds them in, so float32 results agree to the last bits).

Parameter names are the checkpoints' per-expert ones, so a state dict loads as stored:
`gate.weight` [experts, hidden] (the router), `experts.{e}.{gate,up,down}_proj.weight`,
`shared_expert.{gate,up,down}_proj.weight`, `shared_expert_gate.weight` [1, hidden].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models.layers.mlp import SwiGLU


class SparseMoE(nn.Module):
    """`experts` SwiGLU experts of width `intermediate`, `top_k` per token; `shared_intermediate`
    adds a gated shared expert of that width (None: none)."""

    def __init__(self, hidden: int, experts: int, top_k: int, intermediate: int, *, norm_topk_prob: bool = True,
                 shared_intermediate: int | None = None) -> None:
        super().__init__()
        if not 0 < top_k <= experts:
            raise ValueError(f"top_k {top_k} must be in 1..{experts} (the number of experts)")
        self.hidden, self.num_experts, self.top_k = hidden, experts, top_k
        self.norm_topk_prob = norm_topk_prob
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(hidden, intermediate) for _ in range(experts))
        self.shared_expert = None if shared_intermediate is None else SwiGLU(hidden, shared_intermediate)
        self.shared_expert_gate = None if shared_intermediate is None else nn.Linear(hidden, 1, bias=False)

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x [N, hidden] -> (weights [N, top_k] in x's dtype, expert ids [N, top_k] int64)."""
        logits = self.gate(x)  # [N, experts]
        probs = F.softmax(logits, dim=-1, dtype=torch.float32)  # [N, experts]
        top, chosen = torch.topk(probs, self.top_k, dim=-1)  # each [N, top_k]
        if self.norm_topk_prob:
            top = top / top.sum(dim=-1, keepdim=True)  # [N, top_k]
        return top.to(logits.dtype), chosen

    def routed(self, x: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
        """x [N, hidden], weights and chosen [N, top_k] -> the weighted experts' sum [N, hidden]."""
        flat = chosen.flatten()  # [N * top_k], pair p is token p // top_k
        order = flat.argsort(stable=True)  # [N * top_k]: pairs grouped by expert, tokens ascending
        tokens = order // self.top_k  # [N * top_k]
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()  # one host sync per layer
        grouped = x.index_select(0, tokens)  # [N * top_k, hidden]
        scale = weights.flatten().index_select(0, order)[:, None]  # [N * top_k, 1]
        outputs = self.expert_rows(grouped, scale, counts)  # [N * top_k, hidden]
        return torch.zeros_like(x).index_add_(0, tokens, outputs)  # [N, hidden]

    def expert_rows(self, grouped: Tensor, scale: Tensor, counts: list[int]) -> Tensor:
        """Each (token, expert) pair's weighted expert output, grouped [N * top_k, hidden] in expert
        order (`counts[e]` rows for expert e). A tensor-parallel shard computes only its own experts'
        rows (layers/tp_modules.ExpertParallelMoE)."""
        outputs = torch.empty_like(grouped)  # [N * top_k, hidden]
        start = 0
        for expert, n in enumerate(counts):
            if n:
                rows = slice(start, start + n)
                outputs[rows] = self.experts[expert](grouped[rows]) * scale[rows]  # [n, hidden]
                start += n
        return outputs

    def forward(self, x: Tensor) -> Tensor:
        """x [..., hidden] -> [..., hidden]."""
        flat = x.reshape(-1, self.hidden)  # [N, hidden]
        weights, chosen = self.route(flat)
        out = self.routed(flat, weights, chosen)  # [N, hidden]
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)  # [N, hidden]
        return out.reshape(x.shape)
