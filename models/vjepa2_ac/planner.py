"""`planner` of models/vjepa2_ac.walk: the cross-entropy method of V-JEPA 2-AC's planner
(`mpc_utils.cem`, models-wave2.md §3.4), one step per entry so that the walk runs the iterations.

A sampling distribution is `dist` [2, H, 7]: the mean and the std of each step's action. Actions
move the position (3) and the gripper (1); their rotation (3) stays 0.
    init(horizon, maxnorm) -> dist        mean 0; std maxnorm for xyz, 1 for the gripper
    sample(dist, i, samples, maxnorm, seed) -> [K, H, 7]
        K = samples draws of N(mean, std), xyz clipped to +-maxnorm, the gripper to +-0.75;
        seeded per request and iteration (seed -1 derives one from the request)
    update(dist, actions, costs, topk, momentum_mean, momentum_std, momentum_mean_gripper,
           momentum_std_gripper) -> dist
        the top-k (smallest cost) actions' mean and std (unbiased) mixed with the old ones:
        new = top * (1 - momentum) + old * momentum, xyz and gripper with their own momenta
    trajectory(dist) -> [1, H, 7]         the mean, gripper values under 0.25 in magnitude set to 0
    poses(state [7], actions [K, H, 7]) -> [K, H, 7]   each step's state (poses.py)
"""

from __future__ import annotations

import zlib
from typing import Any

import torch
from torch import Tensor
from wgc.models.vjepa2_ac.config import ACTION_DIM
from wgc.models.vjepa2_ac.poses import rollout_states
from wgc.runtime.components.base import Call, CallError, Component

XYZ, GRIPPER = slice(0, 3), slice(6, 7)
GRIPPER_CLIP = 0.75
GRIPPER_ROUND = 0.25


def initial(horizon: int, maxnorm: float) -> Tensor:
    dist = torch.zeros(2, horizon, ACTION_DIM)
    dist[1, :, XYZ] = maxnorm
    dist[1, :, GRIPPER] = 1.0
    return dist  # [2, H, 7]


def draw(dist: Tensor, samples: int, maxnorm: float, generator: torch.Generator) -> Tensor:
    mean, std = dist[0], dist[1]  # each [H, 7]
    noise = torch.randn((samples, *mean.shape), generator=generator, dtype=torch.float32)
    a = noise * std + mean  # [K, H, 7]
    a[..., XYZ] = a[..., XYZ].clamp(-maxnorm, maxnorm)
    a[..., GRIPPER] = a[..., GRIPPER].clamp(-GRIPPER_CLIP, GRIPPER_CLIP)
    a[..., 3:6] = 0.0
    return a


def refit(dist: Tensor, actions: Tensor, costs: Tensor, topk: int, momenta: tuple[float, float, float, float]) -> Tensor:
    """The CEM update from the top-k candidates (see the module docstring)."""
    mm, ms, mmg, msg = momenta
    top = actions[torch.topk(costs, topk, largest=False).indices]  # [k, H, 7]
    mean, std = top.mean(0), (top.std(0) if topk > 1 else torch.zeros_like(top[0]))  # each [H, 7]
    out = torch.zeros_like(dist)
    out[0, :, XYZ] = mean[:, XYZ] * (1 - mm) + dist[0, :, XYZ] * mm
    out[0, :, GRIPPER] = mean[:, GRIPPER] * (1 - mmg) + dist[0, :, GRIPPER] * mmg
    out[1, :, XYZ] = std[:, XYZ] * (1 - ms) + dist[1, :, XYZ] * ms
    out[1, :, GRIPPER] = std[:, GRIPPER] * (1 - msg) + dist[1, :, GRIPPER] * msg
    return out


def final(dist: Tensor) -> Tensor:
    out = torch.zeros_like(dist[0])  # [H, 7]
    out[:, XYZ] = dist[0, :, XYZ]
    g = dist[0, :, GRIPPER]
    out[:, GRIPPER] = torch.where(g.abs() < GRIPPER_ROUND, torch.zeros_like(g), g)
    return out[None]  # [1, H, 7]


def seed_of(request: int, seed: int, iteration: int) -> int:
    base = seed if seed >= 0 else zlib.crc32(f"vjepa2_ac/{request}".encode())
    return (base * 0x9E3779B97F4A7C15 + iteration * 0x100000001B3) % 2**63


class Planner(Component):
    def init(self, calls: list[Call]) -> list[Any]:
        return [initial(int(c.args[0]), float(c.args[1])) for c in calls]

    def sample(self, calls: list[Call]) -> list[Any]:
        out = []
        for c in calls:
            dist, i, samples, maxnorm, seed = c.args
            gen = torch.Generator().manual_seed(seed_of(c.request, int(seed), int(i)))
            out.append(draw(dist.float(), int(samples), float(maxnorm), gen))
        return out

    def update(self, calls: list[Call]) -> list[Any]:
        out = []
        for c in calls:
            dist, actions, costs, topk, *momenta = c.args
            if not 1 <= int(topk) <= actions.shape[0]:
                raise CallError(c.request, f"{self.spec.name}: topk {int(topk)} must be between 1 and the "
                                f"{actions.shape[0]} samples")
            out.append(refit(dist.float(), actions.float(), costs.float(), int(topk),
                             tuple(float(m) for m in momenta)))  # type: ignore[arg-type]
        return out

    def trajectory(self, calls: list[Call]) -> list[Any]:
        return [final(c.args[0].float()) for c in calls]

    def poses(self, calls: list[Call]) -> list[Any]:
        out = []
        for c in calls:
            state, actions = c.args
            if not isinstance(state, Tensor) or list(state.shape) != [ACTION_DIM]:
                shape = list(state.shape) if isinstance(state, Tensor) else type(state).__name__
                raise CallError(c.request, f"{self.spec.name}: `state` must be a tensor [{ACTION_DIM}], found {shape}")
            out.append(rollout_states(state.float(), actions.float()))
        return out
