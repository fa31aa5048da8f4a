"""Shared by the V-JEPA 2-AC tests: component specs, tiny components with livelier random weights
(so that a wrong position, mask or cache shows in the outputs), inputs."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from wgc.models.vjepa2_ac import ActionConditionedPredictor
from wgc.runtime.components.base import Call

from wgc.plan.model import ComponentSpec


def spec(name: str = "ac_predictor", cls: str = "ActionConditionedPredictor", engine: str = "kv",
         page_size: int = 16, kv_memory: int = 8 << 20) -> ComponentSpec:
    return ComponentSpec(name, f"wgc.models.vjepa2_ac.{cls}", engine, [], {}, [], {"dtype": "bf16"}, [0], 1,
                         {"page_size": page_size, "max_batch": 16, "kv_memory": kv_memory})


def lively(module: nn.Module, seed: int, std: float = 0.15) -> None:
    """Larger random weights than the preset's (norms near 1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(1.0 + 0.1 * noise if "norm" in name else std * noise)


def tiny_ac(seed: int = 0, **settings: Any) -> ActionConditionedPredictor:
    ac = ActionConditionedPredictor(spec(**settings), 0, "cpu", preset="tiny")
    lively(ac.net, seed)
    return ac


def randn(*shape: int, seed: int) -> Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def frame(ac: ActionConditionedPredictor, seed: int) -> Tensor:
    """A layer-normed latent frame [HW, D], as the encoder's `frames` gives."""
    c = ac.config
    return torch.nn.functional.layer_norm(randn(c.tokens_per_frame, c.embed, seed=seed), (c.embed,))


def call(request: int, *args: Any, label: str = "") -> Call:
    return Call(request, label, args)
