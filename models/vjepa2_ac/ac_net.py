"""The action-conditioned predictor (`VisionTransformerPredictorAC`) as a torch module, its parameters
named as in the upstream checkpoint's `predictor` state (weights.py reads the converted file).

A frame enters as one block of rows: its action token, its state token, its patch tokens (each
projected to the predictor's width). Attention is frame-block-causal: a row of frame t sees every
row of frames <= t (its own frame both ways). RoPE: patches rotate by (frame, row, col), rows and
columns scaled by grid_size / grid (1 on the trained grid); the action and state tokens by the
frame only. The patch rows leave through `predictor_norm` and `predictor_proj`; the action and
state rows are dropped.

`forward_dense` is the upstream forward over a whole sequence with the dense block-causal mask:
what the reference runs at each rollout step (recomputing the prefix), and the baseline of
bench/rollout.py. The component (ac_predictor.py) runs the same blocks over the paged KV engine,
one frame block per step.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from wgc.models.vjepa2_ac.blocks import Attend, Block, dense
from wgc.models.vjepa2_ac.config import ACTION_DIM, COND_TOKENS, ACConfig
from wgc.models.vjepa2_ac.rope import Rope3D, grid_positions


def block_causal_mask(frames: int, block: int) -> Tensor:
    """[frames * block, frames * block] bool, True where a row may attend: the key's frame <= the query's."""
    frame = torch.arange(frames * block) // block  # [L]
    return frame[None, :] <= frame[:, None]  # [L, L]


class ACPredictorNet(nn.Module):
    def __init__(self, c: ACConfig) -> None:
        super().__init__()
        self.config = c
        self.predictor_embed = nn.Linear(c.embed, c.hidden)
        self.action_encoder = nn.Linear(ACTION_DIM, c.hidden)
        self.state_encoder = nn.Linear(ACTION_DIM, c.hidden)
        self.extrinsics_encoder = nn.Linear(ACTION_DIM - 1, c.hidden)  # in the checkpoint, unused (no extrinsics)
        hidden = int(c.hidden * c.mlp_ratio)
        self.predictor_blocks = nn.ModuleList(Block(c.hidden, c.heads, hidden, c.eps, fused=True)
                                              for _ in range(c.layers))
        self.predictor_norm = nn.LayerNorm(c.hidden, eps=c.eps)
        self.predictor_proj = nn.Linear(c.hidden, c.embed)

    def frame_rows(self, z: Tensor, actions: Tensor, states: Tensor) -> Tensor:
        """z [..., T, HW, embed], actions and states [..., T, 7] -> rows [..., T * (2 + HW), hidden]."""
        a = self.action_encoder(actions.to(z.dtype)).unsqueeze(-2)  # [..., T, 1, hidden]
        s = self.state_encoder(states.to(z.dtype)).unsqueeze(-2)  # [..., T, 1, hidden]
        x = torch.cat([a, s, self.predictor_embed(z)], dim=-2)  # [..., T, 2 + HW, hidden]
        return x.flatten(-3, -2)  # [..., T * (2 + HW), hidden]

    def positions(self, first_frame: int, frames: int) -> Tensor:
        """(frame, row, col) of the rows of frames first_frame .. first_frame + frames - 1, [frames * block, 3]."""
        c = self.config
        patches = grid_positions(frames, c.grid, c.grid, first_frame).view(frames, c.tokens_per_frame, 3)
        cond = torch.zeros(frames, COND_TOKENS, 3, dtype=patches.dtype)  # [T, 2, 3]
        cond[..., 0] = torch.arange(first_frame, first_frame + frames, dtype=patches.dtype)[:, None]
        return torch.cat([cond, patches], dim=1).flatten(0, 1)  # [T * block, 3]

    def blocks(self, x: Tensor, rope: Rope3D, attend: Attend) -> Tensor:
        for i, block in enumerate(self.predictor_blocks):
            x = block(x, i, rope, attend)
        return x

    def readout(self, x: Tensor) -> Tensor:
        """rows [..., T * block, hidden] -> the patch predictions [..., T, HW, embed]."""
        c = self.config
        patches = x.unflatten(-2, (-1, c.block))[..., COND_TOKENS:, :]  # [..., T, HW, hidden]
        return self.predictor_proj(self.predictor_norm(patches))  # [..., T, HW, embed]

    def forward_dense(self, z: Tensor, actions: Tensor, states: Tensor) -> Tensor:
        """The whole sequence at once: z [B, T, HW, embed], actions, states [B, T, 7] -> [B, T, HW, embed]
        (frame t's rows predict frame t + 1)."""
        frames = z.shape[1]
        x = self.frame_rows(z, actions, states)  # [B, T * block, hidden]
        rope = Rope3D(self.positions(0, frames).to(z.device), self.config.head_dim)
        mask = block_causal_mask(frames, self.config.block).to(z.device)
        return self.readout(self.blocks(x, rope, dense(mask)))
