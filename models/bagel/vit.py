"""`vit` of models/bagel.walk: BAGEL's SigLIP NaViT encoder, its connector and `vit_pos_embed`.

encode(img) -> [N, llm_hidden]: the image resized with its aspect ratio kept and cut into N patches
(vit_transform.py), then SigLIP (So400m/14: a Linear patch embedding over (p, q, c)-ordered patches
plus a learned position embedding indexed by the extrapolated ids `row * grid + col`; pre-norm
encoder layers with LayerNorm eps 1e-6 and a gelu-tanh MLP; `post_layernorm`), the connector (fc1 ->
gelu-tanh -> fc2 into the LLM's width), plus the fixed 2D sin-cos `vit_pos_embed` at the same ids
(BAGEL's `forward_cache_update_vit`; models-wave2.md §1.3).

Batching: the calls' images are packed into one token sequence, grouped by token count, so every
token-wise op (LayerNorms, projections, MLPs) runs once over all of them and attention runs once
per token count as a dense [images, tokens] batch: attention never crosses images and needs no mask.
Measured on CPU (fp32, 7B widths, 2 layers; 4 images of 256, 512, 512 and 1024 tokens; medians of
9 interleaved runs on 2 shared cores, best runs in brackets): attention per token count 3.0 s
(1.1), one block-diagonal mask over the whole pack 3.8 s (1.5; most of its [2304, 2304] scores are
masked away), one forward per image 3.9 s (1.9). The mask would also grow quadratically with the
pack (20k tokens for four 980 px images: a 400M-entry mask).

Parameter names are the checkpoint's (`ema.safetensors`, models-wave2.md §1.9) with `vit_model.`
dropped: `vision_model.embeddings.patch_embedding` (a Linear [1152, 588], as BAGEL converts the
Conv2d before loading), `vision_model.embeddings.position_embedding`, `vision_model.encoder.layers.{i}.*`,
`vision_model.post_layernorm`, `connector.fc1/fc2`, `vit_pos_embed.pos_embed`. The checkpoint holds
27 encoder layers and BAGEL runs 26 (`app.py` drops the last): the loader (weights.py, given
`weights=` or WGC_BAGEL_DIR) skips layer 26.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from wgc.models.bagel.latents import PositionTable
from wgc.models.bagel.resize import ResizeRule
from wgc.models.bagel.vae import VAE_7B, VAE_TINY
from wgc.models.bagel.vit_transform import Resize, check_image, prepare
from wgc.models.layers.dtypes import compute_dtype
from wgc.models.layers.presets import TinyPreset
from wgc.models.layers.siglip import GeluMLP, Groups, SiglipEncoder
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import Call, CallError, Component

from wgc.plan.model import ComponentSpec


@dataclass(frozen=True)
class VitConfig:
    name: str
    hidden: int
    layers: int  # layers run (the 7B checkpoint holds one more)
    heads: int
    intermediate: int
    patch: int
    grid: int  # patches per side of the position tables (grid * grid rows)
    llm_hidden: int
    resize: Resize
    first: ResizeRule | None = None  # the VAE's rule, which BAGEL applies to every input image first
    eps: float = 1e-6
    channels: int = 3

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"ViT hidden {self.hidden} does not split into {self.heads} heads")
        if self.resize.stride % self.patch:  # UniRL #194: a stride of 7 leaves half patches
            raise ValueError(f"the resize stride {self.resize.stride} is not a multiple of the patch {self.patch}")
        if self.resize.max_size > self.grid * self.patch:
            raise ValueError(f"images up to {self.resize.max_size} px overflow the {self.grid}-patch position table")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @staticmethod
    def preset(name: str) -> VitConfig:
        if name == "tiny":
            return VitConfig("tiny", hidden=32, layers=1, heads=2, intermediate=64, patch=14, grid=4, llm_hidden=64,
                             resize=Resize.preset("tiny"), first=VAE_TINY.resize)
        if name == "7b":
            return VitConfig("7b", hidden=1152, layers=26, heads=16, intermediate=4304, patch=14, grid=70,
                             llm_hidden=3584, resize=Resize.preset("7b"), first=VAE_7B.resize)
        raise ValueError(f"unknown BAGEL ViT preset {name!r} (known: tiny, 7b)")


class Embeddings(nn.Module):
    def __init__(self, c: VitConfig) -> None:
        super().__init__()
        self.patch_embedding = nn.Linear(c.patch * c.patch * c.channels, c.hidden)
        self.position_embedding = nn.Embedding(c.grid * c.grid, c.hidden)

    def forward(self, patches: Tensor, ids: Tensor) -> Tensor:
        return self.patch_embedding(patches) + self.position_embedding(ids)  # [T, hidden]


class VisionModel(nn.Module):
    """SigLIP's vision transformer without the pooling head, on packed patches."""

    def __init__(self, c: VitConfig) -> None:
        super().__init__()
        self.embeddings = Embeddings(c)
        self.encoder = SiglipEncoder(c)
        self.post_layernorm = nn.LayerNorm(c.hidden, eps=c.eps)

    def forward(self, patches: Tensor, ids: Tensor, groups: Groups) -> Tensor:
        """patches [T, p*p*3], ids [T] -> [T, hidden] (SigLIP's last_hidden_state, post-LayerNorm included)."""
        x = self.encoder(self.embeddings(patches, ids), groups)  # [T, hidden]
        return self.post_layernorm(x)  # [T, hidden]


