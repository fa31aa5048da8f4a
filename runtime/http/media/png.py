"""Images out: a model's image tensor as PNG bytes (encoded by Pillow).

An image payload is taken as uint8 pixels [H, W], [H, W, C] or [C, H, W] with C in 1, 3, 4
(a leading batch dim of 1 is dropped); floating values in [0, 1] are scaled to 0..255, others
clipped. A plain number (fake components) becomes a uniform grey image of the requested size.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}  # channels -> Pillow mode (grey, grey+alpha, RGB, RGBA)


def to_pixels(payload: Any, size: tuple[int, int]) -> np.ndarray:
    """uint8 [H, W, C]; `size` (width, height) is used only for a payload that is a plain number."""
    if hasattr(payload, "detach"):
        payload = payload.detach().to("cpu").float().numpy() if payload.is_floating_point() else \
            payload.detach().to("cpu").numpy()
    arr = np.asarray(payload)
    if arr.ndim == 0 or arr.size == 1:
        value = int(abs(float(arr.reshape(-1)[0])) * 19) % 256 if arr.size else 0
        return np.full((size[1], size[0], 1), value, dtype=np.uint8)
    while arr.ndim > 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3:
        raise ValueError(f"an image must be [H, W], [H, W, C] or [C, H, W], found shape {list(arr.shape)}")
    if arr.shape[-1] not in _MODES and arr.shape[0] in _MODES:
        arr = np.transpose(arr, (1, 2, 0))  # [C, H, W] -> [H, W, C]
    if arr.shape[-1] not in _MODES:
        raise ValueError(f"an image needs 1, 2, 3 or 4 channels, found shape {list(arr.shape)}")
    if arr.dtype != np.uint8:
        scale = 255.0 if np.issubdtype(arr.dtype, np.floating) and float(np.nanmax(arr, initial=0)) <= 1.0 else 1.0
        arr = np.clip(np.nan_to_num(arr.astype(np.float64) * scale), 0, 255).round().astype(np.uint8)
    return np.ascontiguousarray(arr)


def encode_png(pixels: np.ndarray) -> bytes:
    """uint8 [H, W, C] (C in 1..4, as `to_pixels` gives) as a PNG file, 8 bits per channel."""
    h, w, c = pixels.shape
    out = io.BytesIO()
    Image.frombytes(_MODES[c], (w, h), np.ascontiguousarray(pixels).tobytes()).save(out, format="PNG")
    return out.getvalue()
