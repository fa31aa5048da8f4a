"""BAGEL's aspect-preserving image resize (`MaxLongEdgeMinShortEdgeResize`), shared by the VAE and
the ViT inputs: one rule, two sets of bounds (models-wave2.md §1.3, §1.4, §1.6).

    scale = max(min(max_size / long edge, 1), min_size / short edge)    shrink to the cap, grow to the floor
    side  = max(stride, round(round(side · scale) / stride) · stride)   each side, to a multiple of stride
    if w·h > max_pixels:       rescale the rounded sides by max_pixels / (w·h), round again
    if the long edge > max_size: rescale by max_size / long edge, round again

so the floor can lose to the cap for a very long image (the area ratio used as a linear scale is
BAGEL's own rule). Python's round (half to even) on purpose: the reference rounds the same way. The
resize is Pillow's bicubic, as the reference resizes a PIL image (Pillow always antialiases).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class ResizeRule:
    max_size: int = 1024  # the longest edge at most this
    min_size: int = 512  # the shortest edge at least this (unless max_size or max_pixels win)
    stride: int = 16  # both sides a multiple of this
    max_pixels: int = 14 * 14 * 9 * 1024  # BAGEL's ImageTransform default


def _snap(value: float, stride: int) -> int:
    return max(stride, int(round(value / stride) * stride))


def _scaled(width: int, height: int, scale: float, stride: int) -> tuple[int, int]:
    return _snap(round(width * scale), stride), _snap(round(height * scale), stride)


def fit(width: int, height: int, rule: ResizeRule) -> tuple[int, int]:
    """The (width, height) BAGEL resizes a `width` x `height` image to."""
    scale = max(min(rule.max_size / max(width, height), 1.0), rule.min_size / min(width, height))
    w, h = _scaled(width, height, scale, rule.stride)
    if w * h > rule.max_pixels:
        w, h = _scaled(w, h, rule.max_pixels / (w * h), rule.stride)
    if max(w, h) > rule.max_size:
        w, h = _scaled(w, h, rule.max_size / max(w, h), rule.stride)
    return w, h


def resize(pixels: Tensor, rule: ResizeRule) -> Tensor:
    """uint8 [H, W, 3] -> uint8 [H', W', 3], the sides from `fit` (Pillow bicubic; no copy when equal)."""
    height, width = int(pixels.shape[0]), int(pixels.shape[1])
    w, h = fit(width, height, rule)
    if (w, h) == (width, height):
        return pixels
    from PIL import Image

    image = Image.fromarray(np.ascontiguousarray(pixels.cpu().numpy()))
    return torch.from_numpy(np.asarray(image.resize((w, h), Image.Resampling.BICUBIC)).copy())  # [h, w, 3] u8
