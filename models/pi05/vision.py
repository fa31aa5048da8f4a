"""`vit` of models/pi05.walk: PaliGemma's SigLIP tower and its projector (models-wave2.md §4.1).

encode(images [C, R, R, 3] uint8) -> [C, R²/p², prefix width]: each camera image scaled from
[0, 255] to [-1, 1], a Conv2d patch embedding (patch p, stride p) plus a learned position embedding,
the shared SigLIP encoder layers (models/layers/siglip.py), `post_layernorm`, then
`multi_modal_projector.linear` into the prefix's width. No 1/sqrt(width) scaling: PaliGemma's image
features enter the prefix unscaled (transformers divides here and multiplies in the embedding; the
product is one). R is the checkpoint's resolution (224; the tiny preset's 56); any other size is
refused, naming the shape: resizing (with padding) is the client's, as lerobot's processor does it.
A missing camera is simply not sent: its tokens would be masked out of the prefix anyway.

All calls' images go through one forward (every image has the same token count, so attention is
one dense [images, tokens] batch). Names are the checkpoint's below `paligemma.model.`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from wgc.models.layers import siglip
from wgc.models.layers.dtypes import compute_dtype
from wgc.models.layers.presets import TinyPreset
from wgc.models.pi05.config import Pi05Config, SiglipConfig
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import Call, CallError, Component

from wgc.plan.model import ComponentSpec

KNOB = "WGC_PI05_DIR"


class Embeddings(nn.Module):
    def __init__(self, c: SiglipConfig) -> None:
        super().__init__()
        self.patch_embedding = nn.Conv2d(3, c.hidden, kernel_size=c.patch, stride=c.patch)
        self.position_embedding = nn.Embedding(c.tokens, c.hidden)

    def forward(self, pixels: Tensor) -> Tensor:
        """pixels [B, 3, R, R] in [-1, 1] -> [B, tokens, hidden] (row-major patches)."""
        x = self.patch_embedding(pixels).flatten(2).transpose(1, 2)  # [B, tokens, hidden]
        return x + self.position_embedding.weight[None]  # [B, tokens, hidden]


class VisionModel(nn.Module):
    def __init__(self, c: SiglipConfig) -> None:
        super().__init__()
        self.embeddings = Embeddings(c)
        self.encoder = siglip.SiglipEncoder(c)
        self.post_layernorm = nn.LayerNorm(c.hidden, eps=c.eps)

    def forward(self, pixels: Tensor) -> Tensor:
        b = pixels.shape[0]
        x = self.embeddings(pixels)  # [B, tokens, hidden]
        t = x.shape[1]
        x = self.encoder(x.reshape(b * t, -1), [(b, t)])  # [B * tokens, hidden]
        return self.post_layernorm(x).view(b, t, -1)  # [B, tokens, hidden]


class Tower(nn.Module):
    """`vision_tower.vision_model` (SigLIP, no pooling head) and `multi_modal_projector.linear`."""

    def __init__(self, c: SiglipConfig) -> None:
        super().__init__()
        self.vision_tower = nn.Module()
        self.vision_tower.vision_model = VisionModel(c)
        self.multi_modal_projector = nn.Module()
        self.multi_modal_projector.linear = nn.Linear(c.hidden, c.projection)

    def forward(self, pixels: Tensor) -> Tensor:
        """pixels [B, 3, R, R] in [-1, 1] -> [B, tokens, projection]."""
        return self.multi_modal_projector.linear(self.vision_tower.vision_model(pixels))


def random_tower(c: SiglipConfig, seed: int = 0) -> Tower:
    """torch's default initialisation from `seed` (global RNG untouched), positions at SigLIP's scale."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        tower = Tower(c)
        nn.init.normal_(tower.vision_tower.vision_model.embeddings.position_embedding.weight, std=c.hidden**-0.5)
    return tower


def to_pixels(images: Tensor, size: int) -> Tensor:
    """uint8 [C, R, R, 3] -> float [C, 3, R, R] in [-1, 1]; a ValueError naming what is wrong."""
    if not isinstance(images, Tensor):
        raise ValueError(f"images must be a uint8 tensor [cameras, {size}, {size}, 3], found {type(images).__name__}")
    shape = list(images.shape)
    if images.dim() != 4 or shape[1:] != [size, size, 3] or shape[0] < 1:
        raise ValueError(f"images must be [cameras, {size}, {size}, 3] (this checkpoint's resolution), found {shape}")
    if images.dtype != torch.uint8:
        raise ValueError(f"images must be uint8 (0..255), found {images.dtype}")
    return images.permute(0, 3, 1, 2).float() / 255.0 * 2.0 - 1.0  # [C, 3, R, R]: lerobot's x * 2 - 1 over [0, 1]


class SiglipEncoder(TinyPreset, Component):
    """Stateless: encode(images [C, R, R, 3] uint8) -> [C, tokens, prefix width]."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: Pi05Config | None = None, seed: int = 0) -> None:
        """Weights from `weights` (a pi05_base-layout directory), else random ones for `config` or
        `preset`, else from WGC_PI05_DIR, else the tiny preset's."""
        from wgc.models.pi05.weights import Checkpoint  # weights.py builds this module's classes

        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        self.dtype = compute_dtype(spec, self.torch_device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        if directory is not None:
            checkpoint = Checkpoint(directory)
            self.config = checkpoint.config.vision
            self.model = checkpoint.tower(self.torch_device, self.dtype)
            self.source = str(directory)
        else:
            self.config = (config or Pi05Config.preset(preset or "tiny")).vision
            self.model = random_tower(self.config, seed).to(self.torch_device, self.dtype).eval()
            self.source = f"{preset or (config.name if config else 'tiny')} preset, random weights (seed {seed})"
        self.stats = {"images": 0, "forwards": 0}
        announce("pi05", spec.name, KNOB if fallback else None, "the tiny preset", self.source, self._what())

    def describe(self) -> str:
        return f"{self.source}; {self._what()}"

    def _what(self) -> str:
        c = self.config
        return (f"SigLIP {c.layers} layers x {c.hidden} at {c.image_size} px ({c.tokens} tokens a camera), "
                f"into {c.projection} on {self.device}")

    def encode(self, calls: list[Call]) -> list[Tensor]:
        pixels = []
        for call in calls:
            try:
                pixels.append(to_pixels(call.args[0], self.config.image_size))
            except ValueError as err:
                raise CallError(call.request, f"{self.spec.name}.encode: {err}") from None
        return self.encode_pixels(pixels)

    def encode_pixels(self, pixels: list[Tensor]) -> list[Tensor]:
        """Each call's [C, 3, R, R] in [-1, 1] -> its [C, tokens, projection], in one forward."""
        with torch.no_grad():
            out = self.model(torch.cat(pixels).to(self.torch_device, self.dtype))  # [sum C, tokens, projection]
        self.stats["images"] += int(out.shape[0])
        self.stats["forwards"] += 1
        return list(out.split([p.shape[0] for p in pixels]))

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """Encode a full set of cameras once (a CPU convolution builds its kernels per shape)."""
        size = self.config.image_size
        self.encode([Call(0, "", (torch.zeros(3, size, size, 3, dtype=torch.uint8),))])
        self.stats = dict.fromkeys(self.stats, 0)
        progress(f"encoded 3 cameras at {size} px")

    def counters(self) -> dict[str, Any]:
        return dict(self.stats)
