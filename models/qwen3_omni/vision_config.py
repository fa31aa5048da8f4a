"""The vision tower's config (transformers `Qwen3OmniMoeVisionEncoderConfig`, the checkpoint's
`thinker_config.vision_config`) and the processor's resize bounds (`preprocessor_config.json`).

Resize (transformers' `smart_resize`, Qwen2-VL's rule): both sides rounded to multiples of
`factor` = patch·merge (32 px), keeping the aspect ratio; if that is over `max_pixels` both sides are
scaled down by sqrt(pixels / max_pixels) and floored to the factor, if under `min_pixels` scaled up
and ceiled. Images: min 3,136 and max 12,845,056 pixels (the checkpoint's Qwen2VLImageProcessor);
video frames: min 128·32·32 and max 768·32·32 (Qwen3OmniMoeProcessor's videos_kwargs size, which the
processor passes to its video processor by default).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ResizeBounds:
    """`smart_resize`'s bounds: the side multiple and the pixel range."""

    factor: int = 32
    min_pixels: int = 3136
    max_pixels: int = 12845056
    max_aspect: float = 200.0

    def size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) after the resize; ValueError for an aspect ratio over `max_aspect`."""
        if max(height, width) / min(height, width) > self.max_aspect:
            raise ValueError(f"a {width}x{height} image's aspect ratio is over {self.max_aspect:g}")
        f = self.factor
        h, w = round(height / f) * f, round(width / f) * f
        if h * w > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h, w = max(f, math.floor(height / beta / f) * f), max(f, math.floor(width / beta / f) * f)
        elif h * w < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h, w = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
        return h, w


@dataclass(frozen=True)
class VisionConfig:
    name: str = "30b-a3b"
    depth: int = 27
    hidden: int = 1152
    heads: int = 16
    intermediate: int = 4304
    patch: int = 16
    temporal_patch: int = 2
    merge: int = 2
    out_hidden: int = 2048  # the thinker's hidden size
    position_embeddings: int = 2304  # a 48 x 48 learned table, interpolated to each image's grid
    deepstack: tuple[int, ...] = (8, 16, 24)  # blocks whose output also goes, merged, to the thinker
    rope_theta: float = 10000.0
    eps: float = 1e-6
    channels: int = 3
    image: ResizeBounds = field(default_factory=ResizeBounds)
    video: ResizeBounds = field(default_factory=lambda: ResizeBounds(min_pixels=128 * 32 * 32,
                                                                     max_pixels=768 * 32 * 32))
    video_fps: float = 2.0  # frames a second of a video given as bare frames (qwen-omni-utils samples at 2)

    def __post_init__(self) -> None:
        if self.hidden % self.heads or self.head_dim % 4:
            raise ValueError(f"vision hidden {self.hidden} over {self.heads} heads needs a head_dim divisible by 4 "
                             "(the 2D rotary splits it in rows and columns, each in cos/sin halves)")
        if math.isqrt(self.position_embeddings) ** 2 != self.position_embeddings:
            raise ValueError(f"vision num_position_embeddings {self.position_embeddings} is not a square table")
        if any(not 0 <= i < self.depth for i in self.deepstack) or len(set(self.deepstack)) != len(self.deepstack):
            raise ValueError(f"deepstack layers {list(self.deepstack)} must be distinct blocks of 0..{self.depth - 1}")
        for bounds in (self.image, self.video):
            if bounds.factor != self.patch * self.merge:
                raise ValueError(f"the resize factor {bounds.factor} is not patch x merge = {self.patch * self.merge}")

    @staticmethod
    def preset(name: str) -> VisionConfig:
        if name == "tiny":  # models-wave2 §2.5; images up to 128 x 128 px (64 patches, 16 tokens)
            small = ResizeBounds(min_pixels=3136, max_pixels=128 * 128)
            return VisionConfig("tiny", depth=2, hidden=32, heads=2, intermediate=64, out_hidden=64,
                                position_embeddings=64, deepstack=(0, 1), image=small, video=small)
        if name == "30b-a3b":
            return VisionConfig()
        raise ValueError(f"unknown vision preset {name!r} (known: tiny, 30b-a3b)")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def grid_side(self) -> int:
        return math.isqrt(self.position_embeddings)

    @property
    def patch_features(self) -> int:
        """One flattened patch: channels x temporal x patch x patch, the Conv3d's input."""
        return self.channels * self.temporal_patch * self.patch * self.patch

    # ---- transformers' config ---------------------------------------------------------------------

    def hf_config(self) -> dict[str, Any]:
        """`vision_config` as config.json holds it (transformers' Qwen3OmniMoeVisionEncoderConfig keys)."""
        return {
            "depth": self.depth, "hidden_size": self.hidden, "num_heads": self.heads,
            "intermediate_size": self.intermediate, "patch_size": self.patch,
            "temporal_patch_size": self.temporal_patch, "spatial_merge_size": self.merge,
            "out_hidden_size": self.out_hidden, "num_position_embeddings": self.position_embeddings,
            "deepstack_visual_indexes": list(self.deepstack), "in_channels": self.channels,
            "hidden_act": "gelu_pytorch_tanh", "rope_parameters": {"rope_type": "axial", "rope_theta": self.rope_theta},
        }

    @staticmethod
    def from_hf(raw: dict[str, Any], name: str = "checkpoint") -> VisionConfig:
        """From a `vision_config` dict; missing keys take transformers' class defaults (out_hidden_size the
        checkpoint's 2048, the class default being 3584). A ValueError names a key this code cannot run."""
        base = asdict(VisionConfig())
        keys = {"depth": "depth", "hidden": "hidden_size", "heads": "num_heads", "intermediate": "intermediate_size",
                "patch": "patch_size", "temporal_patch": "temporal_patch_size", "merge": "spatial_merge_size",
                "out_hidden": "out_hidden_size", "position_embeddings": "num_position_embeddings",
                "channels": "in_channels"}
        fields: dict[str, Any] = {"name": name}
        for ours, theirs in keys.items():
            value = raw.get(theirs, base[ours])
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"vision_config `{theirs}` is {value!r}, expected a positive integer")
            fields[ours] = value
        stack = raw.get("deepstack_visual_indexes", base["deepstack"])
        if not isinstance(stack, (list, tuple)) or not all(isinstance(i, int) for i in stack):
            raise ValueError(f"vision_config `deepstack_visual_indexes` is {stack!r}, expected a list of block indexes")
        fields["deepstack"] = tuple(stack)
        if raw.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
            raise ValueError(f"vision_config `hidden_act` is {raw['hidden_act']!r}; the tower's is 'gelu_pytorch_tanh'")
        rope = raw.get("rope_parameters") or {}
        fields["rope_theta"] = float(rope.get("rope_theta", raw.get("rope_theta", base["rope_theta"])))
        factor = fields["patch"] * fields["merge"]
        fields["image"] = ResizeBounds(factor=factor)
        fields["video"] = ResizeBounds(factor=factor, min_pixels=128 * factor**2, max_pixels=768 * factor**2)
        return VisionConfig(**fields)
