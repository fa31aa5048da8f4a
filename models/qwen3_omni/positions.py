"""M-RoPE positions of the thinker's parts, as transformers' `get_rope_index` assigns them (§2.2).

Every token has three positions (t, h, w). Text advances all three by one per token. A media block
is its start marker, its N placeholder rows and its end marker, written at the label's next
position p:
- audio: the marker at p, the rows at p+1 .. p+N (all three equal), the end marker at p+N+1;
- image / video: the marker at p, row (f, y, x) of the merged-token grid at
  p+1 + (f·step, y, x) with step = position_per_second · (1 for an image, second_per_grid for a
  video), the end marker at the block's largest position + 1.
The next part starts one past the end marker, so a label's position is not its KV length: the
engine's position is set to it after the block (`Placed.next`).

Transformers keeps positions as floats; a video whose second_per_grid makes f·step fractional gives
later text fractional positions there, while the engine keeps integers: the end marker is put at
floor(largest) + 1 (identical whenever the steps are whole, as with the processor's defaults).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Placed:
    positions: Tensor  # [3, n] float32 (t, h, w) of each row
    next: int  # the position after the rows


def text(start: int, n: int) -> Placed:
    row = torch.arange(start, start + n, dtype=torch.float32)  # [n]
    return Placed(row.expand(3, n), start + n)


def audio(start: int, n: int) -> Placed:
    """The start marker, n audio rows, the end marker."""
    return text(start, n + 2)


def vision(start: int, grid: tuple[int, int, int], step: float) -> Placed:
    """The start marker, the t·h·w rows of a merged-token grid (frames, rows, columns), the end marker."""
    t, h, w = grid
    frame = (torch.arange(t, dtype=torch.float32) * step).view(t, 1, 1).expand(t, h, w)  # [t, h, w]
    row = torch.arange(h, dtype=torch.float32).view(1, h, 1).expand(t, h, w)  # [t, h, w]
    col = torch.arange(w, dtype=torch.float32).view(1, 1, w).expand(t, h, w)  # [t, h, w]
    body = torch.stack([frame.flatten(), row.flatten(), col.flatten()]) + (start + 1)  # [3, t·h·w]
    end = math.floor(float(body.max())) + 1 if body.numel() else start + 1
    marker = torch.full((3, 1), float(start))  # [3, 1]
    closing = torch.full((3, 1), float(end))  # [3, 1]
    return Placed(torch.cat([marker, body, closing], dim=1), end + 1)  # [3, t·h·w + 2]


def merged_grid(grid_thw: tuple[int, int, int], merge: int) -> tuple[int, int, int]:
    """The vision encoder's patch grid (t, h, w) -> the thinker's token grid (t, h / merge, w / merge)."""
    t, h, w = (int(v) for v in grid_thw)
    if h % merge or w % merge:
        raise ValueError(f"grid_thw {[t, h, w]}: h and w must be multiples of the spatial merge size {merge}")
    return t, h // merge, w // merge
