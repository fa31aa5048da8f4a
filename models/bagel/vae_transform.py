"""BAGEL's image transform for the VAE: an aspect-preserving bicubic resize to multiples of 16, then
[-1, 1] pixels (models-wave2.md §1.4, §1.6).

BAGEL builds it as `ImageTransform(1024, 512, 16)` (data/transforms.py: `MaxLongEdgeMinShortEdgeResize`,
`ToTensor`, `Normalize(0.5, 0.5)`, `max_pixels` 14·14·9·1024). The size rule, in order:

    scale = max(min(max_size / long edge, 1), min_size / short edge)    shrink to the cap, grow to the floor
    side  = max(stride, round(round(side · scale) / stride) · stride)   each side, to a multiple of stride
    if w·h > max_pixels:       rescale the rounded sides by max_pixels / (w·h), round again
    if the long edge > max_size: rescale by max_size / long edge, round again

so the floor can lose to the cap for a very long image. The resize is Pillow's bicubic (what
torchvision does for a PIL image; Pillow always antialiases). BAGEL resizes an input image with this
rule once in `interleave_inference` (before both the VAE and the ViT see it) and again inside
`update_context_image` for the VAE; the second pass is the identity unless the first one ended on a
size the rule would change (the cap beat the floor), and `vae_pixels` repeats it to match.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class ResizeRule:
    """BAGEL's `MaxLongEdgeMinShortEdgeResize` bounds."""

    max_size: int = 1024  # longest edge, at most
    min_size: int = 512  # shortest edge, at least (unless the cap wins)
    stride: int = 16  # both sides a multiple of this: the VAE's 8x and the 2x2 latent patch
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

    image = Image.fromarray(np.ascontiguousarray(pixels.numpy()))
    return torch.from_numpy(np.asarray(image.resize((w, h), Image.Resampling.BICUBIC)).copy())  # [h, w, 3] u8


def as_rgb(img: object) -> Tensor:
    """An `image` input (uint8 [H, W, 3], as runtime/http/media.py decodes it) as a CPU uint8 tensor;
    [H, W] grey and [H, W, 4] RGBA are accepted too (grey repeated, alpha dropped)."""
    pixels = torch.as_tensor(img).detach().to("cpu")
    if pixels.dtype != torch.uint8:
        raise ValueError(f"an image input is uint8 pixels, found {pixels.dtype}")
    if pixels.ndim == 2:
        pixels = pixels[:, :, None].expand(-1, -1, 3)
    if pixels.ndim != 3 or pixels.shape[-1] not in (3, 4) or min(pixels.shape[0], pixels.shape[1]) < 1:
        raise ValueError(f"an image input is [H, W, 3] pixels, found shape {list(pixels.shape)}")
    return pixels[:, :, :3].contiguous()


def vae_pixels(img: object, rule: ResizeRule) -> Tensor:
    """An image input -> float32 [3, H', W'] in [-1, 1] at BAGEL's VAE size (resized twice, as BAGEL does)."""
    pixels = resize(resize(as_rgb(img), rule), rule)  # [H', W', 3] u8
    x = pixels.permute(2, 0, 1).to(torch.float32) / 255.0  # [3, H', W'] in [0, 1] (ToTensor)
    return (x - 0.5) / 0.5  # [3, H', W'] in [-1, 1] (Normalize 0.5, 0.5)
