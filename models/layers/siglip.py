"""SigLIP's vision encoder layers, shared by BAGEL's NaViT ViT and PaliGemma's (π0.5) vision tower:
pre-norm layers with LayerNorm, bidirectional multi-head attention with biases, and a gelu-tanh MLP.
Parameter names are transformers' (`layer_norm1`, `self_attn.{q,k,v,out}_proj`, `layer_norm2`,
`mlp.fc1/fc2`), so both families' checkpoints load by name.

Images are packed: x [T, hidden] holds the tokens of several images side by side, and `groups`
lists runs of same-size images as (images, tokens per image); attention runs once per run as a
dense [images, tokens] batch, so it never crosses images and needs no mask.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.runtime.engines.attention import dense_attention

Groups = list[tuple[int, int]]  # per run of same-size images in the pack: (images, tokens per image)


class SiglipDims(Protocol):
    """The sizes the encoder reads from a family's config."""

    @property
    def hidden(self) -> int: ...
    @property
    def layers(self) -> int: ...
    @property
    def heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def intermediate(self) -> int: ...
    @property
    def eps(self) -> float: ...


class GeluMLP(nn.Module):
    """fc1 -> gelu-tanh -> fc2: SigLIP's MLP and BAGEL's connector alike."""

    def __init__(self, dim_in: int, dim_mid: int, dim_out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim_in, dim_mid)
        self.fc2 = nn.Linear(dim_mid, dim_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))  # [..., dim_out]


class SiglipAttention(nn.Module):
    def __init__(self, c: SiglipDims) -> None:
        super().__init__()
        self.heads, self.head_dim = c.heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden, c.hidden)
        self.k_proj = nn.Linear(c.hidden, c.hidden)
        self.v_proj = nn.Linear(c.hidden, c.hidden)
        self.out_proj = nn.Linear(c.hidden, c.hidden)

    def forward(self, x: Tensor, groups: Groups) -> Tensor:
        """x [T, hidden], the pack; each group's images attend within themselves only."""
        shape = (-1, self.heads, self.head_dim)
        q, k, v = self.q_proj(x).view(shape), self.k_proj(x).view(shape), self.v_proj(x).view(shape)  # [T, H, d]
        outs, start = [], 0
        for images, tokens in groups:
            end = start + images * tokens
            batch = [t[start:end].view(images, tokens, self.heads, self.head_dim) for t in (q, k, v)]  # [B, n, H, d]
            outs.append(dense_attention(*batch, mode="prefix").reshape(images * tokens, -1))  # [B*n, hidden]
            start = end
        return self.out_proj(torch.cat(outs) if len(outs) > 1 else outs[0])  # [T, hidden]


class SiglipEncoderLayer(nn.Module):
    def __init__(self, c: SiglipDims) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(c.hidden, eps=c.eps)
        self.self_attn = SiglipAttention(c)
        self.layer_norm2 = nn.LayerNorm(c.hidden, eps=c.eps)
        self.mlp = GeluMLP(c.hidden, c.intermediate, c.hidden)

    def forward(self, x: Tensor, groups: Groups) -> Tensor:
        x = x + self.self_attn(self.layer_norm1(x), groups)  # [T, hidden]
        return x + self.mlp(self.layer_norm2(x))  # [T, hidden]


class SiglipEncoder(nn.Module):
    def __init__(self, c: SiglipDims) -> None:
        super().__init__()
        self.layers = nn.ModuleList(SiglipEncoderLayer(c) for _ in range(c.layers))

    def forward(self, x: Tensor, groups: Groups) -> Tensor:
        for layer in self.layers:
            x = layer(x, groups)  # [T, hidden]
        return x
