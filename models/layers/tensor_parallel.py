"""Tensor parallelism: the entry point every family uses, and the Llama decoder's shard.

A shard is rank `group.rank`'s part of a `group.size`-way copy of a model built from the shared
layers, split the way vLLM and nano-vllm split a Llama layer (Megatron's column/row split): q/k/v,
gate and up column-parallel, o and down row-parallel, KV heads sharded (replicated when tp exceeds
them: each rank keeps the one its query heads share, so the KV cache holds ⌈kv_heads/tp⌉ heads a
rank, as the placement's memory table assumes), the embedding and the LM head vocab-parallel, and
a mixture of experts split by experts. The cut of each layer kind is stated once (tp_cuts.py), the
modules that communicate are tp_modules.py, and applying both to any module tree is tp_shard.py:
BAGEL's MoT, Qwen3-Omni's thinker and talker and π0.5's prefix and action expert shard through it
as the Llama decoder does here.

For a `LlamaModel`, `model.config` becomes the shard's (heads, kv_heads, intermediate per rank;
vocab stays whole), which is what the KV engine's geometry reads; `shard_cuts` gives the cuts of a
config without building a model. From a checkpoint every rank opens the same files and reads only
its own parts (`llama_weights.load_llama(..., group=)`); from random weights (the same seed on every
rank) `shard_llama` cuts the whole model in place.

The group is anything with `rank`, `size`, `all_reduce(t)` (in place, summed) and `all_gather(t)`
(tp_modules.Group): a torch.distributed process group in a worker (runtime/worker/tp_group.py),
threads in the shard-arithmetic tests; `component_group` finds a component's.
"""

from __future__ import annotations

import dataclasses

from wgc.models.layers.config import LlamaConfig
from wgc.models.layers.llama import LlamaModel
from wgc.models.layers.tp_cuts import (
    attention_cuts,
    check_heads,
    check_mlp,
    kv_heads_per_rank,
    local_heads,
    mlp_cuts,
    split,
    vocab_cut,
)
from wgc.models.layers.tp_modules import Group, RowParallelLinear, VocabParallelEmbedding, VocabParallelLMHead
from wgc.models.layers.tp_shard import cut_for, shard_in_place
from wgc.models.layers.tp_shard import shard_structure as generic_structure
from wgc.models.weights_io import Part

from wgc.plan.model import ComponentSpec

__all__ = [
    "Group",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "VocabParallelLMHead",
    "check_tp",
    "component_group",
    "cut_for",
    "kv_heads_per_rank",
    "shard_cuts",
    "shard_label",
    "shard_llama",
    "shard_structure",
    "split",
]


def check_tp(heads: int, kv_heads: int, intermediate: int, tp: int) -> None:
    """ValueError (one line) for a degree a Llama layer cannot be split by."""
    check_heads(heads, kv_heads, tp)
    check_mlp(intermediate, tp)


def shard_cuts(config: LlamaConfig, tp: int, rank: int) -> dict[str, Part]:
    """Our parameter name -> the part of the whole tensor `rank` keeps in a tp-way copy of a LlamaModel;
    a parameter not named (the norms) is kept whole. The same cuts `shard_structure` returns (both are
    tp_cuts.py's): the in-place path and the per-shard checkpoint reader follow them."""
    c = config
    check_tp(c.heads, c.kv_heads, c.intermediate, tp)
    vocab = vocab_cut(c.vocab, tp, rank)
    out = {"embed_tokens.weight": vocab, "lm_head.weight": vocab}
    for i in range(c.layers):
        out.update(attention_cuts(f"layers.{i}.self_attn.", c.heads, c.kv_heads, c.head_dim, tp, rank))
        out.update(mlp_cuts(f"layers.{i}.mlp.", c.intermediate, tp, rank))
    return out


def shard_structure(model: LlamaModel, group: Group) -> dict[str, Part]:
    """Replace `model`'s split modules by empty ones of rank group.rank's shapes (tp_shard.shard_structure),
    set the shard's config; returns the cuts to fill them by."""
    c, tp = model.config, group.size
    check_tp(c.heads, c.kv_heads, c.intermediate, tp)
    cuts = generic_structure(model, group)
    heads, kv_heads = local_heads(c.heads, c.kv_heads, tp)
    model.config = dataclasses.replace(c, heads=heads, kv_heads=kv_heads, intermediate=c.intermediate // tp)
    return cuts


def shard_llama(model: LlamaModel, group: Group) -> LlamaModel:
    """`model`, in place, as rank group.rank's shard of a group.size-way tensor-parallel copy (a whole
    model in memory: the random-weight path; a checkpoint is read per shard by load_llama instead)."""
    if group.size == 1:
        return model
    c = model.config
    shard_in_place(model, group)
    heads, kv_heads = local_heads(c.heads, c.kv_heads, group.size)
    model.config = dataclasses.replace(c, heads=heads, kv_heads=kv_heads, intermediate=c.intermediate // group.size)
    return model


def shard_label(group: Group | None) -> str:
    """What a component's start-up line says of its shard ("" at tp 1)."""
    return "" if group is None else f"tensor-parallel rank {group.rank} of {group.size}; "


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
