"""A plain dense V-JEPA 2-AC predictor written from upstream's description (src/models/ac_predictor.py,
src/models/utils/modules.py), independent of models/vjepa2_ac: the whole sequence every call, the
block-causal mask built loop by loop for `max_frames` and sliced, the action and state tokens
pulled out of the sequence, projected and rotated on their own (by the frame index only) and merged
back, the patch positions split out of a flat token index. It reads the component's parameters by
name (the checkpoint's names are the same)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def loop_mask(frames: int, grid: int, cond: int = 2) -> Tensor:
    """build_action_block_causal_attention_mask: frame t1's rows see frame t2's when t2 <= t1."""
    n = cond + grid * grid
    mask = torch.zeros(frames * n, frames * n, dtype=torch.bool)
    for t1 in range(frames):
        for t2 in range(0, t1 + 1):
            mask[t1 * n:(t1 + 1) * n, t2 * n:(t2 + 1) * n] = True
    return mask


def rotate(x: Tensor, pos: Tensor) -> Tensor:
    """rotate_queries_or_keys: x [B, heads, N, D], pos [N]; the tables tiled with `repeat`."""
    d = x.shape[-1]
    omega = torch.arange(d // 2, dtype=x.dtype) / (d / 2.0)
    omega = 1.0 / 10000**omega
    freq = pos.to(x.dtype)[:, None] * omega[None]  # [N, D/2]
    sin, cos = freq.sin().repeat(1, 2), freq.cos().repeat(1, 2)  # [N, D]
    y = x.unflatten(-1, (-1, 2))
    y = torch.stack((-y[..., 1], y[..., 0]), dim=-1).flatten(-2)
    return x * cos + y * sin


class Reference:
    def __init__(self, net: nn.Module, max_frames: int = 32) -> None:
        self.p = dict(net.named_parameters())
        c = net.config
        self.grid, self.heads, self.layers = c.grid, c.heads, c.layers
        self.part = 2 * ((c.hidden // c.heads // 3) // 2)
        self.mask = loop_mask(max_frames, c.grid)

    def lin(self, name: str, x: Tensor) -> Tensor:
        return F.linear(x, self.p[name + ".weight"], self.p[name + ".bias"])

    def norm(self, name: str, x: Tensor) -> Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.p[name + ".weight"], self.p[name + ".bias"], 1e-6)

    def attention(self, i: int, x: Tensor, frames: int) -> Tensor:
        b, n, dim = x.shape
        hw, h, p = self.grid * self.grid, self.heads, self.part
        name = f"predictor_blocks.{i}.attn"
        x = x.view(b, frames, 2 + hw, dim)
        cond = [self.lin(name + ".qkv", x[:, :, j]).unflatten(-1, (3, h, -1)).permute(2, 0, 3, 1, 4) for j in range(2)]
        ids = torch.arange(frames * hw)
        d_pos, h_pos, w_pos = ids // hw, (ids % hw) // self.grid, (ids % hw) % self.grid
        qkv = self.lin(name + ".qkv", x[:, :, 2:].flatten(1, 2)).unflatten(-1, (3, h, -1)).permute(2, 0, 3, 1, 4)

        def patches(t: Tensor) -> Tensor:
            parts = [rotate(t[..., k * p:(k + 1) * p], pos) for k, pos in enumerate((d_pos, h_pos, w_pos))]
            return torch.cat([*parts, t[..., 3 * p:]], dim=-1)

        def conds(t: Tensor) -> Tensor:
            return torch.cat([rotate(t[..., :p], torch.arange(frames)), t[..., p:]], dim=-1)

        def merge(tx: Tensor, ta: list[Tensor]) -> Tensor:
            tx = tx.view(b, h, frames, hw, -1)
            ta_ = torch.stack(ta, dim=3)  # [B, heads, T, 2, d]
            return torch.cat([ta_, tx], dim=3).flatten(2, 3)

        q = merge(patches(qkv[0]), [conds(c[0]) for c in cond])
        k = merge(patches(qkv[1]), [conds(c[1]) for c in cond])
        v = merge(qkv[2], [c[2] for c in cond])
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:n, :n])
        return self.lin(name + ".proj", out.transpose(1, 2).reshape(b, n, dim))

    @torch.no_grad()
    def __call__(self, z: Tensor, actions: Tensor, states: Tensor) -> Tensor:
        """z [B, T*HW, embed], actions, states [B, T, 7] -> [B, T*HW, embed], as upstream's forward."""
        b, t = actions.shape[:2]
        hw = self.grid * self.grid
        x = self.lin("predictor_embed", z).view(b, t, hw, -1)
        a = self.lin("action_encoder", actions)[:, :, None]
        s = self.lin("state_encoder", states)[:, :, None]
        x = torch.cat([a, s, x], dim=2).flatten(1, 2)
        for i in range(self.layers):
            x = x + self.attention(i, self.norm(f"predictor_blocks.{i}.norm1", x), t)
            y = self.norm(f"predictor_blocks.{i}.norm2", x)
            x = x + self.lin(f"predictor_blocks.{i}.mlp.fc2", F.gelu(self.lin(f"predictor_blocks.{i}.mlp.fc1", y)))
        x = x.view(b, t, 2 + hw, -1)[:, :, 2:].flatten(1, 2)
        return self.lin("predictor_proj", self.norm("predictor_norm", x))


def recompute_rollout(ref: Reference, z0: Tensor, actions: Tensor, states: Tensor) -> list[Tensor]:
    """The reference rollout: step t runs the whole sequence (frames 0..t) and keeps the last frame,
    layer-normed (eps 1e-5, no affine) and appended: [HW, embed] per step."""
    hw = z0.shape[0]
    frames, out = [z0], []
    for t in range(actions.shape[0]):
        pred = ref(torch.cat(frames)[None], actions[None, :t + 1], states[None, :t + 1])[0, -hw:]
        pred = F.layer_norm(pred, (pred.shape[-1],))
        frames.append(pred)
        out.append(pred)
    return out
