"""BAGEL's latent adapter: VAE latents as LLM tokens and back (models-wave2.md §1.4).

A FLUX latent z [C=16, H/8, W/8] is cut into 2x2 patches, each flattened in (p, q, c) order, the
patches in row-major (h, w) order: tokens [N = (H/16)(W/16), 64] (BAGEL's "chpwq->hwpqc").

A latent token enters the LLM as `vae2llm(z) + time_embedder(t) + latent_pos_embed(ids)`; the LLM's
hidden state at a latent leaves as the velocity `llm2vae(h)`. Position ids are `row * grid + col`
on a fixed grid (64 for the 7B checkpoint, so 1024 px at most), whatever the image's own width:
an image narrower than the grid uses the table's top-left corner ("extrapolate").

The 2D sin-cos table is MAE/DiT's: the first half of the channels encode the column (w), the second
half the row (h), each as [sin, cos] of pos * 10000^(-i / (dim/4)). The same kind of table, in LLM
width, is `vit_pos_embed` (the ViT's side) — hence `PositionTable` here, shared by both.

Parameter names are the checkpoint's (`vae2llm.*`, `llm2vae.*`, `time_embedder.mlp.{0,2}.*`,
`latent_pos_embed.pos_embed`, `vit_pos_embed.pos_embed`), so a filtered state dict loads as is.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

LATENT_CHANNELS = 16  # FLUX VAE z_channels
LATENT_PATCH = 2  # latent pixels per token side
TOKEN_DIM = LATENT_CHANNELS * LATENT_PATCH * LATENT_PATCH  # 64
DOWNSAMPLE = 8 * LATENT_PATCH  # image pixels per token side (VAE 8x, then the 2x2 patch)


def patchify(z: Tensor, patch: int = LATENT_PATCH) -> Tensor:
    """z [C, h*p, w*p] -> tokens [h*w, p*p*C], each token (p, q, c) ordered, tokens row-major."""
    c, height, width = z.shape
    if height % patch or width % patch:
        raise ValueError(f"a latent of {height}x{width} is not a whole number of {patch}x{patch} patches")
    h, w = height // patch, width // patch
    x = z.reshape(c, h, patch, w, patch)  # [c, h, p, w, q]
    return x.permute(1, 3, 2, 4, 0).reshape(h * w, patch * patch * c)  # [h*w, p*q*c]


def unpatchify(tokens: Tensor, h: int, w: int, channels: int = LATENT_CHANNELS, patch: int = LATENT_PATCH) -> Tensor:
    """tokens [h*w, p*p*C] -> z [C, h*p, w*p] (the inverse of `patchify`)."""
    if tokens.shape != (h * w, patch * patch * channels):
        raise ValueError(f"expected tokens [{h * w}, {patch * patch * channels}] for a {h}x{w} grid, "
                         f"found {list(tokens.shape)}")
    x = tokens.reshape(h, w, patch, patch, channels)  # [h, w, p, q, c]
    return x.permute(4, 0, 2, 1, 3).reshape(channels, h * patch, w * patch)  # [c, h*p, w*p]


def latent_ids(h_tokens: int, w_tokens: int, grid: int) -> Tensor:
    """Position ids of an h x w token grid in a grid x grid table: row * grid + col, [h*w] int64."""
    if not (0 < h_tokens <= grid and 0 < w_tokens <= grid):
        raise ValueError(f"a {h_tokens}x{w_tokens} latent grid does not fit the {grid}x{grid} position table")
    rows = torch.arange(h_tokens)[:, None] * grid  # [h, 1]
    return (rows + torch.arange(w_tokens)[None, :]).reshape(-1)  # [h*w]


def latent_grid(height: int, width: int, grid: int) -> tuple[int, int]:
    """The token grid (h, w) of a height x width px image; ValueError when the table cannot place it."""
    if height <= 0 or width <= 0 or height % DOWNSAMPLE or width % DOWNSAMPLE:
        raise ValueError(f"an image of {height}x{width} px: both sides must be positive multiples of {DOWNSAMPLE}")
    h, w = height // DOWNSAMPLE, width // DOWNSAMPLE
    if h > grid or w > grid:
        raise ValueError(f"an image of {height}x{width} px is larger than this model's "
                         f"{grid * DOWNSAMPLE}x{grid * DOWNSAMPLE} px")
    return h, w


def initial_noise(n: int, seed: int, token_dim: int = TOKEN_DIM) -> Tensor:
    """The flow's starting latents, N(0, 1) [n, token_dim] float32, drawn on the CPU from `seed` alone,
    so that they are the same on every device and placement (vllm-omni PR #4081: noise drawn on the
    device changed every output)."""
    return torch.randn(n, token_dim, generator=torch.Generator().manual_seed(seed))  # [n, token_dim]


def sincos_1d(dim: int, positions: Tensor) -> Tensor:
    """positions [M] -> [M, dim]: [sin(p * w_i), cos(p * w_i)], w_i = 10000^(-i / (dim/2)), float64."""
    if dim % 2:
        raise ValueError(f"a sin-cos embedding needs an even width, found {dim}")
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2))  # [dim/2]
    angles = positions.to(torch.float64)[:, None] * omega[None, :]  # [M, dim/2]
    return torch.cat([angles.sin(), angles.cos()], dim=1)  # [M, dim]


def sincos_2d(dim: int, grid: int) -> Tensor:
    """The grid x grid table [grid*grid, dim] (float32), row-major; columns (w) first, then rows (h)."""
    if dim % 4:
        raise ValueError(f"a 2D sin-cos table needs a width divisible by 4, found {dim}")
    rows = torch.arange(grid).repeat_interleave(grid)  # [grid*grid]: h of each entry
    cols = torch.arange(grid).repeat(grid)  # [grid*grid]: w of each entry
    return torch.cat([sincos_1d(dim // 2, cols), sincos_1d(dim // 2, rows)], dim=1).float()  # [grid*grid, dim]


class PositionTable(nn.Module):
    """A frozen 2D sin-cos table (`pos_embed` [grid*grid, dim]) indexed by `row * grid + col`."""

    def __init__(self, grid: int, dim: int) -> None:
        super().__init__()
        self.grid = grid
        # a Parameter (not a buffer) because the checkpoint stores it; frozen as BAGEL's is
        self.pos_embed = nn.Parameter(sincos_2d(dim, grid), requires_grad=False)  # [grid*grid, dim]

    def forward(self, ids: Tensor) -> Tensor:
        return self.pos_embed[ids]  # [..., dim]


def timestep_features(t: Tensor, features: int = 256, max_period: float = 10000.0) -> Tensor:
    """t [N] (t itself, in [0, 1]: not scaled by 1000) -> [N, features]: cos half, then sin half."""
    half = features // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)  # [half]
    angles = t.float()[:, None] * freqs[None, :]  # [N, half]
    out = torch.cat([angles.cos(), angles.sin()], dim=-1)  # [N, 2*half]
    if features % 2:
        out = torch.cat([out, out.new_zeros(out.shape[0], 1)], dim=-1)  # [N, features]
    return out


class TimestepEmbedder(nn.Module):
    """DiT's timestep embedding: sinusoidal features of t -> Linear -> SiLU -> Linear (`mlp.0`, `mlp.2`)."""

    def __init__(self, hidden: int, features: int = 256) -> None:
        super().__init__()
        self.features = features
        self.mlp = nn.Sequential(nn.Linear(features, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t: Tensor) -> Tensor:
        """t [N] -> [N, hidden]."""
        w = self.mlp[0].weight
        return self.mlp(timestep_features(t.to(w.device), self.features).to(w.dtype))  # [N, hidden]


class LatentAdapter(nn.Module):
    """Latent tokens into the LLM's width (`embed`) and its hidden states back to velocities (`velocity`)."""

    def __init__(self, hidden: int, grid: int, token_dim: int = TOKEN_DIM, features: int = 256) -> None:
        super().__init__()
        self.grid = grid
        self.vae2llm = nn.Linear(token_dim, hidden)
        self.llm2vae = nn.Linear(hidden, token_dim)
        self.time_embedder = TimestepEmbedder(hidden, features)
        self.latent_pos_embed = PositionTable(grid, hidden)

    def embed(self, tokens: Tensor, t: float | Tensor, ids: Tensor) -> Tensor:
        """tokens [N, 64], t (a scalar, or [N]), ids [N] -> [N, hidden]."""
        w = self.vae2llm.weight
        steps = torch.as_tensor(t, dtype=torch.float32).reshape(-1).expand(tokens.shape[0])  # [N]
        x = self.vae2llm(tokens.to(w.device, w.dtype))  # [N, hidden]
        return x + self.time_embedder(steps) + self.latent_pos_embed(ids.to(w.device)).to(w.dtype)  # [N, hidden]

    def velocity(self, hidden: Tensor) -> Tensor:
        """hidden [N, H] -> [N, 64]."""
        return self.llm2vae(hidden.to(self.llm2vae.weight.dtype))  # [N, 64]
