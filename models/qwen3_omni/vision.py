"""`vision_enc` of models/qwen3_omni.walk: Qwen3-Omni's vision tower with its deepstack features.

encode_image(img) / encode_video(clip) -> a dict, the format thinker.prefill_embeds(x) reads
(thinker_media.py; the walk's declared tensor[N, 2048] is its "embeds"):

    embeds      [N, out_hidden]     the merger's output: the thinker's input rows at the N visual
                                    positions (N = t * h * w / merge^2, merge-block order)
    deepstack   [K, N, out_hidden]  merger_list[k] over the hidden state after block deepstack[k]
                                    (blocks 8, 16, 24 in the checkpoint): the thinker adds deepstack[k]
                                    to its hidden state after its decoder layer k, at those N rows
    kind        "image" | "video"
    grid_thw    [3] int64           (t, h, w) in patches, before the merge: transformers' grid_thw row
    second_per_grid  float          seconds between temporal patches (video: 2 / fps; image: 1.0)

`vision_transform.llm_positions(grid_thw, merge, second_per_grid, position_id_per_seconds)` are the
M-RoPE offsets transformers' `get_rope_index` gives the N rows.

The tower as transformers implements it (`Qwen3OmniMoeVisionEncoder`; models-wave2 §2.1): the Conv3d
patch embedding (a linear map of each 2 x 16 x 16 patch), plus the learned 48 x 48 position table
bilinearly interpolated (align_corners) to the item's h x w grid; `depth` pre-LayerNorm blocks with a
fused qkv, 2D rotary (head_dim/4 frequencies for the row, as many for the column, theta 10000) and a
gelu-tanh MLP, attending within each frame (transformers' `cu_seqlens`: full attention over a
frame's h x w patches; Qwen3-Omni has no window attention); then the merger (LayerNorm, each 2 x 2
block's four patches concatenated, Linear, GELU, Linear into the thinker's width). A deepstack
merger normalises after concatenating (`use_postshuffle_norm`).

Batching: every call's patches are packed into one sequence, so the token-wise work runs once and
attention runs per frame size as a dense batch (segments.py).

Parameter names are the checkpoint's with `thinker.visual.` dropped: patch_embed.proj, pos_embed,
blocks.{i}.norm1/norm2, blocks.{i}.attn.qkv/proj, blocks.{i}.mlp.linear_fc1/linear_fc2,
merger.ln_q, merger.mlp.{0,2}, merger_list.{k}.ln_q, merger_list.{k}.mlp.{0,2}. A Qwen3-Omni
directory (`weights=` or WGC_QWEN3_OMNI_DIR) gives them and the configs (weights.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models.layers.dtypes import compute_dtype
from wgc.models.layers.presets import TinyPreset
from wgc.models.layers.rope import apply_rotary
from wgc.models.qwen3_omni.segments import Segments
from wgc.models.qwen3_omni.vision_config import VisionConfig
from wgc.models.qwen3_omni.vision_transform import Prepared, prepare_image, prepare_video
from wgc.models.qwen3_omni.weights import KNOB, Checkpoint
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import Call, CallError, Component

from wgc.plan.model import ComponentSpec


class PatchEmbed(nn.Module):
    def __init__(self, c: VisionConfig) -> None:
        super().__init__()
        kernel = (c.temporal_patch, c.patch, c.patch)
        self.proj = nn.Conv3d(c.channels, c.hidden, kernel_size=kernel, stride=kernel)

    def forward(self, patches: Tensor) -> Tensor:
        """[T, C * t * p * p] -> [T, hidden]: the Conv3d over one patch each is this linear map."""
        return F.linear(patches, self.proj.weight.flatten(1), self.proj.bias)


class VisionAttention(nn.Module):
    def __init__(self, c: VisionConfig) -> None:
        super().__init__()
        self.heads, self.head_dim = c.heads, c.head_dim
        self.qkv = nn.Linear(c.hidden, 3 * c.hidden)
        self.proj = nn.Linear(c.hidden, c.hidden)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, segments: Segments) -> Tensor:
        q, k, v = self.qkv(x).view(-1, 3, self.heads, self.head_dim).unbind(1)  # each [T, H, d]
        q = apply_rotary(q.float(), cos, sin).to(x.dtype)  # rotated in float32, as transformers does
        k = apply_rotary(k.float(), cos, sin).to(x.dtype)
        return self.proj(segments.attend(q, k, v).flatten(1))  # [T, hidden]


class VisionMLP(nn.Module):
    def __init__(self, c: VisionConfig) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(c.hidden, c.intermediate)
        self.linear_fc2 = nn.Linear(c.intermediate, c.hidden)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_fc2(F.gelu(self.linear_fc1(x), approximate="tanh"))  # [T, hidden]


class VisionBlock(nn.Module):
    def __init__(self, c: VisionConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(c.hidden, eps=c.eps)
        self.norm2 = nn.LayerNorm(c.hidden, eps=c.eps)
        self.attn = VisionAttention(c)
        self.mlp = VisionMLP(c)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, segments: Segments) -> Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, segments)  # [T, hidden]
        return x + self.mlp(self.norm2(x))  # [T, hidden]


class PatchMerger(nn.Module):
    """merge x merge patches -> one thinker token; `postshuffle`: the norm after concatenating them."""

    def __init__(self, c: VisionConfig, postshuffle: bool) -> None:
        super().__init__()
        self.width = c.hidden * c.merge * c.merge
        self.postshuffle = postshuffle
        self.ln_q = nn.LayerNorm(self.width if postshuffle else c.hidden, eps=1e-6)
        self.mlp = nn.ModuleList([nn.Linear(self.width, self.width), nn.GELU(), nn.Linear(self.width, c.out_hidden)])

    def forward(self, x: Tensor) -> Tensor:
        """[T, hidden] (merge-block order) -> [T / merge^2, out_hidden]."""
        x = self.ln_q(x.view(-1, self.width)) if self.postshuffle else self.ln_q(x).view(-1, self.width)
        for layer in self.mlp:
            x = layer(x)
        return x


class VisionTower(nn.Module):
    def __init__(self, c: VisionConfig) -> None:
        super().__init__()
        self.config = c
        self.patch_embed = PatchEmbed(c)
        self.pos_embed = nn.Embedding(c.position_embeddings, c.hidden)
        self.blocks = nn.ModuleList(VisionBlock(c) for _ in range(c.depth))
        self.merger = PatchMerger(c, postshuffle=False)
        self.merger_list = nn.ModuleList(PatchMerger(c, postshuffle=True) for _ in c.deepstack)

    def block_order(self, table: Tensor, h: int, w: int) -> Tensor:
        """[h, w, ...] in raster order -> [h * w, ...] in merge-block order."""
        m = self.config.merge
        return table.reshape(h // m, m, w // m, m, *table.shape[2:]).transpose(1, 2).reshape(h * w, *table.shape[2:])

    def positions(self, grid: tuple[int, int, int], dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """An item's learned position embeddings [t*h*w, hidden] and rotary cos, sin [t*h*w, head_dim]."""
        t, h, w = grid
        side = self.config.grid_side
        table = self.pos_embed.weight.view(side, side, -1).permute(2, 0, 1)[None]  # [1, hidden, side, side]
        pos = F.interpolate(table.float(), size=(h, w), mode="bilinear", align_corners=True)[0]  # [hidden, h, w]
        pos = self.block_order(pos.permute(1, 2, 0), h, w).to(dtype).repeat(t, 1)  # [t*h*w, hidden]
        rows = torch.arange(h, device=table.device)[:, None].expand(h, w)
        cols = torch.arange(w, device=table.device)[None, :].expand(h, w)
        ids = self.block_order(torch.stack([rows, cols], dim=-1), h, w)  # [h*w, 2]
        c = self.config  # the frequencies in float32 whatever the weights' dtype
        inv_freq = 1.0 / c.rope_theta ** (torch.arange(0, c.head_dim // 2, 2, device=ids.device) / (c.head_dim // 2))
        freqs = (ids[..., None].float() * inv_freq).flatten(1)  # [h*w, head_dim / 2]: rows', then columns'
        angles = torch.cat([freqs, freqs], dim=-1).repeat(t, 1)  # [t*h*w, head_dim]
        return pos, angles.cos(), angles.sin()

    def forward(self, patches: Tensor, grids: list[tuple[int, int, int]]) -> tuple[Tensor, list[Tensor]]:
        """Packed patches [T, patch_features] of items with these grids -> (embeds [T / merge^2,
        out_hidden], one deepstack feature of that shape per deepstack block)."""
        x = self.patch_embed(patches)  # [T, hidden]
        pos, cos, sin = (torch.cat(parts) for parts in zip(*(self.positions(g, x.dtype) for g in grids)))
        x = x + pos
        segments = Segments([h * w for t, h, w in grids for _ in range(t)], x.device)
        deepstack = []
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, segments)
            if i in self.config.deepstack:
                deepstack.append(self.merger_list[self.config.deepstack.index(i)](x))
        return self.merger(x), deepstack


def random_tower(c: VisionConfig, seed: int = 0, device: torch.device | str = "cpu") -> VisionTower:
    """VisionTower with torch's default initialisation from `seed` (global RNG state untouched)."""
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        return VisionTower(c)




class VisionEncoder(TinyPreset, Component):
    """Stateless: encode_image(img: image) and encode_video(clip: video) -> the dict of the module
    docstring, its embeds [N, out_hidden]."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: VisionConfig | None = None, seed: int = 0) -> None:
        """Weights from `weights` (a Qwen3-Omni directory: `thinker.visual.*`, vision_config and the
        image processor's bounds, weights.py), else random ones for `config` or `preset`, else from
        WGC_QWEN3_OMNI_DIR, else the tiny preset's."""
        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        self.dtype = compute_dtype(spec, self.torch_device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        if directory is not None:
            checkpoint = Checkpoint(directory)
            self.config = c = checkpoint.vision_config
            self.model = checkpoint.load("vision", lambda: VisionTower(c), self.torch_device, self.dtype)
            self.source = f"{directory} (thinker.visual.*)"
        else:
            self.config = config or VisionConfig.preset(preset or "tiny")
            self.model = random_tower(self.config, seed, self.torch_device).to(self.dtype).eval()
            self.source = f"{self.config.name} preset, random weights (seed {seed})"
        self.stats = {"images": 0, "videos": 0, "tokens": 0, "forwards": 0}
        announce("qwen3_omni", spec.name, KNOB if fallback else None, "the tiny preset", self.source, self._what())

    def describe(self) -> str:
        return f"{self.source}; {self._what()}"

    def _what(self) -> str:
        c = self.config
        return (f"ViT {c.depth} blocks x {c.hidden}, {c.patch} px patches merged {c.merge}x{c.merge}, deepstack "
                f"{list(c.deepstack)}, into {c.out_hidden} on {self.device}")

    def encode_image(self, calls: list[Call]) -> list[dict[str, Any]]:
        return self._encode(calls, "encode_image", prepare_image, "image")

    def encode_video(self, calls: list[Call]) -> list[dict[str, Any]]:
        return self._encode(calls, "encode_video", prepare_video, "video")

    def _encode(self, calls: list[Call], entry: str, prepare: Callable[[Any, VisionConfig], Prepared],
                kind: str) -> list[dict[str, Any]]:
        items = []
        for call in calls:
            try:
                items.append(prepare(call.args[0], self.config))
            except ValueError as err:
                raise CallError(call.request, f"{self.spec.name}.{entry}: {err}") from None
        self.stats[kind + "s"] += len(items)
        return self.encode_prepared(items, kind)

    def encode_prepared(self, items: list[Prepared], kind: str = "image") -> list[dict[str, Any]]:
        """Prepared items (vision_transform.py) -> the module docstring's dict each, in order."""
        patches = torch.cat([item.patches for item in items]).to(self.torch_device, self.dtype)  # [T, F]
        with torch.no_grad():  # not inference_mode: the thinker may write into these tensors outside it
            embeds, deepstack = self.model(patches, [item.grid for item in items])
        sizes = [item.patches.shape[0] // self.config.merge**2 for item in items]
        stacked = torch.stack(deepstack) if deepstack else embeds.new_zeros(0, *embeds.shape)  # [K, N_all, out]
        out = [{"embeds": e, "deepstack": d, "kind": kind, "grid_thw": torch.tensor(item.grid),
                "second_per_grid": item.second_per_grid}
               for e, d, item in zip(embeds.split(sizes), stacked.split(sizes, dim=1), items)]
        self.stats["tokens"] += sum(sizes)
        self.stats["forwards"] += 1
        return out

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """Encode one square image (448 px, or the largest the rule allows if smaller): first-call costs
        (allocator, kernels) are paid here; the tower has no convolution whose kernels depend on shape."""
        side = min(448, self.config.image.size(448, 448)[0])
        self.encode_image([Call(0, "", (torch.zeros(side, side, 3, dtype=torch.uint8),))])
        self.stats = dict.fromkeys(self.stats, 0)  # counters count requests' items only
        progress(f"encoded a {side}x{side} image")

    def counters(self) -> dict[str, int]:
        return dict(self.stats)
