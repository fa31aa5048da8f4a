"""What the talker's entries take from the walk, checked: a prefill part's thinker rows (the `hidden`
stream's item, talker.py's docstring says what it holds), a reply token's row, and a previous frame.
Each function raises ValueError with the message the component gives the request."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class Part:
    """One prefill item: the thinker's rows for the positions the talker sees."""

    rows: Tensor  # [N, thinker_hidden]: input embeddings, or accept-layer states where `multimodal`
    multimodal: Tensor | None  # [N] bool, None: every row is text
    positions: Tensor | None  # [3, N] M-RoPE positions relative to the part's first row; None: text positions
    open_user: bool  # a user turn is open after the part (begin_reply closes it on the thinker's side)

    @property
    def length(self) -> int:
        return int(self.rows.shape[0])

    def extent(self) -> int:
        """Positions the part takes: one past its largest relative position (N for text rows)."""
        if self.positions is None or not self.length:
            return self.length
        return math.floor(float(self.positions.max())) + 1


def part(h: Any, width: int) -> Part:
    """A prefill item: a tensor [N, width] (text rows), a dict {"rows", "multimodal", "positions",
    "open_user"} (all but "rows" optional), or None (nothing for the talker)."""
    if h is None:
        return Part(torch.empty(0, width), None, None, True)
    fields = h if isinstance(h, dict) else {"rows": h}
    rows, mm, pos = fields.get("rows"), fields.get("multimodal"), fields.get("positions")
    if not isinstance(rows, Tensor) or rows.dim() != 2 or rows.shape[1] != width:
        found = list(rows.shape) if isinstance(rows, Tensor) else type(rows).__name__
        raise ValueError(f"`h` must be a tensor [N, {width}] or a dict with such \"rows\", found {found}")
    n = rows.shape[0]
    if mm is not None and (not isinstance(mm, Tensor) or tuple(mm.shape) != (n,)):
        raise ValueError(f"`h`'s \"multimodal\" must be a bool tensor [{n}], one per row")
    if pos is not None and (not isinstance(pos, Tensor) or tuple(pos.shape) != (3, n)):
        raise ValueError(f"`h`'s \"positions\" must be a tensor [3, {n}] (t, h, w per row)")
    if pos is not None and n and (float(pos.min()) < 0 or not bool(torch.isfinite(pos).all())):
        raise ValueError("`h`'s \"positions\" must be finite and relative to the part's first row (from 0)")
    return Part(rows, None if mm is None else mm.to(torch.bool), pos, bool(fields.get("open_user", True)))


def reply_row(h: Any, width: int) -> Tensor | None:
    """A reply token's thinker row [width], or None: the stream's item after the thinker ended."""
    if h is None:
        return None
    if not isinstance(h, Tensor) or tuple(h.shape) != (1, width):
        found = list(h.shape) if isinstance(h, Tensor) else type(h).__name__
        raise ValueError(f"a reply token's `h` must be a tensor [1, {width}], found {found}")
    return h[0]


def frame(value: Any, groups: int, vocab: int, codes: int, eos_in: int, eos: int) -> Tensor:
    """A previous frame [groups] int64 in model ids (`eos_in`, the walk's codec EOS, is the model's `eos`)."""
    try:
        out = torch.as_tensor(value, dtype=torch.int64).reshape(-1).cpu()
    except (TypeError, ValueError, RuntimeError):
        out = torch.empty(0, dtype=torch.int64)
    if out.numel() != groups:
        raise ValueError(f"`prev` must be a frame of {groups} codes")
    out = torch.where(out == eos_in, eos, out)
    if bool((out < 0).any()) or int(out[0]) >= vocab or int(out[1:].max()) >= codes:
        raise ValueError("`prev` has a code outside the codec's vocabulary")
    return out
