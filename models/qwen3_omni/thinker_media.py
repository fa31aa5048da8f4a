"""What `thinker.prefill_embeds(x)` accepts: an encoder's output for one audio clip, image or video.

The format (the audio and vision encoders return it; the thinker reads nothing else):
- a tensor [N, hidden]: N audio rows (audio_enc.encode), placed between `<|audio_start|>` and
  `<|audio_end|>` at N `<|audio_pad|>` positions;
- a dict for an image or a video (vision_enc.encode_image / encode_video):
    "embeds":   [N, hidden]      the merger's output, one row per merged token, in (t, h, w) order;
    "kind":     "image" | "video" (default "image");
    "grid_thw": [3] ints         the patch grid as the encoder's `grid_thw` (t, h, w, before the
                                 2x2 merge): N must be t·h·w / merge²; it sets the M-RoPE positions;
    "deepstack": [D, N, hidden]  optional: the `merger_list` outputs (blocks 8, 16, 24), added to the
                                 thinker's hidden state after its layers 0..D-1 at these N rows;
    "second_per_grid": float     a video's seconds per temporal patch (temporal_patch_size / fps;
                                 default 1.0, the processor's fps 2), the step of its t positions;
  a dict {"embeds": [N, hidden], "kind": "audio"} is an audio clip too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from wgc.models.qwen3_omni.config import ThinkerConfig
from wgc.models.qwen3_omni.positions import merged_grid

KINDS = ("audio", "image", "video")


@dataclass(frozen=True)
class Media:
    kind: str
    embeds: Tensor  # [N, hidden]
    grid: tuple[int, int, int] | None  # the merged-token grid (t, h, w); None for audio
    deepstack: Tensor | None  # [D, N, hidden]
    second_per_grid: float

    def markers(self, c: ThinkerConfig) -> tuple[int, int, int]:
        """(start marker, placeholder, end marker) as Qwen ids."""
        t = c.tokens
        if self.kind == "audio":
            return t.audio_start, t.audio, t.audio_end
        return t.vision_start, t.image if self.kind == "image" else t.video, t.vision_end


def parse(x: Any, c: ThinkerConfig) -> Media:
    """The entry's argument as Media; ValueError (a one-line message naming the field) when it is not."""
    if isinstance(x, Tensor):
        x = {"embeds": x, "kind": "audio"}
    if not isinstance(x, dict):
        raise ValueError(f"`x` must be a tensor [N, {c.hidden}] or a dict with \"embeds\", found {type(x).__name__}")
    kind = str(x.get("kind", "image"))
    if kind not in KINDS:
        raise ValueError(f"`x` kind {kind!r} is not one of {', '.join(KINDS)}")
    embeds = x.get("embeds")
    if not isinstance(embeds, Tensor) or embeds.dim() != 2 or embeds.shape[1] != c.hidden or not embeds.shape[0]:
        found = list(embeds.shape) if isinstance(embeds, Tensor) else type(embeds).__name__
        raise ValueError(f"`x` embeds must be a tensor [N, {c.hidden}] with N > 0, found {found}")
    n = int(embeds.shape[0])
    grid = None
    if kind != "audio":
        raw = x.get("grid_thw")
        try:
            thw = tuple(int(v) for v in (raw.tolist() if isinstance(raw, Tensor) else raw))  # type: ignore[union-attr]
        except (TypeError, ValueError):
            thw = ()
        if len(thw) != 3:
            raise ValueError(f"`x` grid_thw must be 3 ints (t, h, w) for an {kind}, found {raw!r}")
        grid = merged_grid(thw, c.spatial_merge)  # type: ignore[arg-type]
        if grid[0] * grid[1] * grid[2] != n:
            raise ValueError(f"`x` grid_thw {list(thw)} makes {grid[0] * grid[1] * grid[2]} tokens, "
                             f"but embeds has {n} rows")
    deepstack = x.get("deepstack")
    if deepstack is not None:
        if isinstance(deepstack, list | tuple) and all(isinstance(d, Tensor) for d in deepstack):
            deepstack = torch.stack(list(deepstack))  # [D, N, hidden]
        if not isinstance(deepstack, Tensor) or deepstack.dim() != 3 or tuple(deepstack.shape[1:]) != (n, c.hidden):
            found = list(deepstack.shape) if isinstance(deepstack, Tensor) else type(deepstack).__name__
            raise ValueError(f"`x` deepstack must be a tensor [D, {n}, {c.hidden}], found {found}")
        if deepstack.shape[0] > c.layers:
            raise ValueError(f"`x` deepstack has {deepstack.shape[0]} levels, more than the thinker's {c.layers} layers")
    return Media(kind, embeds, grid, deepstack, float(x.get("second_per_grid", 1.0)))
