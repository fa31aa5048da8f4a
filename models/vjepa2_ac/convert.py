"""The one conversion wgc's V-JEPA 2-AC loader needs: upstream's AC checkpoint is a `torch.save` file
(`vjepa2-ac-vitg.pt`: `encoder` and `predictor` state dicts, plus training state), and wgc reads
no pickle at serving time. `wgc convert vjepa2-ac IN.pt OUT_DIR` runs this once, offline:

- the file is opened with `torch.load(weights_only=True)`, which builds tensors and plain
  containers only and refuses any other object;
- `predictor` and `encoder` must each be a dict (nested dicts allowed, flattened with dots) whose
  every value is a tensor: anything else is refused with one line naming the key; the other
  top-level entries (epoch, optimizer, ...) are training state and are left out, listed;
- `module.` and `backbone.` prefixes are stripped, a `pos_embed` (which the RoPE models never read;
  upstream loads the encoder with strict=False for it) is left out and listed; the predictor is
  written in upstream's names to ac_predictor.safetensors with its sizes in ac_predictor.json,
  the encoder in transformers' names (the fused qkv split into query, key, value) to
  ac_encoder.safetensors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import Tensor
from wgc.models.vjepa2_ac.config import MAX_FRAMES
from wgc.models.vjepa2_ac.weights import AC_CONFIG, AC_ENCODER, AC_WEIGHTS


class ConvertError(ValueError):
    """The input cannot be converted; the message is one line."""


def load_tensors_only(path: Path) -> Any:
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConvertError(f"{path}: no such file") from None
    except Exception as err:  # noqa: BLE001 — torch.load's refusals come as UnpicklingError, RuntimeError, EOFError...: each is one line here
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ConvertError(f"{path}: not a tensors-only checkpoint (torch.load(weights_only=True) refused it: "
                           f"{first})") from None


def flatten(part: Any, where: str) -> dict[str, Tensor]:
    """A nested dict of tensors as {dotted name: tensor}; ConvertError naming the first non-tensor."""
    if not isinstance(part, Mapping):
        raise ConvertError(f"{where} is a {type(part).__name__}, expected a dict of tensors")
    out: dict[str, Tensor] = {}
    for key, value in part.items():
        name = f"{where}.{key}"
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in flatten(value, name).items()})
        elif isinstance(value, Tensor):
            out[str(key)] = value
        else:
            raise ConvertError(f"{name} is a {type(value).__name__}, not a tensor: only tensors are converted")
    return out


def strip(names: dict[str, Tensor]) -> dict[str, Tensor]:
    out = {}
    for name, value in names.items():
        for prefix in ("module.", "backbone."):
            name = name.removeprefix(prefix)
        out[name] = value
    return out


ENCODER_NAMES = [
    (re.compile(r"patch_embed\.proj\.(weight|bias)"), "encoder.embeddings.patch_embeddings.proj.{0}"),
    (re.compile(r"blocks\.(\d+)\.(norm1|norm2|mlp\.fc1|mlp\.fc2)\.(weight|bias)"), "encoder.layer.{0}.{1}.{2}"),
    (re.compile(r"blocks\.(\d+)\.attn\.proj\.(weight|bias)"), "encoder.layer.{0}.attention.proj.{1}"),
    (re.compile(r"norm\.(weight|bias)"), "encoder.layernorm.{0}"),
]
UNUSED = ("pos_embed",)  # a sincos table some checkpoints keep; the RoPE models never read it (upstream loads strict=False)
QKV = re.compile(r"blocks\.(\d+)\.attn\.qkv\.(weight|bias)")


def encoder_to_hf(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Upstream's ViT names -> transformers' (`encoder.*`); an unknown name is refused."""
    out: dict[str, Tensor] = {}
    for name, value in state.items():
        qkv = QKV.fullmatch(name)
        if qkv:
            for part, piece in zip(("query", "key", "value"), value.chunk(3, dim=0)):
                out[f"encoder.layer.{qkv[1]}.attention.{part}.{qkv[2]}"] = piece
            continue
        for pattern, target in ENCODER_NAMES:
            m = pattern.fullmatch(name)
            if m:
                out[target.format(*m.groups())] = value
                break
        else:
            raise ConvertError(f"encoder.{name}: not a V-JEPA 2 ViT tensor name this converter knows")
    return out


def predictor_sizes(state: dict[str, Tensor], heads: int | None, grid: int, max_frames: int) -> dict[str, int]:
    embed = state.get("predictor_embed.weight")
    if embed is None or embed.dim() != 2:
        raise ConvertError("predictor.predictor_embed.weight is missing: not a V-JEPA 2-AC predictor")
    hidden, width = (int(n) for n in embed.shape)
    layers = len({int(m[1]) for n in state if (m := re.match(r"predictor_blocks\.(\d+)\.", n))})
    heads = heads or max(1, hidden // 64)
    if hidden % heads:
        raise ConvertError(f"the predictor's width {hidden} is not a multiple of {heads} heads")
    return {"embed": width, "hidden": hidden, "layers": layers, "heads": heads, "grid": grid, "max_frames": max_frames}


def convert(source: Path, out_dir: Path, heads: int | None = None, grid: int = 16,
            max_frames: int = MAX_FRAMES) -> list[str]:
    """Convert; the lines to report (what was written, what was left out)."""
    raw = load_tensors_only(source)
    if not isinstance(raw, Mapping):
        raise ConvertError(f"{source}: holds a {type(raw).__name__}, expected a dict with `predictor` and `encoder`")
    if "predictor" not in raw:
        raise ConvertError(f"{source}: no `predictor` entry (found: {', '.join(map(str, list(raw)[:8]))})")
    predictor = strip(flatten(raw["predictor"], "predictor"))
    encoder_state = strip(flatten(raw["encoder"], "encoder")) if "encoder" in raw else None
    unused = [f"{part}.{name}" for part, state in (("encoder", encoder_state), ("predictor", predictor))
              for name in UNUSED if state is not None and state.pop(name, None) is not None]
    encoder = encoder_to_hf(encoder_state) if encoder_state is not None else None
    sizes = predictor_sizes(predictor, heads, grid, max_frames)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().clone() for k, v in predictor.items()}, str(out_dir / AC_WEIGHTS))
    (out_dir / AC_CONFIG).write_text(json.dumps(sizes, indent=2) + "\n")
    lines = [f"wrote {out_dir / AC_WEIGHTS} ({len(predictor)} tensors) and {out_dir / AC_CONFIG} {sizes}"]
    if encoder is not None:
        save_file({k: v.contiguous().clone() for k, v in encoder.items()}, str(out_dir / AC_ENCODER))
        lines.append(f"wrote {out_dir / AC_ENCODER} ({len(encoder)} tensors, transformers' names)")
    if unused:
        lines.append(f"left out (unused with RoPE): {', '.join(unused)}")
    skipped = [str(k) for k in raw if k not in ("predictor", "encoder")]
    if skipped:
        lines.append(f"left out (training state): {', '.join(skipped)}")
    return lines
