"""Tensor parallelism for the Llama-family layers: one rank's shard of a whole model, and its collectives.

`shard_llama(model, group)` turns a whole `LlamaModel` (built from the checkpoint, or from the same
seed on every rank) into rank `group.rank`'s shard of a `group.size`-way copy, in place, the way
vLLM and nano-vllm split a Llama layer (Megatron's column/row split):

- q/k/v, gate and up are column-parallel: a rank keeps heads/tp query heads and intermediate/tp
  rows, no communication;
- KV heads are sharded kv_heads/tp per rank, or, when tp exceeds them, replicated: each rank keeps
  the one KV head its query heads share (rank r holds KV head r // (tp / kv_heads)); the KV cache
  then holds that many heads per rank, as the placement's memory table assumes (⌈kv_heads/tp⌉);
- o_proj and down_proj are row-parallel: the matching input columns, an all-reduce of the partial
  outputs, the bias added once after it;
- the embedding is vocab-parallel: a rank holds a contiguous range of rows, ids outside it give
  zero rows, an all-reduce sums the one real row in;
- the LM head is vocab-parallel: each rank's logits for its range, all-gathered into the full
  vocabulary on every rank (each rank samples the same token: they share the sampling state).

`model.config` becomes the shard's (heads, kv_heads, intermediate per rank; vocab stays whole),
which is what the KV engine's geometry reads. Weights are the whole model's slices, so every rank
loads the same checkpoint and keeps its part; the whole model is dropped after sharding.

The group is anything with `rank`, `size`, `all_reduce(t)` (in place, summed) and `all_gather(t)`
(a list of every rank's tensor): a torch.distributed process group in a worker
(runtime/worker/tp_group.py), threads in the shard-arithmetic test.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models.layers.llama import LlamaModel

from wgc.plan.model import ComponentSpec


class Group(Protocol):
    rank: int
    size: int

    def all_reduce(self, t: Tensor) -> Tensor: ...

    def all_gather(self, t: Tensor) -> list[Tensor]: ...


def split(n: int, size: int, rank: int) -> tuple[int, int]:
    """[start, end) of rank's contiguous part of n items (the first n % size parts one longer)."""
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    return kv_heads // tp if kv_heads >= tp else 1


def check_tp(heads: int, kv_heads: int, intermediate: int, tp: int) -> None:
    """ValueError (one line) for a degree the layer cannot be split by."""
    if heads % tp:
        raise ValueError(f"tp = {tp} does not divide the {heads} attention heads")
    if kv_heads >= tp and kv_heads % tp:
        raise ValueError(f"tp = {tp} does not divide the {kv_heads} KV heads")
    if kv_heads < tp and tp % kv_heads:
        raise ValueError(f"tp = {tp} is not a multiple of the {kv_heads} KV heads (each would be replicated)")
    if intermediate % tp:
        raise ValueError(f"tp = {tp} does not divide the MLP's {intermediate} intermediate features")


def _rows(linear: nn.Linear, start: int, end: int) -> nn.Linear:
    """Column-parallel: output features [start, end) of `linear`."""
    out = nn.Linear(linear.in_features, end - start, bias=linear.bias is not None,
                    device=linear.weight.device, dtype=linear.weight.dtype)
    with torch.no_grad():
        out.weight.copy_(linear.weight[start:end])
        if linear.bias is not None:
            out.bias.copy_(linear.bias[start:end])
    return out


class RowParallelLinear(nn.Module):
    """Input features [start, end) of a whole linear; the partial products summed over the group."""

    def __init__(self, linear: nn.Linear, start: int, end: int, group: Group) -> None:
        super().__init__()
        self.group = group
        self.weight = nn.Parameter(linear.weight[:, start:end].detach().clone(), requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        y = self.group.all_reduce(F.linear(x, self.weight))  # [..., out], summed over the group
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Module):
    """Rows [start, end) of the embedding; other ids look up zeros, the all-reduce fills them in."""

    def __init__(self, weight: Tensor, start: int, end: int, scale: float | None, group: Group) -> None:
        super().__init__()
        self.group, self.start, self.end, self.scale = group, start, end, scale
        self.weight = nn.Parameter(weight[start:end].detach().clone(), requires_grad=False)  # [end - start, hidden]

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

    def __init__(self, weight: Tensor, start: int, end: int, group: Group) -> None:
        super().__init__()
        self.group = group
        self.width = -(-weight.shape[0] // group.size)  # the longest part: every rank gathers that many
        self.weight = nn.Parameter(weight[start:end].detach().clone(), requires_grad=False)
        self.vocab = weight.shape[0]

    def forward(self, h: Tensor) -> Tensor:
        local = F.linear(h, self.weight)  # [..., end - start]
        padded = F.pad(local, (0, self.width - local.shape[-1]))  # [..., width]: equal parts to gather
        parts = self.group.all_gather(padded.contiguous())
        sizes = [split(self.vocab, self.group.size, r) for r in range(self.group.size)]
        return torch.cat([p[..., : e - s] for p, (s, e) in zip(parts, sizes, strict=True)], dim=-1)  # [..., vocab]


def shard_llama(model: LlamaModel, group: Group) -> LlamaModel:
    """`model`, in place, as rank group.rank's shard of a group.size-way tensor-parallel copy."""
    c, tp, r = model.config, group.size, group.rank
    if tp == 1:
        return model
    check_tp(c.heads, c.kv_heads, c.intermediate, tp)
    heads, kv = c.heads // tp, kv_heads_per_rank(c.kv_heads, tp)
    kv_index = r * kv if c.kv_heads >= tp else r // (tp // c.kv_heads)  # the first KV head this rank keeps
    hd = c.head_dim
    for block in model.layers:
        att, mlp = block.self_attn, block.mlp
        att.q_proj = _rows(att.q_proj, r * heads * hd, (r + 1) * heads * hd)
        att.k_proj = _rows(att.k_proj, kv_index * hd, (kv_index + kv) * hd)
        att.v_proj = _rows(att.v_proj, kv_index * hd, (kv_index + kv) * hd)
        att.o_proj = RowParallelLinear(att.o_proj, r * heads * hd, (r + 1) * heads * hd, group)
        att.heads, att.kv_heads = heads, kv
        part = c.intermediate // tp
        mlp.gate_proj = _rows(mlp.gate_proj, r * part, (r + 1) * part)
        mlp.up_proj = _rows(mlp.up_proj, r * part, (r + 1) * part)
        mlp.down_proj = RowParallelLinear(mlp.down_proj, r * part, (r + 1) * part, group)
    start, end = split(c.vocab, tp, r)
    head_weight = model.lm_head.weight
    model.embed_tokens = VocabParallelEmbedding(model.embed_tokens.weight, start, end, model.embed_tokens.scale, group)
    model.lm_head = VocabParallelLMHead(head_weight, start, end, group)
    model.config = dataclasses.replace(c, heads=heads, kv_heads=kv, intermediate=c.intermediate // tp)
    model.tp = group  # type: ignore[assignment]
    return model


def shard_component(spec: ComponentSpec, model: LlamaModel) -> LlamaModel:
    """A component's model as this rank's shard when the plan gives it tp > 1 (its process group was
    built at start-up: runtime/worker/tp_group.py); the whole model otherwise."""
    if spec.tp == 1:
        return model
    from wgc.runtime.worker.tp_group import group_for

    group = group_for(spec.name)
    if group is None:
        raise ValueError(f"{spec.name}: tp = {spec.tp} needs its process group, built by a worker process at "
                         "start-up (wgc run); the in-process cluster runs tp = 1 only")
    return shard_llama(model, group)
