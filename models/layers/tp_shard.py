"""Rank `group.rank`'s shard of any module tree built from the shared layers, by the cuts of tp_cuts.py.

`shard_structure` walks a whole module (on the meta device, or in memory) and replaces, in place,
what each shared layer kind splits: every SelfAttention's q/k/v by column-parallel linears and o by
a row-parallel one (for each expert's projections a subclass names in `expert_suffixes`: BAGEL's
MoT cuts its generation expert exactly as its understanding expert), every SwiGLU's gate/up and
down likewise, every SparseMoE by an ExpertParallelMoE of this rank's experts, every Embedding
and LMHead by its vocab-parallel form (a tied head stays one tensor with its embedding). Whatever
else the tree holds (norms, routers, projections, family-specific linears) stays whole. It returns
the cuts, our parameter name -> `Part`, that fill the new parameters: `shard_in_place` copies them
from the whole model's tensors (random weights, the same seed on every rank), `shard_reads` turns
them into a checkpoint's per-shard reads (weights_io.load_tensors: safetensors slices, never a
split tensor whole, other ranks' experts never read).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn
from torch.nn.utils import skip_init
from wgc.models.layers.attention import SelfAttention
from wgc.models.layers.embedding import Embedding, LMHead
from wgc.models.layers.mlp import SwiGLU
from wgc.models.layers.moe import SparseMoE
from wgc.models.layers.tp_cuts import attention_cuts, expert_range, local_heads, mlp_cuts, vocab_cut
from wgc.models.layers.tp_modules import (
    ExpertParallelMoE,
    Group,
    RowParallelLinear,
    VocabParallelEmbedding,
    VocabParallelLMHead,
)
from wgc.models.weights_io import Part


def cut_for(cuts: Mapping[str, Part], name: str) -> Part | None:
    """The part of parameter `name` a rank keeps (None: whole). A column-parallel bias follows its weight's
    rows; a row-parallel one is whole (added once, after the all-reduce)."""
    if name in cuts:
        return cuts[name]
    if name.endswith(".bias"):
        weight = cuts.get(name.removesuffix("bias") + "weight")
        return weight if weight is not None and weight.dim == 0 else None
    return None


def column(linear: nn.Linear, cut: Part) -> nn.Linear:
    """An empty column-parallel linear: output features [cut.start, cut.end) of `linear`."""
    return skip_init(nn.Linear, linear.in_features, cut.end - cut.start, bias=linear.bias is not None,
                     device=linear.weight.device, dtype=linear.weight.dtype)


def _dot(name: str) -> str:
    return f"{name}." if name else ""


def shard_attention(att: SelfAttention, name: str, group: Group) -> dict[str, Part]:
    cuts = attention_cuts(_dot(name), att.heads, att.kv_heads, att.head_dim, group.size, group.rank,
                          att.expert_suffixes)
    p = _dot(name)
    for s in att.expert_suffixes:
        for proj in ("q_proj", "k_proj", "v_proj"):
            setattr(att, proj + s, column(getattr(att, proj + s), cuts[f"{p}{proj}{s}.weight"]))
        setattr(att, "o_proj" + s, RowParallelLinear(getattr(att, "o_proj" + s), cuts[f"{p}o_proj{s}.weight"], group))
    att.heads, att.kv_heads = local_heads(att.heads, att.kv_heads, group.size)
    return cuts


def shard_mlp(mlp: SwiGLU, name: str, group: Group) -> dict[str, Part]:
    p = _dot(name)
    cuts = mlp_cuts(p, mlp.gate_proj.out_features, group.size, group.rank)
    mlp.gate_proj = column(mlp.gate_proj, cuts[p + "gate_proj.weight"])
    mlp.up_proj = column(mlp.up_proj, cuts[p + "up_proj.weight"])
    mlp.down_proj = RowParallelLinear(mlp.down_proj, cuts[p + "down_proj.weight"], group)  # type: ignore[assignment]
    return cuts


def _replace(root: nn.Module, name: str, module: nn.Module) -> None:
    if not name:
        raise ValueError(f"a {type(root).__name__} is replaced by its shard: shard the module that holds it")
    owner, _, leaf = name.rpartition(".")
    setattr(root.get_submodule(owner) if owner else root, leaf, module)


def _vocab(root: nn.Module, name: str, module: nn.Module, group: Group, tied: dict[int, nn.Module]) -> dict[str, Part]:
    """Embedding or LMHead `module` at `name` -> its vocab-parallel form (an LMHead whose weight is an
    embedding's, tied, takes the new embedding's weight)."""
    like: Tensor = module.weight  # type: ignore[assignment]
    vocab, hidden = like.shape
    cut = vocab_cut(vocab, group.size, group.rank)
    if isinstance(module, Embedding):
        new: nn.Module = VocabParallelEmbedding(vocab, hidden, cut, module.scale, group, like)
        tied[id(like)] = new
    else:
        new = VocabParallelLMHead(vocab, hidden, cut, group, like)
        if id(like) in tied:  # one tensor, as in the whole model: the head's rows are the embedding's
            new.weight = tied[id(like)].weight
    _replace(root, name, new)
    return {_dot(name) + "weight": cut}


def shard_structure(root: nn.Module, group: Group, keep: Callable[[str], bool] = lambda name: False) -> dict[str, Part]:
    """Replace `root`'s split modules (see the module docstring) by empty ones of rank group.rank's
    shapes (on the same device, the meta device included, uninitialised); `keep(name)` leaves a
    submodule and everything under it whole (a replicated part). Returns the cuts to fill them by."""
    cuts: dict[str, Part] = {}
    kept: list[str] = []
    tied: dict[int, nn.Module] = {}
    modules = list(root.named_modules())
    embeddings = [m for m in modules if isinstance(m[1], Embedding)]  # before any head that may tie to one
    for name, module in embeddings + [m for m in modules if not isinstance(m[1], Embedding)]:
        if any(name == k or name.startswith(k + ".") for k in kept):
            continue
        if name and keep(name):
            kept.append(name)
        elif isinstance(module, SelfAttention):
            cuts.update(shard_attention(module, name, group))
        elif isinstance(module, SparseMoE):
            owned = expert_range(module.num_experts, group.size, group.rank)
            _replace(root, name, ExpertParallelMoE(module, owned, group))
            kept.append(_dot(name) + "experts")  # each expert whole; its shared expert is a SwiGLU, cut below
        elif isinstance(module, SwiGLU):
            cuts.update(shard_mlp(module, name, group))
        elif isinstance(module, (Embedding, LMHead)):
            cuts.update(_vocab(root, name, module, group, tied))
    root.tp = group  # type: ignore[assignment]
    return cuts


def shard_in_place(root: nn.Module, group: Group, keep: Callable[[str], bool] = lambda name: False) -> nn.Module:
    """`root`, in place, as rank group.rank's shard (a whole model in memory: the random-weight path; a
    checkpoint is read per shard through `shard_reads` instead)."""
    if group.size == 1:
        return root
    whole = root.state_dict(keep_vars=True)  # every parameter by name, a tied head under both
    cuts = shard_structure(root, group, keep)
    with torch.no_grad():
        for name, param in root.named_parameters():
            source, cut = whole[name], cut_for(cuts, name)
            if source is not param:
                param.copy_(source if cut is None else cut.of(source))
    return root


def shard_reads(module: nn.Module, cuts: Mapping[str, Part],
                name: Callable[[str], str]) -> tuple[dict[str, Tensor], dict[str, Part]]:
    """weights_io.load_tensors' arguments for a shard: each parameter under its checkpoint name
    (`name` of ours), and the part of each split one to read."""
    params = dict(module.named_parameters())
    parts = {name(n): cut for n in params if (cut := cut_for(cuts, n)) is not None}
    return {name(n): p for n, p in params.items()}, parts
