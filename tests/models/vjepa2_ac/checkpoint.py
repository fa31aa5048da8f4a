"""Miniature V-JEPA 2-AC checkpoints in the real layouts, generated: transformers' VJEPA2Model saved
with save_pretrained (config.json, model.safetensors: `encoder.*`, `predictor.*`), and an upstream
AC torch.save file (`encoder` in upstream's ViT names with a fused qkv, `predictor`, both under
`module.backbone.`, plus training state: epoch, an optimizer's param groups)."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import Tensor
from wgc.models.vjepa2_ac.ac_net import ACPredictorNet
from wgc.models.vjepa2_ac.config import ACConfig

from tests.models.vjepa2_ac.helpers import lively
from tests.models.vjepa2_ac.hf import hf_model


def write_hf(directory: Path) -> None:
    hf_model().save_pretrained(directory)


def upstream_encoder(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """transformers' `encoder.*` names back to upstream's ViT names (query, key, value fused into qkv)."""
    out: dict[str, Tensor] = {}
    for name, value in hf_state.items():
        if not name.startswith("encoder."):
            continue
        name = name.removeprefix("encoder.")
        if name.startswith("embeddings.patch_embeddings.proj."):
            out["patch_embed.proj." + name.rsplit(".", 1)[1]] = value
        elif name.startswith("layernorm."):
            out["norm." + name.rsplit(".", 1)[1]] = value
        elif m := re.fullmatch(r"layer\.(\d+)\.attention\.(query|key|value)\.(weight|bias)", name):
            if m[2] == "query":
                parts = [hf_state[f"encoder.layer.{m[1]}.attention.{p}.{m[3]}"] for p in ("query", "key", "value")]
                out[f"blocks.{m[1]}.attn.qkv.{m[3]}"] = torch.cat(parts)
        else:
            out[re.sub(r"^layer\.", "blocks.", re.sub(r"^layer\.(\d+)\.attention\.proj", r"blocks.\1.attn.proj", name))] = value
    return out


def ac_net(seed: int = 3) -> ACPredictorNet:
    net = ACPredictorNet(ACConfig.preset("tiny"))
    lively(net, seed)
    return net.eval()


def write_upstream_pt(path: Path, net: ACPredictorNet) -> None:
    prefix = "module.backbone."
    encoder = {prefix + k: v for k, v in upstream_encoder(hf_model().state_dict()).items()}
    encoder[prefix + "pos_embed"] = torch.zeros(1, 32, 96)  # kept by the real file, unused with RoPE
    predictor = {prefix + k: v.detach().clone() for k, v in net.state_dict().items()}
    torch.save({"encoder": encoder, "predictor": predictor, "epoch": 3, "loss": 0.25,
                "opt": {"state": {}, "param_groups": [{"lr": 1e-4, "params": [0, 1]}]}}, path)


def write_directory(directory: Path, net: ACPredictorNet) -> None:
    """A complete WGC_VJEPA2_DIR: the HF directory and the converted AC files."""
    from wgc.models.vjepa2_ac.convert import convert

    write_hf(directory)
    pt = directory.parent / f"{directory.name}-ac.pt"
    write_upstream_pt(pt, net)
    convert(pt, directory, heads=2, grid=4)
