"""V-JEPA 2's 3D rotary embedding, in the checkpoint's frequency layout.

A head of `head_dim` dims rotates three parts of `2 * ((head_dim // 3) // 2)` dims each, by the
token's frame (depth), row (height) and column (width); what is left over at the end is not
rotated (64 -> 3 x 20 + 4). Inside a part of D dims the D/2 frequencies are 1 / 10000^(i / (D/2)),
and the pair (2j, 2j+1) rotates as (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin), but the cos/sin
tables are *tiled* to D dims (`repeat`), not interleaved: dim k uses frequency k mod D/2, so one
pair mixes two frequencies. That is upstream's quirk (vjepa2 PR #15 would fix it and break the
pretrained weights); transformers' vjepa2 keeps it, and so do we.

Positions are floats: the AC predictor scales rows and columns by `grid_size / H` (1 at the trained
grid); its action and state tokens rotate the depth part only, which is rows and columns at 0 (an
angle of 0 is the identity).
"""

from __future__ import annotations

import torch
from torch import Tensor


def tiled_tables(pos: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """cos and sin [N, dim] for positions [N]: the D/2 angles of each position, tiled twice."""
    omega = torch.arange(dim // 2, dtype=torch.float64, device=pos.device) / (dim / 2.0)
    omega = 1.0 / 10000**omega  # [dim / 2]
    freq = pos.to(torch.float64)[:, None] * omega[None, :]  # [N, dim / 2]
    return freq.cos().repeat(1, 2), freq.sin().repeat(1, 2)  # each [N, dim]


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [N, heads, D] rotated pairwise by the tiled tables cos, sin [N, D]."""
    pairs = x.unflatten(-1, (-1, 2))  # [N, heads, D / 2, 2]
    turned = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # [N, heads, D]
    return x * cos[:, None, :].to(x.dtype) + turned * sin[:, None, :].to(x.dtype)


def head_tables(positions: Tensor, head_dim: int) -> tuple[Tensor, Tensor]:
    """cos and sin [N, head_dim] of rows at (frame, row, col) positions [N, 3]: each part's tiled tables
    side by side, cos 1 and sin 0 over the unrotated tail. Every pair (2j, 2j+1) lies inside one part
    (the parts are even-sized and start at even dims), so one rotation over the whole head applies all
    three parts at once."""
    part = 2 * ((head_dim // 3) // 2)
    tables = [tiled_tables(positions[:, axis], part) for axis in range(3)]  # 3 x ([N, part], [N, part])
    rest = head_dim - 3 * part
    ones = torch.ones(positions.shape[0], rest, dtype=torch.float64, device=positions.device)
    cos = torch.cat([t[0] for t in tables] + [ones], dim=1)  # [N, head_dim]
    sin = torch.cat([t[1] for t in tables] + [ones * 0], dim=1)  # [N, head_dim]
    return cos, sin


class Rope3D:
    """The rotation of one step's rows: its tables built once from their (frame, row, col) positions
    [N, 3] (or given, [N, head_dim] each), applied to the queries and the keys of every layer."""

    def __init__(self, positions: Tensor | None, head_dim: int, tables: tuple[Tensor, Tensor] | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        cos, sin = tables if tables is not None else head_tables(positions, head_dim)  # type: ignore[arg-type]
        self.cos, self.sin = cos[:, None, :].to(dtype), sin[:, None, :].to(dtype)  # each [N, 1, head_dim]

    def __call__(self, x: Tensor) -> Tensor:
        """x [..., N, heads, head_dim] -> the same, its three parts rotated."""
        pairs = x.unflatten(-1, (-1, 2))  # [..., N, heads, head_dim / 2, 2]
        turned = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # [..., N, heads, head_dim]
        return x * self.cos.to(x.dtype) + turned * self.sin.to(x.dtype)


def grid_positions(frames: int, grid_h: int, grid_w: int, first_frame: int = 0, scale: float = 1.0) -> Tensor:
    """(frame, row, col) of each patch of `frames` frames in raster order, [frames * h * w, 3] float;
    rows and columns multiplied by `scale` (the AC predictor's grid_size / H)."""
    f, r, c = torch.meshgrid(torch.arange(first_frame, first_frame + frames), torch.arange(grid_h),
                             torch.arange(grid_w), indexing="ij")
    return torch.stack([f.flatten().double(), r.flatten() * scale, c.flatten() * scale], dim=-1)  # [N, 3]
