"""The pose a robot reaches after an action, as the V-JEPA 2-AC planner computes the next state
(`mpc_utils.compute_new_pose`): position adds, the rotation composes (the action's rotation matrix
times the pose's, both from extrinsic x-y-z Euler angles, back to Euler angles with the pitch in
[-pi/2, pi/2], as scipy's `Rotation.as_euler("xyz")`), the gripper adds and is clipped to [0, 1].

A pose and an action are [..., 7]: (x, y, z, roll, pitch, yaw, gripper). Computed in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor


def euler_to_matrix(angles: Tensor) -> Tensor:
    """[..., 3] extrinsic x-y-z angles -> [..., 3, 3] = Rz(yaw) Ry(pitch) Rx(roll)."""
    (ca, cb, cg), (sa, sb, sg) = angles.cos().unbind(-1), angles.sin().unbind(-1)
    rows = [
        torch.stack([cb * cg, sa * sb * cg - ca * sg, ca * sb * cg + sa * sg], -1),
        torch.stack([cb * sg, sa * sb * sg + ca * cg, ca * sb * sg - sa * cg], -1),
        torch.stack([-sb, sa * cb, ca * cb], -1),
    ]
    return torch.stack(rows, -2)  # [..., 3, 3]


def matrix_to_euler(m: Tensor) -> Tensor:
    """[..., 3, 3] -> [..., 3] extrinsic x-y-z angles (pitch in [-pi/2, pi/2])."""
    pitch = -torch.asin(m[..., 2, 0].clamp(-1.0, 1.0))
    roll = torch.atan2(m[..., 2, 1], m[..., 2, 2])
    yaw = torch.atan2(m[..., 1, 0], m[..., 0, 0])
    return torch.stack([roll, pitch, yaw], -1)


def next_pose(pose: Tensor, action: Tensor) -> Tensor:
    """[..., 7] pose after [..., 7] action."""
    p, a = pose.double(), action.double()
    rotation = euler_to_matrix(a[..., 3:6]) @ euler_to_matrix(p[..., 3:6])  # [..., 3, 3]
    gripper = (p[..., 6:] + a[..., 6:]).clamp(0.0, 1.0)
    return torch.cat([p[..., :3] + a[..., :3], matrix_to_euler(rotation), gripper], -1).to(pose.dtype)


def rollout_states(state: Tensor, actions: Tensor) -> Tensor:
    """The state at each step of each candidate: state [7], actions [K, H, 7] -> [K, H, 7], row 0 the
    given state, row h + 1 the pose after action h."""
    current = state.to(actions.dtype).expand(actions.shape[0], -1)  # [K, 7]
    out = [current]
    for h in range(actions.shape[1] - 1):
        current = next_pose(current, actions[:, h])
        out.append(current)
    return torch.stack(out, 1)  # [K, H, 7]
