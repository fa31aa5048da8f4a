"""The V-JEPA 2 ViT encoder and its masked predictor as torch modules, their parameters named as in a
Hugging Face `VJEPA2Model` checkpoint under `encoder.` and `predictor.` (weights.py reads them).

Encoder: a Conv3d tubelet embedding (tubelet x patch x patch, stride the same), 3D RoPE on every
layer (no absolute positions), a final LayerNorm. A clip shorter than one tubelet is repeated to
fill it (a single frame becomes two identical ones), as transformers and upstream do.

Masked predictor, with transformers' default masks (every encoder token is context, every
position is a target): the context projected to the predictor's width, one mask token per
position after it (mask token 1 % count, transformers' `mask_index`), both at the same
positions; the layers, the LayerNorm, the target rows projected back to the encoder's width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from wgc.models.vjepa2_ac.blocks import Block, dense
from wgc.models.vjepa2_ac.config import VitConfig
from wgc.models.vjepa2_ac.rope import Rope3D, grid_positions


class PatchEmbeddings(nn.Module):
    def __init__(self, c: VitConfig) -> None:
        super().__init__()
        self.proj = nn.Conv3d(3, c.hidden, (c.tubelet, c.patch, c.patch), stride=(c.tubelet, c.patch, c.patch))


class Embeddings(nn.Module):
    def __init__(self, c: VitConfig) -> None:
        super().__init__()
        self.patch_embeddings = PatchEmbeddings(c)


class VitEncoder(nn.Module):
    def __init__(self, c: VitConfig) -> None:
        super().__init__()
        self.config = c
        self.embeddings = Embeddings(c)
        hidden = int(c.hidden * c.mlp_ratio)
        self.layer = nn.ModuleList(Block(c.hidden, c.heads, hidden, c.eps, fused=False) for _ in range(c.layers))
        self.layernorm = nn.LayerNorm(c.hidden, eps=c.eps)

    def forward(self, pixels: Tensor) -> Tensor:
        """pixels [B, T, 3, H, W] (normalised) -> tokens [B, T / tubelet * H/p * W/p, hidden]."""
        c = self.config
        x = pixels.transpose(1, 2)  # [B, 3, T, H, W]
        if x.shape[2] < c.tubelet:
            x = x.repeat(1, 1, c.tubelet, 1, 1)  # [B, 3, tubelet, H, W]
        x = self.embeddings.patch_embeddings.proj(x.to(self.layernorm.weight.dtype))  # [B, hidden, t, h, w]
        t, h, w = x.shape[2:]
        x = x.flatten(2).transpose(1, 2)  # [B, t*h*w, hidden]
        rope = Rope3D(grid_positions(t, h, w).to(x.device), c.hidden // c.heads)
        attend = dense()
        for i, block in enumerate(self.layer):
            x = block(x, i, rope, attend)
        return self.layernorm(x)  # [B, N, hidden]


class PredictorEmbeddings(nn.Module):
    def __init__(self, c: VitConfig) -> None:
        super().__init__()
        self.predictor_embeddings = nn.Linear(c.hidden, c.pred_hidden)
        self.mask_tokens = nn.Parameter(torch.zeros(c.pred_mask_tokens, 1, 1, c.pred_hidden))


class VitPredictor(nn.Module):
    def __init__(self, c: VitConfig) -> None:
        super().__init__()
        self.config = c
        self.embeddings = PredictorEmbeddings(c)
        hidden = int(c.pred_hidden * c.pred_mlp_ratio)
        self.layer = nn.ModuleList(Block(c.pred_hidden, c.pred_heads, hidden, c.eps, fused=False)
                                   for _ in range(c.pred_layers))
        self.layernorm = nn.LayerNorm(c.pred_hidden, eps=c.eps)
        self.proj = nn.Linear(c.pred_hidden, c.hidden)

    def forward(self, z: Tensor) -> Tensor:
        """z [B, N, hidden] (encoder tokens in raster order) -> the predicted tokens [B, N, hidden]."""
        c = self.config
        batch, n, _ = z.shape
        frames = max(1, n // c.tokens_per_frame)
        context = self.embeddings.predictor_embeddings(z)  # [B, N, pred]
        token = self.embeddings.mask_tokens[1 % c.pred_mask_tokens].reshape(1, 1, -1)  # [1, 1, pred]
        x = torch.cat([context, token.expand(batch, n, -1)], dim=1)  # [B, 2N, pred]
        pos = grid_positions(frames, c.grid, c.grid)[:n].to(z.device)  # [N, 3]
        rope = Rope3D(torch.cat([pos, pos]), c.pred_hidden // c.pred_heads)
        attend = dense()
        for i, block in enumerate(self.layer):
            x = block(x, i, rope, attend)
        return self.proj(self.layernorm(x)[:, n:])  # [B, N, hidden]