class BagelVit(nn.Module):
    """SigLIP, the connector into the LLM's width and the fixed `vit_pos_embed`."""

    def __init__(self, c: VitConfig) -> None:
        super().__init__()
        self.vision_model = VisionModel(c)
        self.connector = GeluMLP(c.hidden, c.llm_hidden, c.llm_hidden)
        self.vit_pos_embed = PositionTable(c.grid, c.llm_hidden)

    def forward(self, patches: Tensor, ids: Tensor, groups: Groups) -> Tensor:
        """patches [T, p*p*3], ids [T] -> [T, llm_hidden]."""
        x = self.connector(self.vision_model(patches, ids, groups))  # [T, llm_hidden]
        return x + self.vit_pos_embed(ids).to(x.dtype)  # [T, llm_hidden]


def random_vit(c: VitConfig, seed: int = 0, device: torch.device | str = "cpu") -> BagelVit:
    """BagelVit with torch's default initialisation from `seed` (global RNG state untouched), the
    position embedding at SigLIP's scale (std hidden^-0.5) rather than nn.Embedding's N(0, 1)."""
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        model = BagelVit(c)
        nn.init.normal_(model.vision_model.embeddings.position_embedding.weight, std=c.hidden**-0.5)
    return model


def pack(items: list[tuple[Tensor, Tensor, tuple[int, int]]]) -> tuple[Tensor, Tensor, Groups, list[int]]:
    """Prepared images -> (patches [T, p*p*3], ids [T], groups, order): images of the same token count
    side by side (their grids may differ: the ids carry the positions); order[j] is the input index
    of the j-th packed image."""
    sizes = [int(item[0].shape[0]) for item in items]
    order = sorted(range(len(items)), key=lambda i: sizes[i])
    groups: Groups = []
    for i in order:
        if groups and groups[-1][1] == sizes[i]:
            groups[-1] = (groups[-1][0] + 1, sizes[i])
        else:
            groups.append((1, sizes[i]))
    patches = torch.cat([items[i][0] for i in order])  # [T, p*p*3]
    ids = torch.cat([items[i][1] for i in order])  # [T]
    return patches, ids, groups, order




class VitEncoder(TinyPreset, Component):
    """Stateless: encode(img: image) -> tensor [N, llm_hidden], N the image's patches after the resize."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, seed: int = 0) -> None:
        """Weights from `weights` (a BAGEL directory), else random ones for `preset`, else from
        WGC_BAGEL_DIR, else the tiny preset's."""
        from wgc.models.bagel.weights import KNOB, Checkpoint  # weights.py builds this module's classes

        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        self.dtype = compute_dtype(spec, self.torch_device)
        directory, fallback = choose(weights, preset is not None, KNOB)
        if directory is not None:
            checkpoint = Checkpoint(directory)
            self.config = checkpoint.vit_config
            self.model = checkpoint.vit(self.torch_device, self.dtype)
            self.source = str(directory)
        else:
            self.config = VitConfig.preset(preset or "tiny")
            self.model = random_vit(self.config, seed, self.torch_device).to(self.dtype).eval()
            self.source = f"{preset or 'tiny'} preset, random weights (seed {seed})"
        self.stats = {"images": 0, "tokens": 0, "forwards": 0}
        announce("bagel", spec.name, KNOB if fallback else None, "the tiny preset", self.source, self._what())

    def describe(self) -> str:
        return f"{self.source}; {self._what()}"

    def _what(self) -> str:
        c = self.config
        return f"SigLIP {c.layers} layers x {c.hidden}, {c.grid}x{c.grid} patches of {c.patch} px, into {c.llm_hidden} on {self.device}"

    def encode(self, calls: list[Call]) -> list[Tensor]:
        items = []
        for call in calls:
            try:
                items.append(prepare(check_image(call.args[0]), self.config.resize, self.config.patch, self.config.grid,
                                     self.config.first))
            except ValueError as err:
                raise CallError(call.request, f"{self.spec.name}.encode: {err}") from None
        return self.encode_prepared(items)

    def encode_prepared(self, items: list[tuple[Tensor, Tensor, tuple[int, int]]]) -> list[Tensor]:
        """Prepared images (vit_transform.prepare) -> one [N_i, llm_hidden] tensor each, in order."""
        patches, ids, groups, order = pack(items)
        with torch.no_grad():  # not inference_mode: the LLM may write into these tensors outside it
            out = self.model(patches.to(self.torch_device, self.dtype), ids.to(self.torch_device), groups)  # [T, L]
        pieces = out.split([items[i][0].shape[0] for i in order])
        results: list[Any] = [None] * len(items)
        for piece, i in zip(pieces, order, strict=True):
            results[i] = piece
        self.stats["images"] += len(items)
        self.stats["tokens"] += int(ids.shape[0])
        self.stats["forwards"] += 1
        return results

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """Encode one image at the largest size (the grid x grid patches), the costliest shape."""
        side = self.config.resize.max_size
        self.encode([Call(0, "", (torch.zeros(side, side, 3, dtype=torch.uint8),))])
        self.stats = dict.fromkeys(self.stats, 0)  # counters count requests' images only
        progress(f"encoded a {side}x{side} image")

    def counters(self) -> dict[str, int]:
        return dict(self.stats)
