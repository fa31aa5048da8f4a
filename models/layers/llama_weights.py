"""Local Hugging Face Llama directories, for every Llama-architecture family (Orpheus's language
model, models/llama.walk): config.json plus safetensors (one file, or shards with
`model.safetensors.index.json`), read and written with Hugging Face's parameter names.

Every name and shape is checked from the files' headers before any tensor is read, so a bad
directory fails fast with one line naming the problem: a missing tensor, an unexpected one, a
wrong shape or dtype, a corrupt or absent file. Tensors are then read one at a time into the model's
own parameters (the model is built on the meta device first, so a 3B checkpoint is never held
twice); a tensor-parallel rank reads only its shard's slices of them. The generic pieces are models/weights_io.py's, shared with the other families.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn
from wgc.models.layers import LlamaConfig, LlamaModel
from wgc.models.layers.tensor_parallel import Group, cut_for, shard_structure
from wgc.models.weights_io import (
    INDEX,
    SINGLE,
    Found,
    WeightsError,
    allocate,
    check_tensors,
    load_tensors,
    meta_module,
    read_checkpoint,
    read_json,
)

# Buffers some exporters write; no parameter of ours corresponds to them.
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a LlamaForCausalLM checkpoint holds, by Hugging Face name (no lm_head when tied)."""
    c = config
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab, c.hidden)}
    for i in range(c.layers):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": (c.hidden,),
            p + "self_attn.q_proj.weight": (c.heads * c.head_dim, c.hidden),
            p + "self_attn.k_proj.weight": (c.kv_heads * c.head_dim, c.hidden),
            p + "self_attn.v_proj.weight": (c.kv_heads * c.head_dim, c.hidden),
            p + "self_attn.o_proj.weight": (c.hidden, c.heads * c.head_dim),
            p + "post_attention_layernorm.weight": (c.hidden,),
            p + "mlp.gate_proj.weight": (c.intermediate, c.hidden),
            p + "mlp.up_proj.weight": (c.intermediate, c.hidden),
            p + "mlp.down_proj.weight": (c.hidden, c.intermediate),
        })
    out["model.norm.weight"] = (c.hidden,)
    if not c.tie_embeddings:
        out["lm_head.weight"] = (c.vocab, c.hidden)
    return out


def read_config(directory: Path) -> dict[str, Any]:
    return read_json(Path(directory) / "config.json", f"{directory}: no config.json (a Hugging Face model directory "
                     "holds config.json and model.safetensors or shards with model.safetensors.index.json)")


def check_llama_tensors(found: Found, expected: dict[str, tuple[int, ...]], where: Path, tied: bool) -> None:
    """weights_io.check_tensors, with exporters' buffers ignored and a tied model's spare head allowed
    (then it must have the embedding's shape)."""
    check_tensors(found, expected, where, lambda n: n.endswith(IGNORED_SUFFIXES) or (tied and n == "lm_head.weight"))
    head, embed = found.get("lm_head.weight"), expected["model.embed_tokens.weight"]
    if tied and head is not None and head.shape != embed:
        raise WeightsError(f"{head.path}: tensor lm_head.weight has shape {list(head.shape)}, expected {list(embed)}")


def load_llama(directory: Path, config: LlamaConfig, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32, group: Group | None = None) -> LlamaModel:
    """A LlamaModel with the directory's weights, on `device` in `dtype`; WeightsError names any problem.

    With a tensor-parallel `group` of more than one rank, rank group.rank's shard: the headers are
    checked against the whole model, then each split tensor is read as this rank's part only (the
    cuts of tensor_parallel.shard_cuts, as safetensors slices), so no rank reads or holds the whole."""
    directory = Path(directory)
    found = read_checkpoint(directory)
    expected = expected_shapes(config)
    check_llama_tensors(found, expected, directory, config.tie_embeddings)
    model = meta_module(lambda: LlamaModel(config))
    cuts = shard_structure(model, group) if group is not None and group.size > 1 else {}
    model = allocate(model, device, dtype)  # the rotary table kept as built
    if config.tie_embeddings:  # to_empty makes a new tensor per module from meta ones: tie them again
        model.lm_head.weight = model.embed_tokens.weight
    params = dict(model.named_parameters())  # our names: the HF name without `model.`
    ours = {name: name.removeprefix("model.") for name in expected}
    parts = {hf: cut for hf, name in ours.items() if (cut := cut_for(cuts, name)) is not None}
    load_tensors({hf: params[name] for hf, name in ours.items()}, found, parts)
    return model.eval()


def hf_state_dict(model: nn.Module, config: LlamaConfig) -> dict[str, torch.Tensor]:
    """The model's weights under Hugging Face's names (the tied head left out, as transformers saves it)."""
    out = {}
    for name, param in model.named_parameters():
        hf = name if name.startswith("lm_head.") else f"model.{name}"
        if config.tie_embeddings and hf == "lm_head.weight":
            continue
        out[hf] = param.detach().to("cpu").contiguous()
    return out


def save_llama(model: LlamaModel, hf_config: dict[str, Any], directory: Path, shards: int = 1) -> Path:
    """Write config.json and the weights (one file, or `shards` files plus an index) to `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n", encoding="utf-8")
    state = hf_state_dict(model, model.config)
    if shards <= 1:
        save_file(state, str(directory / SINGLE), metadata={"format": "pt"})
        return directory
    names = list(state)
    per = -(-len(names) // shards)
    weight_map = {}
    for i in range(shards):
        part = names[i * per:(i + 1) * per]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: state[n] for n in part}, str(directory / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / INDEX).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return directory
