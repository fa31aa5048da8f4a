"""BAGEL's ViT input: an image resized with its aspect ratio kept, normalised, cut into patches.

The image arrives as the runtime hands every image part to a component (runtime/http/media/decode.py):
a uint8 tensor [H, W, 3]. It is resized as BAGEL's `ImageTransform(980, 224, 14)` does, with
resize.py's rule, after the VAE's resize that BAGEL applies to every input image first; values go
to [-1, 1] (mean 0.5, std 0.5).

Patches are flattened in (p, q, c) order, row within the patch, column, then channel (BAGEL's
`patchify`, "chpwq -> hwpqc"), which is the order of the checkpoint's Linear patch embedding
[1152, 588]. Position ids extrapolate from the top-left of the `grid` x `grid` table: the patch
at (row, col) takes `row * grid + col` whatever the image's size (never interpolated over it):
`latents.latent_ids`, the same rule as the VAE latents' on their own grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from wgc.models.bagel.latents import latent_ids
from wgc.models.bagel.resize import ResizeRule, fit
from wgc.models.bagel.resize import resize as resize_pixels


class Resize(ResizeRule):
    """The ViT's bounds (BAGEL's `ImageTransform(980, 224, 14)`): the stride a multiple of the patch."""

    @staticmethod
    def preset(name: str) -> Resize:
        if name == "7b":
            return Resize(max_size=980, min_size=224, stride=14, max_pixels=14 * 14 * 9 * 1024)
        if name == "tiny":
            # the 4 x 4 grid of 14-pixel patches: 56 px at most, 2 patches at least; max_pixels is
            # the real bound scaled by the area ratio (56 / 980)^2, so that it binds as rarely
            return Resize(max_size=56, min_size=28, stride=14, max_pixels=14 * 14 * 30)
        raise ValueError(f"unknown ViT resize preset {name!r} (known: tiny, 7b)")


def target_size(width: int, height: int, r: ResizeRule) -> tuple[int, int]:
    """(width, height) after BAGEL's resize: aspect kept, both multiples of `r.stride`."""
    return fit(width, height, r)


def check_image(value: Any) -> Tensor:
    """The image as a uint8 tensor [H, W, 3]; ValueError naming what came instead."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, Tensor):
        raise ValueError(f"an image is a uint8 tensor [H, W, 3], got {type(value).__name__}")
    if value.dtype != torch.uint8 or value.dim() != 3 or value.shape[-1] != 3 or min(value.shape[:2]) < 1:
        raise ValueError(f"an image is a uint8 tensor [H, W, 3], got {value.dtype} {list(value.shape)}")
    return value


def resize(image: Tensor, r: ResizeRule, first: ResizeRule | None = None) -> Tensor:
    """uint8 [H, W, 3] -> float32 [H', W', 3] in [-1, 1], H' and W' from `target_size`. `first`: the
    rule the image went through before (BAGEL's `interleave_inference` resizes every input image with
    the VAE's rule before either encoder sees it, understanding included)."""
    if first is not None:
        image = resize_pixels(image, first)
    pixels = resize_pixels(image, r).to(torch.float32)  # [H', W', 3] in [0, 255]
    return (pixels / 255.0 - 0.5) / 0.5  # [H', W', 3]: ToTensor then Normalize, in the reference's order


def patchify(pixels: Tensor, patch: int) -> Tensor:
    """[H, W, C] -> [H/p * W/p, p * p * C], patches row-major, each flattened in (p, q, c) order."""
    height, width, channels = pixels.shape
    if height % patch or width % patch:
        raise ValueError(f"a {height}x{width} image does not cut into {patch}-pixel patches")
    rows, cols = height // patch, width // patch
    grid = pixels.reshape(rows, patch, cols, patch, channels)  # [rows, p, cols, q, C]
    return grid.permute(0, 2, 1, 3, 4).reshape(rows * cols, patch * patch * channels)  # [rows*cols, p*q*C]


def prepare(image: Tensor, r: ResizeRule, patch: int, grid: int,
            first: ResizeRule | None = None) -> tuple[Tensor, Tensor, tuple[int, int]]:
    """uint8 [H, W, 3] -> (patches [N, p*p*3] float32, ids [N] int64, (rows, cols))."""
    pixels = resize(image, r, first)  # [H', W', 3]
    rows, cols = pixels.shape[0] // patch, pixels.shape[1] // patch
    return patchify(pixels, patch), latent_ids(rows, cols, grid), (rows, cols)
