"""A clip or an image as the V-JEPA 2 encoder takes it: the shortest edge resized to crop * 256 / 224
(bilinear, antialiased), a centre crop of crop x crop, values to [0, 1], then ImageNet's mean and std
(transformers' VJEPA2VideoProcessor; upstream's eval transform).

In: what the runtime hands a component for a `video` or `image` input: a uint8 tensor [T, H, W, 3]
(a video) or [H, W, 3] (an image; one frame), or floats already in [0, 1]. Out: [T, 3, crop, crop].
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
MIN_SIDE = 16  # one patch: a smaller frame has nothing to resize from


def clip_error(x: Any) -> str:
    """Why x is not a clip or an image, or ''."""
    if not isinstance(x, Tensor):
        return f"expected a video [T, H, W, 3] or an image [H, W, 3] tensor, found {type(x).__name__}"
    if x.dim() not in (3, 4) or x.shape[-1] != 3 or (x.dim() == 4 and x.shape[0] == 0):
        return f"expected a video [T, H, W, 3] or an image [H, W, 3], found shape {list(x.shape)}"
    if min(x.shape[-3], x.shape[-2]) < MIN_SIDE:
        return f"a frame of {x.shape[-2]}x{x.shape[-3]} px is smaller than {MIN_SIDE} px on a side"
    if x.dtype != torch.uint8 and not x.is_floating_point():
        return f"expected uint8 or floating-point pixels, found {x.dtype}"
    return ""


def prepare(x: Tensor, crop: int) -> Tensor:
    """[T, H, W, 3] or [H, W, 3] -> [T, 3, crop, crop] float32, normalised."""
    frames = (x if x.dim() == 4 else x[None]).permute(0, 3, 1, 2).float()  # [T, 3, H, W]
    if x.dtype == torch.uint8:
        frames = frames / 255.0
    h, w = frames.shape[-2:]
    edge = int(crop * 256 / 224)
    size = (edge, max(edge, round(w * edge / h))) if h <= w else (max(edge, round(h * edge / w)), edge)
    frames = F.interpolate(frames, size=size, mode="bilinear", antialias=True, align_corners=False)
    top, left = (size[0] - crop) // 2, (size[1] - crop) // 2
    frames = frames[..., top:top + crop, left:left + crop].clamp(0.0, 1.0)  # [T, 3, crop, crop]
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (frames - mean) / std
