"""BAGEL's image transform for the VAE: an aspect-preserving bicubic resize to multiples of 16, then
[-1, 1] pixels (models-wave2.md §1.4, §1.6).

BAGEL builds it as `ImageTransform(1024, 512, 16)` (data/transforms.py: `MaxLongEdgeMinShortEdgeResize`,
`ToTensor`, `Normalize(0.5, 0.5)`, `max_pixels` 14·14·9·1024); the size rule is resize.py's. BAGEL resizes an input image with this
rule once in `interleave_inference` (before both the VAE and the ViT see it) and again inside
`update_context_image` for the VAE; the second pass is the identity unless the first one ended on a
size the rule would change (the cap beat the floor), and `vae_pixels` repeats it to match.
"""

from __future__ import annotations

import torch
from torch import Tensor
from wgc.models.bagel.resize import ResizeRule, fit, resize

__all__ = ["ResizeRule", "as_rgb", "fit", "resize", "vae_pixels"]


def as_rgb(img: object) -> Tensor:
    """An `image` input (uint8 [H, W, 3], as runtime/http/media/decode.py decodes it) as a CPU uint8 tensor;
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
