"""`encoder` and `predictor` of models/vjepa2_ac.walk: the V-JEPA 2 ViT (vit.py) and its masked predictor,
as stateless components.

Encoder entries:
    encode(clip) -> [N, D]        the clip encoded jointly (two frames a tubelet): V-JEPA 2's video
                                  features, what the masked predictor takes
    frames(clip) -> [T * HW, D]   each frame encoded alone (repeated to fill one tubelet) and
                                  layer-normed (no affine): what the AC predictor was trained on
    frame(img) -> [HW, D]         the same for one image (a goal)
MaskedPredictor entry:
    predict(z [N, D]) -> [N, D]   every position predicted from every encoder token (transformers'
                                  default masks)

Weights: a directory (`weights=`, else WGC_VJEPA2_DIR: weights.py), else the tiny preset's random ones.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from wgc.models.layers.dtypes import compute_dtype
from wgc.models.layers.init import init_random
from wgc.models.layers.presets import TinyPreset
from wgc.models.vjepa2_ac.blocks import normalize_reps
from wgc.models.vjepa2_ac.config import VitConfig
from wgc.models.vjepa2_ac.video import clip_error, prepare
from wgc.models.vjepa2_ac.vit import VitEncoder, VitPredictor
from wgc.models.vjepa2_ac.weights import KNOB, Checkpoint
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import Call, CallError, Component

from wgc.plan.model import ComponentSpec


class _Vit(TinyPreset, Component):
    """What the two share: the weights' source and the compute dtype."""

    part = ""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: VitConfig | None = None, seed: int = 0) -> None:
        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        self.dtype = compute_dtype(spec, self.torch_device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        self.net = self._build(None if directory is None else Checkpoint(directory),
                               config or VitConfig.preset(preset or "tiny"), seed)
        self.config: VitConfig = self.net.config
        self.calls = 0
        self.source = f"{self.config.name} preset, random weights" if directory is None else str(directory)
        announce("vjepa2_ac", spec.name, KNOB if fallback else None, "the tiny preset", self.source, f"on {device}")

    def _build(self, checkpoint: Checkpoint | None, config: VitConfig, seed: int) -> Any:
        raise NotImplementedError

    def _random(self, net: torch.nn.Module, seed: int) -> Any:
        init_random(net, seed)
        return net.to(self.torch_device, self.dtype).eval()

    def describe(self) -> str:
        return self.source


class Encoder(_Vit):
    def _build(self, checkpoint: Checkpoint | None, config: VitConfig, seed: int) -> VitEncoder:
        if checkpoint is not None:
            return checkpoint.encoder(self.torch_device, self.dtype)
        return self._random(VitEncoder(config), seed)

    def _pixels(self, call: Call, name: str) -> Tensor:
        x = call.args[0] if call.args else None
        error = clip_error(x)
        if error:
            raise CallError(call.request, f"{self.spec.name}: `{name}`: {error}")
        return prepare(x, self.config.crop).to(self.torch_device, self.dtype)  # [T, 3, crop, crop]

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """Encode a grey frame alone and a grey two-frame clip (the kernels are built per shape)."""
        grey = torch.full((2, self.config.crop, self.config.crop, 3), 128, dtype=torch.uint8)
        self.frames([Call(0, "", (grey[:1],))])
        self.encode([Call(0, "", (grey,))])
        self.calls = 0
        progress("encoded a frame and a two-frame clip")

    def encode(self, calls: list[Call]) -> list[Any]:
        out = []
        for call in calls:
            with torch.no_grad():
                out.append(self.net(self._pixels(call, "clip")[None])[0].float())  # [N, D]
        self.calls += len(calls)
        return out

    def frames(self, calls: list[Call]) -> list[Any]:
        return self._each_frame(calls, "clip")

    def frame(self, calls: list[Call]) -> list[Any]:
        return self._each_frame(calls, "img")

    def _each_frame(self, calls: list[Call], name: str) -> list[Any]:
        """Every frame of every call in one batch, each alone: [T_i * HW, D] per call."""
        clips = [self._pixels(call, name) for call in calls]
        with torch.no_grad():
            tokens = normalize_reps(self.net(torch.cat(clips)[:, None]).float())  # [sum T, HW, D]
        self.calls += len(calls)
        return [t.flatten(0, 1) for t in tokens.split([c.shape[0] for c in clips])]


class MaskedPredictor(_Vit):
    def _build(self, checkpoint: Checkpoint | None, config: VitConfig, seed: int) -> VitPredictor:
        if checkpoint is not None:
            return checkpoint.predictor(self.torch_device, self.dtype)
        return self._random(VitPredictor(config), seed + 1)

    def predict(self, calls: list[Call]) -> list[Any]:
        out = []
        for call in calls:
            z = call.args[0] if call.args else None
            if not isinstance(z, Tensor) or z.dim() != 2 or z.shape[1] != self.config.hidden or not z.shape[0]:
                shape = list(z.shape) if isinstance(z, Tensor) else type(z).__name__
                raise CallError(call.request, f"{self.spec.name}: `z` must be a tensor [N, {self.config.hidden}], "
                                f"found {shape}")
            with torch.no_grad():
                out.append(self.net(z.to(self.torch_device, self.dtype)[None])[0].float())  # [N, D]
        self.calls += len(calls)
        return out
