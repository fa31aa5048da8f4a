"""Tensor parallelism for the Llama-family layers: one rank's shard of a whole model, and its collectives.

A shard is rank `group.rank`'s part of a `group.size`-way copy of a `LlamaModel`, split the way
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
which is what the KV engine's geometry reads. `shard_cuts` states the split once, as the part of each
whole tensor a rank keeps (`weights_io.Part`: a range of output rows or input columns); both ways of
making a shard follow it. From a checkpoint, every rank opens the same files and reads only its own
parts (`llama_weights.load_llama(..., group=)`: safetensors slices, never a whole tensor); from
random weights (the same seed on every rank), `shard_llama` cuts the whole model in place.

The group is anything with `rank`, `size`, `all_reduce(t)` (in place, summed) and `all_gather(t)`
(a list of every rank's tensor): a torch.distributed process group in a worker
(runtime/worker/tp_group.py), threads in the shard-arithmetic test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import skip_init
from wgc.models.layers.config import LlamaConfig
from wgc.models.layers.llama import LlamaModel
from wgc.models.weights_io import Part

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


def shard_cuts(config: LlamaConfig, tp: int, rank: int) -> dict[str, Part]:
    """Our parameter name -> the part of the whole tensor `rank` keeps in a tp-way copy; a parameter not
    named (the norms) is kept whole. The one statement of the split: the in-place path (`shard_llama`)
    and the per-shard checkpoint reader (llama_weights.load_llama with a group) both follow it."""
    c = config
    check_tp(c.heads, c.kv_heads, c.intermediate, tp)
    heads, kv = c.heads // tp, kv_heads_per_rank(c.kv_heads, tp)
    kv_index = rank * kv if c.kv_heads >= tp else rank // (tp // c.kv_heads)  # the first KV head this rank keeps
    hd, part = c.head_dim, c.intermediate // tp
    q = (rank * heads * hd, (rank + 1) * heads * hd)
    kvs = (kv_index * hd, (kv_index + kv) * hd)
    mlp = (rank * part, (rank + 1) * part)
    vocab = split(c.vocab, tp, rank)
    out = {"embed_tokens.weight": Part(0, *vocab), "lm_head.weight": Part(0, *vocab)}
    for i in range(c.layers):
        p = f"layers.{i}."
        out.update({
            p + "self_attn.q_proj.weight": Part(0, *q),  # column-parallel: output rows
            p + "self_attn.k_proj.weight": Part(0, *kvs),
            p + "self_attn.v_proj.weight": Part(0, *kvs),
            p + "self_attn.o_proj.weight": Part(1, *q),  # row-parallel: input columns
            p + "mlp.gate_proj.weight": Part(0, *mlp),
            p + "mlp.up_proj.weight": Part(0, *mlp),
            p + "mlp.down_proj.weight": Part(1, *mlp),
        })
    return out


def cut_for(cuts: Mapping[str, Part], name: str) -> Part | None:
    """The part of parameter `name` a rank keeps (None: whole). A column-parallel bias follows its weight's
    rows; a row-parallel one is whole (added once, after the all-reduce)."""
    if name in cuts:
        return cuts[name]
    if name.endswith(".bias"):
        weight = cuts.get(name.removesuffix("bias") + "weight")
        return weight if weight is not None and weight.dim == 0 else None
    return None


def _column(linear: nn.Linear, cut: Part) -> nn.Linear:
    """An empty column-parallel linear: output features [cut.start, cut.end) of `linear`."""
    return skip_init(nn.Linear, linear.in_features, cut.end - cut.start, bias=linear.bias is not None,
                     device=linear.weight.device, dtype=linear.weight.dtype)


def shard_structure(model: LlamaModel, group: Group) -> dict[str, Part]:
    """Replace `model`'s split modules by empty ones of rank group.rank's shapes (on the same device,
    the meta device included, uninitialised), set the shard's config; returns the cuts to fill them by."""
    c, tp = model.config, group.size
    cuts = shard_cuts(c, tp, group.rank)
    like = model.embed_tokens.weight
    for i, block in enumerate(model.layers):
        att, mlp, p = block.self_attn, block.mlp, f"layers.{i}."
        att.q_proj = _column(att.q_proj, cuts[p + "self_attn.q_proj.weight"])
        att.k_proj = _column(att.k_proj, cuts[p + "self_attn.k_proj.weight"])
        att.v_proj = _column(att.v_proj, cuts[p + "self_attn.v_proj.weight"])
        att.o_proj = RowParallelLinear(att.o_proj, cuts[p + "self_attn.o_proj.weight"], group)
        mlp.gate_proj = _column(mlp.gate_proj, cuts[p + "mlp.gate_proj.weight"])
        mlp.up_proj = _column(mlp.up_proj, cuts[p + "mlp.up_proj.weight"])
        mlp.down_proj = RowParallelLinear(mlp.down_proj, cuts[p + "mlp.down_proj.weight"], group)
        att.heads, att.kv_heads = c.heads // tp, kv_heads_per_rank(c.kv_heads, tp)
    vocab = cuts["embed_tokens.weight"]
    model.embed_tokens = VocabParallelEmbedding(c.vocab, c.hidden, vocab, model.embed_tokens.scale, group, like)
    model.lm_head = VocabParallelLMHead(c.vocab, c.hidden, vocab, group, like)
    if c.tie_embeddings:  # one tensor, as in the whole model: the head's rows are the embedding's
        model.lm_head.weight = model.embed_tokens.weight
    model.config = dataclasses.replace(c, heads=c.heads // tp, kv_heads=kv_heads_per_rank(c.kv_heads, tp),
                                       intermediate=c.intermediate // tp)
    model.tp = group  # type: ignore[assignment]
    return cuts


def shard_llama(model: LlamaModel, group: Group) -> LlamaModel:
    """`model`, in place, as rank group.rank's shard of a group.size-way tensor-parallel copy (a whole
    model in memory: the random-weight path; a checkpoint is read per shard by load_llama instead)."""
    if group.size == 1:
        return model
    whole = model.state_dict(keep_vars=True)  # every parameter by name, a tied head under both
    cuts = shard_structure(model, group)
    with torch.no_grad():
        for name, param in model.named_parameters():
            source, cut = whole[name], cut_for(cuts, name)
            if source is not param:
                param.copy_(source if cut is None else cut.of(source))
    return model


def component_group(spec: ComponentSpec) -> Group | None:
    """A component's TP group when the plan gives it tp > 1 (its process group was built at start-up:
    runtime/worker/tp_group.py); None at tp 1."""
    if spec.tp == 1:
        return None
    from wgc.runtime.worker.tp_group import group_for

    group = group_for(spec.name)
    if group is None:
        raise ValueError(f"{spec.name}: tp = {spec.tp} needs its process group, built by a worker process at "
                         "start-up (wgc run); the in-process cluster runs tp = 1 only")
    return group
