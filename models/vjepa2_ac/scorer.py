"""`scorer` of models/vjepa2_ac.walk: how far each candidate's last predicted frame is from the goal.

    costs(predicted [K, HW, D], goal [HW, D], metric) -> [K]
        l1      mean |p - g| over every token and dim (the planner's `l1`, the reference)
        l2      sqrt(mean (p - g)^2) over every token and dim
        cosine  1 - the mean over tokens of cos(p_t, g_t)
    best(costs [K]) -> the index of the smallest cost
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from wgc.runtime.components.base import Call, CallError, Component


def l1(p: Tensor, g: Tensor) -> Tensor:
    return (p - g).abs().mean(dim=(-2, -1))  # [K]


def l2(p: Tensor, g: Tensor) -> Tensor:
    return (p - g).pow(2).mean(dim=(-2, -1)).sqrt()  # [K]


def cosine(p: Tensor, g: Tensor) -> Tensor:
    return 1.0 - F.cosine_similarity(p, g.expand_as(p), dim=-1).mean(dim=-1)  # [K]


METRICS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"l1": l1, "l2": l2, "cosine": cosine}


class Scorer(Component):
    def costs(self, calls: list[Call]) -> list[Any]:
        out = []
        for call in calls:
            predicted, goal, metric = call.args
            if metric not in METRICS:
                raise CallError(call.request, f"{self.spec.name}: unknown metric {metric!r} (known: {', '.join(METRICS)})")
            if not (isinstance(predicted, Tensor) and isinstance(goal, Tensor) and predicted.dim() == 3
                    and tuple(goal.shape) == tuple(predicted.shape[1:])):
                shapes = [list(x.shape) if isinstance(x, Tensor) else type(x).__name__ for x in (predicted, goal)]
                raise CallError(call.request, f"{self.spec.name}: the goal {shapes[1]} must be one frame of the "
                                f"predictions {shapes[0]}")
            out.append(METRICS[metric](predicted.float(), goal.float()))
        return out

    def best(self, calls: list[Call]) -> list[Any]:
        return [int(torch.argmin(call.args[0])) for call in calls]
