"""Local Hugging Face Llama directories: config.json plus safetensors (one file, or shards with
`model.safetensors.index.json`), read and written with Hugging Face's parameter names.

Every name and shape is checked from the files' headers before any tensor is read, so a bad
directory fails fast with one line naming the problem: a missing tensor, an unexpected one, a
wrong shape, a corrupt or absent file. Tensors are then read one at a time into the model's own
parameters (the model is built on the meta device first, so a 3B checkpoint is never held twice).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn
from wgc.models.layers import LlamaConfig, LlamaModel

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# Buffers some exporters write; no parameter of ours corresponds to them.
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


class WeightsError(ValueError):
    """A checkpoint directory that cannot be loaded; the message is one line naming what is wrong."""


def one_line(err: BaseException, limit: int = 200) -> str:
    """A library's error message as one line (its first), cut to `limit` characters."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise WeightsError(f"{directory}: no config.json (a Hugging Face model directory holds config.json "
                           "and model.safetensors or shards with model.safetensors.index.json)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WeightsError(f"{path}: not readable JSON ({one_line(err)})") from None
    if not isinstance(raw, dict):
        raise WeightsError(f"{path}: expected a JSON object")
    return raw


def safetensors_files(directory: Path) -> list[Path]:
    """The files holding the weights: the shards an index names, else model.safetensors."""
    directory = Path(directory)
    index = directory / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            files = sorted(set(weight_map.values()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise WeightsError(f"{index}: not a safetensors index (needs a weight_map object): {one_line(err)}") from None
        missing = [f for f in files if not (directory / f).is_file()]
        if missing:
            raise WeightsError(f"{index}: shard {missing[0]} is missing from {directory}")
        return [directory / f for f in files]
    single = directory / SINGLE
    if single.is_file():
        return [single]
    raise WeightsError(f"{directory}: no {SINGLE} and no {INDEX}")


def read_headers(files: Iterable[Path]) -> dict[str, tuple[Path, tuple[int, ...]]]:
    """name → (file, shape) from the files' headers; a corrupt file or a name in two files is an error."""
    out: dict[str, tuple[Path, tuple[int, ...]]] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    if name in out:
                        raise WeightsError(f"tensor {name} is in both {out[name][0].name} and {path.name}")
                    out[name] = (path, tuple(f.get_slice(name).get_shape()))
        except SafetensorError as err:
            raise WeightsError(f"{path}: corrupt safetensors file ({one_line(err)})") from None
        except OSError as err:
            raise WeightsError(f"{path}: cannot be read ({one_line(err)})") from None
    return out


def check_tensors(found: dict[str, tuple[Path, tuple[int, ...]]], expected: dict[str, tuple[int, ...]],
                  where: Path, tied: bool) -> None:
    """One line for the first kind of problem: missing tensors, then unexpected ones, then wrong shapes."""
    missing = [n for n in expected if n not in found]
    if missing:
        raise WeightsError(f"{where}: missing tensor{_list(missing)}")
    allowed_extra = {"lm_head.weight"} if tied else set()
    unexpected = [n for n in found if n not in expected and n not in allowed_extra
                  and not n.endswith(IGNORED_SUFFIXES)]
    if unexpected:
        raise WeightsError(f"{where}: unexpected tensor{_list(unexpected)}")
    for name, shape in expected.items():
        path, have = found[name]
        if have != shape:
            raise WeightsError(f"{path}: tensor {name} has shape {list(have)}, expected {list(shape)}")
    if tied and "lm_head.weight" in found and found["lm_head.weight"][1] != expected["model.embed_tokens.weight"]:
        path, have = found["lm_head.weight"]
        raise WeightsError(f"{path}: tensor lm_head.weight has shape {list(have)}, "
                           f"expected {list(expected['model.embed_tokens.weight'])}")


def _list(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    more = f" (and {len(names) - 3} more)" if len(names) > 3 else ""
    return f"{'s' if len(names) > 1 else ''} {shown}{more}"


def load_llama(directory: Path, config: LlamaConfig, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32) -> LlamaModel:
    """A LlamaModel with the directory's weights, on `device` in `dtype`; WeightsError names any problem."""
    directory = Path(directory)
    files = safetensors_files(directory)
    found = read_headers(files)
    check_tensors(found, expected_shapes(config), directory, config.tie_embeddings)
    with torch.device("meta"):
        model = LlamaModel(config).to(dtype)
    model = model.to_empty(device=device)
    if config.tie_embeddings:  # to_empty makes a new tensor per module from meta ones: tie them again
        model.lm_head.weight = model.embed_tokens.weight
    params = dict(model.named_parameters())  # our names: the HF name without `model.`
    by_file: dict[Path, list[str]] = {}
    for name in expected_shapes(config):
        by_file.setdefault(found[name][0], []).append(name)
    with torch.no_grad():
        for path, names in by_file.items():
            try:
                with safe_open(str(path), framework="pt") as f:
                    for name in names:
                        params[_our_name(name)].copy_(f.get_tensor(name).to(dtype))
            except SafetensorError as err:
                raise WeightsError(f"{path}: corrupt safetensors file ({one_line(err)})") from None
    _reset_buffers(model)
    return model.eval()


def _our_name(hf_name: str) -> str:
    return hf_name.removeprefix("model.")


def _reset_buffers(model: LlamaModel) -> None:
    """Buffers are not in the checkpoint: recompute the rotary table that to_empty left uninitialised."""
    from wgc.models.layers import inverse_frequencies

    c = model.config
    inv = inverse_frequencies(c.head_dim, c.rope_theta, c.rope_scaling)
    model.rotary.inv_freq = inv.to(model.rotary.inv_freq.device)


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
