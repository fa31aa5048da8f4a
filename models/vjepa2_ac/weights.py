"""Real V-JEPA 2-AC weights from one local directory (WGC_VJEPA2_DIR, or `weights=`):

    config.json, model.safetensors   facebook/vjepa2-vitg-fpc64-256 as Hugging Face publishes it:
                                     `encoder.*` (the ViT) and `predictor.*` (the masked predictor)
                                     in transformers' names (a sharded index works too)
    ac_predictor.safetensors         the AC predictor, upstream's names (`predictor_embed.*`,
    ac_predictor.json                `predictor_blocks.{i}.attn.qkv.*`, ...) and its sizes: written by
                                     `wgc convert vjepa2-ac vjepa2-ac-vitg.pt DIR` from the torch.save file
    ac_encoder.safetensors           optional, written by the same command: the AC checkpoint's own
                                     encoder in transformers' names; when present the encoder loads it
                                     instead of model.safetensors' (the one the predictor was trained on)

Each part is built on the meta device, checked name by name, shape by shape against the headers
(models/weights_io.py), then allocated and read once; every problem is one line naming the file
and the tensor.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from wgc.models.vjepa2_ac.ac_net import ACPredictorNet
from wgc.models.vjepa2_ac.config import ACConfig, VitConfig
from wgc.models.vjepa2_ac.vit import VitEncoder, VitPredictor
from wgc.models.weights_io import (
    Found,
    WeightsError,
    allocate,
    check_tensors,
    load_tensors,
    meta_module,
    read_checkpoint,
    read_headers,
    read_json,
    shapes,
)

KNOB = "WGC_VJEPA2_DIR"
CONFIG, AC_WEIGHTS, AC_CONFIG, AC_ENCODER = "config.json", "ac_predictor.safetensors", "ac_predictor.json", "ac_encoder.safetensors"
LAYOUT = (f"a V-JEPA 2-AC directory holds {CONFIG} and model.safetensors (facebook/vjepa2-vitg-fpc64-256), "
          f"{AC_WEIGHTS} and {AC_CONFIG} (from `wgc convert vjepa2-ac`)")
AC_KEYS = ("embed", "hidden", "layers", "heads", "grid", "max_frames")


class Checkpoint:
    """A local V-JEPA 2-AC directory; each component takes its part."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise WeightsError(f"{self.directory}: not a directory ({KNOB} names a local directory; {LAYOUT})")

    def path(self, name: str) -> Path:
        path = self.directory / name
        if not path.is_file():
            raise WeightsError(f"{self.directory}: no {name} ({LAYOUT})")
        return path

    def vit_config(self) -> VitConfig:
        raw = read_json(self.directory / CONFIG, f"{self.directory}: no {CONFIG} ({LAYOUT})")
        try:
            return VitConfig.from_hf(raw, self.directory.name)
        except (TypeError, ValueError) as err:
            raise WeightsError(f"{self.directory / CONFIG}: {err}") from None

    def ac_config(self) -> ACConfig:
        path = self.directory / AC_CONFIG
        raw = read_json(path, f"{self.directory}: no {AC_CONFIG} ({LAYOUT})")
        bad = [k for k in AC_KEYS if not isinstance(raw.get(k), int) or isinstance(raw.get(k), bool) or raw[k] <= 0]
        if bad:
            raise WeightsError(f"{path}: `{bad[0]}` must be a positive integer (keys: {', '.join(AC_KEYS)})")
        if raw["hidden"] % raw["heads"]:
            raise WeightsError(f"{path}: hidden {raw['hidden']} is not a multiple of heads {raw['heads']}")
        return ACConfig(self.directory.name, **{k: int(raw[k]) for k in AC_KEYS})

    def encoder(self, device: torch.device, dtype: torch.dtype) -> VitEncoder:
        own = self.directory / AC_ENCODER
        found = read_headers([own]) if own.is_file() else read_checkpoint(self.directory)
        config = self.vit_config()
        return _load(lambda: VitEncoder(config), found, "encoder.", own if own.is_file() else self.directory,
                     device, dtype, others=("predictor.",))  # type: ignore[return-value]

    def predictor(self, device: torch.device, dtype: torch.dtype) -> VitPredictor:
        config = self.vit_config()
        return _load(lambda: VitPredictor(config), read_checkpoint(self.directory), "predictor.", self.directory,
                     device, dtype, others=("encoder.",))  # type: ignore[return-value]

    def ac_predictor(self, device: torch.device, dtype: torch.dtype) -> ACPredictorNet:
        config = self.ac_config()
        path = self.path(AC_WEIGHTS)
        return _load(lambda: ACPredictorNet(config), read_headers([path]), "", path, device, dtype)  # type: ignore[return-value]


def _load(build, found: Found, prefix: str, where: Path, device: torch.device, dtype: torch.dtype,
          others: tuple[str, ...] = ()) -> nn.Module:
    """Build on meta, check the names under `prefix` (names under `others` belong to another part),
    allocate, read each tensor once."""
    module = meta_module(build)
    expected = shapes(module, lambda n: prefix + n)
    check_tensors(found, expected, where, ignore=lambda n: n.startswith(others) if others else False)
    module = allocate(module, device, dtype)
    params = dict(module.named_parameters())
    load_tensors({prefix + n: p.data for n, p in params.items()}, found)
    return module.eval()
