"""The vision encoder's input: an image or a video checked, resized, normalised and cut into patches
as the checkpoint's processor does (transformers `Qwen2VLImageProcessorPil` / `Qwen2VLVideoProcessor`).

An image arrives as the runtime hands every image part to a component (runtime/http/media/decode.py): a
uint8 tensor [H, W, 3]. A video is its frames, uint8 [T, H, W, 3] (a tensor through /v1/generate; the
frontend decodes no video), taken at `VisionConfig.video_fps` frames a second, or a dict
`{"frames": [T, H, W, 3], "fps": float}`.

Each image or frame is resized to `ResizeBounds.size` (vision_config.py; a video's frames all to the
size their common [H, W] gets) with Pillow's bicubic filter, as the PIL image processor does (its
torchvision twin and the video processor use torch's antialiased bicubic, a grey level off here and
there), scaled to [0, 1] and normalised with mean 0.5 and std 0.5 to [-1, 1]. An image is repeated
`temporal_patch` times (one temporal patch); a video's frames are padded to a multiple of
`temporal_patch` by repeating the last. Patches are flattened in (channel, time, row, column)
order, the Conv3d's, and listed in merge-block order: the `merge` x `merge` patches of one thinker
token are consecutive, blocks in row-major order, frame by frame (the processors' `patchify`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from wgc.models.qwen3_omni.vision_config import VisionConfig


class Prepared(NamedTuple):
    """One image or video, ready for the tower."""

    patches: Tensor  # [t * h * w, patch_features] float32, merge-block order
    grid: tuple[int, int, int]  # (t, h, w) in patches: transformers' grid_thw row
    second_per_grid: float  # seconds between temporal patches (video: temporal_patch / fps; image: 1)


def _uint8_frames(value: Any, dims: int, what: str, shape: str) -> Tensor:
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, Tensor):
        raise ValueError(f"{what} is a uint8 tensor {shape}, got {type(value).__name__}")
    if value.dtype != torch.uint8 or value.dim() != dims or value.shape[-1] != 3 or min(value.shape[:-1]) < 1:
        raise ValueError(f"{what} is a uint8 tensor {shape}, got {value.dtype} {list(value.shape)}")
    return value.cpu()


def check_image(value: Any) -> Tensor:
    """The image as a uint8 tensor [H, W, 3]; ValueError naming what came instead."""
    return _uint8_frames(value, 3, "an image", "[H, W, 3]")


def check_video(value: Any, default_fps: float) -> tuple[Tensor, float]:
    """(uint8 frames [T, H, W, 3], fps); ValueError naming what came instead."""
    fps: Any = default_fps
    if isinstance(value, dict) and set(value) == {"frames", "fps"}:
        value, fps = value["frames"], value["fps"]
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not 0 < fps < float("inf"):
        raise ValueError(f"a video's fps is a positive number, got {fps!r}")
    return _uint8_frames(value, 4, "a video", "[T, H, W, 3]"), float(fps)


def resize(image: Tensor, height: int, width: int) -> Tensor:
    """uint8 [H, W, 3] -> float32 [3, height, width] in [-1, 1]."""
    pil = Image.fromarray(image.numpy())
    if (height, width) != tuple(image.shape[:2]):
        pil = pil.resize((width, height), resample=Image.Resampling.BICUBIC)
    pixels = torch.from_numpy(np.asarray(pil, dtype=np.float32).copy()) / 255.0  # [H', W', 3] in [0, 1]
    return ((pixels - 0.5) / 0.5).permute(2, 0, 1)  # [3, H', W']


def patchify(frames: Tensor, c: VisionConfig) -> tuple[Tensor, tuple[int, int, int]]:
    """[T, 3, H, W] (T a multiple of temporal_patch) -> ([t * h * w, patch_features], (t, h, w))."""
    frames_n, channels, height, width = frames.shape
    t, h, w, m, p = frames_n // c.temporal_patch, height // c.patch, width // c.patch, c.merge, c.patch
    x = frames.reshape(t, c.temporal_patch, channels, h // m, m, p, w // m, m, p)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)  # [t, h/m, w/m, m, m, C, T, p, p]
    return x.reshape(t * h * w, c.patch_features), (t, h, w)


def prepare_image(value: Any, c: VisionConfig) -> Prepared:
    image = check_image(value)
    pixels = resize(image, *c.image.size(image.shape[0], image.shape[1]))  # [3, H', W']
    patches, grid = patchify(pixels[None].expand(c.temporal_patch, -1, -1, -1), c)
    return Prepared(patches, grid, 1.0)


def prepare_video(value: Any, c: VisionConfig) -> Prepared:
    frames, fps = check_video(value, c.video_fps)
    height, width = c.video.size(frames.shape[1], frames.shape[2])
    pixels = torch.stack([resize(f, height, width) for f in frames])  # [T, 3, H', W']
    if pad := -pixels.shape[0] % c.temporal_patch:
        pixels = torch.cat([pixels, pixels[-1:].expand(pad, -1, -1, -1)])
    patches, grid = patchify(pixels, c)
    return Prepared(patches, grid, c.temporal_patch / fps)


def llm_positions(grid: tuple[int, int, int], merge: int, second_per_grid: float,
                  position_id_per_seconds: float) -> Tensor:
    """The thinker's M-RoPE offsets of an item's tokens, float32 [3, t * h/merge * w/merge]: (temporal,
    row, column) from the item's first position, as transformers' `get_rope_index` lays them (its
    `get_llm_pos_ids_for_vision`): the temporal one steps by second_per_grid x position_id_per_seconds
    (13 in the checkpoint) per temporal patch; the text after the item starts at their maximum + 1."""
    t, h, w = grid[0], grid[1] // merge, grid[2] // merge
    ts = (torch.arange(t, dtype=torch.float32) * second_per_grid * position_id_per_seconds)[:, None, None]
    rows = torch.arange(h, dtype=torch.float32)[None, :, None]
    cols = torch.arange(w, dtype=torch.float32)[None, None, :]
    return torch.stack([x.expand(t, h, w).reshape(-1) for x in (ts, rows, cols)])  # [3, t*h*w]
