"""The dtype a component computes in: the one its `.walk` declaration names (`dtype = bf16`) on CUDA,
float32 elsewhere (bf16 matmuls are slow on CPU, and the tiny presets' tests compare in float32).
Written once for every family; a family that needs another rule (a tiny preset in float64) applies
it on top."""

from __future__ import annotations

import torch

from wgc.plan.model import ComponentSpec

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def declared_dtype(spec: ComponentSpec) -> torch.dtype:
    """The dtype the walk declares for the component (bf16 when it names none or one not known)."""
    return DTYPES.get(str(spec.attrs.get("dtype", "bf16")), torch.bfloat16)


def compute_dtype(spec: ComponentSpec, device: torch.device) -> torch.dtype:
    """The declared dtype on CUDA, float32 on any other device."""
    return declared_dtype(spec) if device.type == "cuda" else torch.float32
