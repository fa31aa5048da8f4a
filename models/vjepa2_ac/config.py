"""V-JEPA 2-AC's sizes (models-wave2.md §3): the ViT encoder with its masked predictor (one Hugging Face
`VJEPA2Config`), and the action-conditioned predictor (no config file upstream: its sizes are the
constructor's defaults in `vit_ac_predictor`, kept in `ac_predictor.json` by `wgc convert vjepa2-ac`).

Presets: `tiny` (tests and CPU demos: a 4 x 4 patch grid, 2 layers each, milliseconds a call) and
`vitg` (facebook/vjepa2-vitg-fpc64-256 with the vjepa2-ac-vitg predictor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ACTION_DIM = 7  # [dx, dy, dz, droll, dpitch, dyaw, gripper]; a state is the pose [x, y, z, roll, pitch, yaw, gripper]
COND_TOKENS = 2  # an action token and a state token open every frame block (no extrinsics token)
MAX_FRAMES = 32  # frame blocks the reference's mask covers: num_frames 64 // tubelet 2
REPS_EPS = 1e-5  # `F.layer_norm(h, (D,))` of the world-model wrapper (normalize_reps): the default eps


def rope_part(head_dim: int) -> int:
    """Dims of head_dim each of depth, height and width rotates: 2 * ((head_dim // 3) // 2)."""
    return 2 * ((head_dim // 3) // 2)


@dataclass(frozen=True)
class VitConfig:
    """The encoder and the masked predictor (transformers' VJEPA2Config fields, under our names)."""

    name: str
    hidden: int
    layers: int
    heads: int
    patch: int = 16
    tubelet: int = 2
    crop: int = 256
    frames_per_clip: int = 64
    mlp_ratio: float = 4.0
    eps: float = 1e-6
    pred_hidden: int = 384
    pred_layers: int = 12
    pred_heads: int = 12
    pred_mask_tokens: int = 10
    pred_mlp_ratio: float = 4.0

    @property
    def grid(self) -> int:
        return self.crop // self.patch

    @property
    def tokens_per_frame(self) -> int:
        return self.grid * self.grid

    @staticmethod
    def preset(name: str) -> VitConfig:
        if name == "tiny":  # §3.5: hidden 96, 2 layers, 2 heads, crop 64 (4 x 4 grid); predictor 48
            return VitConfig("tiny", hidden=96, layers=2, heads=2, crop=64, frames_per_clip=4,
                             pred_hidden=48, pred_layers=2, pred_heads=2, pred_mask_tokens=2)
        if name == "vitg":  # ViT-g/16: 1408 wide, 40 layers, 22 heads of 64, MLP 48/11 (6144)
            return VitConfig("vitg", hidden=1408, layers=40, heads=22, mlp_ratio=48 / 11)
        raise ValueError(f"unknown V-JEPA 2 encoder preset {name!r} (known: tiny, vitg)")

    @staticmethod
    def from_hf(raw: dict[str, Any], name: str = "checkpoint") -> VitConfig:
        """From a Hugging Face config.json (VJEPA2Config); a missing key takes transformers' default."""
        patch = raw.get("patch_size", 16)
        return VitConfig(name, hidden=int(raw.get("hidden_size", 1024)), layers=int(raw.get("num_hidden_layers", 24)),
                         heads=int(raw.get("num_attention_heads", 16)),
                         patch=int(patch[0] if isinstance(patch, list) else patch),
                         tubelet=int(raw.get("tubelet_size", 2)), crop=int(raw.get("crop_size", 256)),
                         frames_per_clip=int(raw.get("frames_per_clip", 64)),
                         mlp_ratio=float(raw.get("mlp_ratio", 4.0)), eps=float(raw.get("layer_norm_eps", 1e-6)),
                         pred_hidden=int(raw.get("pred_hidden_size", 384)),
                         pred_layers=int(raw.get("pred_num_hidden_layers", 12)),
                         pred_heads=int(raw.get("pred_num_attention_heads", 12)),
                         pred_mask_tokens=int(raw.get("pred_num_mask_tokens", 10)),
                         pred_mlp_ratio=float(raw.get("pred_mlp_ratio", 4.0)))


@dataclass(frozen=True)
class ACConfig:
    """The action-conditioned predictor (`VisionTransformerPredictorAC`)."""

    name: str
    embed: int  # the encoder's width (its tokens in, its predictions out)
    hidden: int
    layers: int
    heads: int
    grid: int = 16  # patches per side of a frame
    max_frames: int = MAX_FRAMES
    mlp_ratio: float = 4.0
    eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def tokens_per_frame(self) -> int:
        return self.grid * self.grid

    @property
    def block(self) -> int:
        """Tokens of one frame block: the action, the state, the patches."""
        return COND_TOKENS + self.tokens_per_frame

    @staticmethod
    def preset(name: str) -> ACConfig:
        if name == "tiny":  # §3.5: embed 96 -> 64, 2 layers, 2 heads of 32 (3 x 10 rotated dims)
            return ACConfig("tiny", embed=96, hidden=64, layers=2, heads=2, grid=4)
        if name == "vitg":  # 1024 wide, 24 layers, 16 heads of 64
            return ACConfig("vitg", embed=1408, hidden=1024, layers=24, heads=16)
        raise ValueError(f"unknown V-JEPA 2-AC predictor preset {name!r} (known: tiny, vitg)")
