"""Bidirectional attention within segments of a packed token sequence: the audio tower's windows and
the vision tower's frames, for every call of a batch at once.

The calls' tokens are packed end to end ([T, ...]); a segment is a run of them that attends only
within itself (an audio window of at most 104 tokens, one frame of an image or a video). Segments of
the same length run as one dense [segments, length] batch, so attention never crosses a segment and
needs no mask; token-wise work (norms, projections, MLPs) runs once over the whole pack. This is
what transformers' non-flash path does one segment at a time (`cu_seqlens`, a loop of SDPA calls).
"""

from __future__ import annotations

import torch
from torch import Tensor
from wgc.runtime.engines.attention import dense_attention


class Segments:
    """The segments of a pack, grouped by length: index tensors built once, used by every layer."""

    def __init__(self, lengths: list[int], device: torch.device | str = "cpu") -> None:
        if any(n < 1 for n in lengths):
            raise ValueError(f"empty attention segment in {lengths}")
        self.total = sum(lengths)
        starts: dict[int, list[int]] = {}
        at = 0
        for n in lengths:
            starts.setdefault(n, []).append(at)
            at += n
        self.single = len(starts) == 1  # one length: the pack views as [segments, length] as it is
        self.groups = [(n, torch.tensor(s, dtype=torch.long, device=device)[:, None]
                        + torch.arange(n, device=device)[None, :]) for n, s in starts.items()]  # ([B, n] rows)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q, k, v [T, heads, d] -> [T, heads, d], softmax(q k^T / sqrt(d)) v within each segment."""
        if self.single:
            n = self.groups[0][0]
            out = dense_attention(*(t.view(-1, n, *t.shape[1:]) for t in (q, k, v)), mode="prefix")  # [B, n, H, d]
            return out.reshape(q.shape)
        out = torch.empty_like(q)
        for _, rows in self.groups:
            out[rows] = dense_attention(q[rows], k[rows], v[rows], mode="prefix")  # [B, n, H, d]
        return out
