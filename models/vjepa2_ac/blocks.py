"""The pre-norm ViT block every V-JEPA 2 network is built of: LayerNorm, attention with the 3D rotary
embedding on queries and keys, a residual; LayerNorm, a GELU MLP (fc1, fc2), a residual.

The block does not know how it attends: the caller passes `attend(layer, q, k, v)`, dense
attention for the encoder and the masked predictor, the paged KV engine for the AC predictor's
rollout, a dense block-causal mask for the AC predictor recomputing a whole prefix. Two parameter
layouts, named as the checkpoints name them: `split` (transformers' `attention.{query,key,value,
proj}`) and `fused` (upstream's `attn.{qkv,proj}`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models.vjepa2_ac.config import REPS_EPS
from wgc.models.vjepa2_ac.rope import Rope3D

Attend = Callable[[int, Tensor, Tensor, Tensor], Tensor]  # (layer, q, k, v [..., N, heads, d]) -> [..., N, heads, d]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool) -> None:
        super().__init__()
        self.heads, self.fused = heads, fused
        if fused:
            self.qkv = nn.Linear(dim, 3 * dim)
        else:
            self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def qkv_of(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x [..., N, dim] -> q, k, v, each [..., N, heads, head_dim]."""
        if self.fused:
            q, k, v = self.qkv(x).unflatten(-1, (3, self.heads, -1)).unbind(-3)  # each [..., N, heads, d]
            return q, k, v
        return tuple(lin(x).unflatten(-1, (self.heads, -1)) for lin in (self.query, self.key, self.value))  # type: ignore[return-value]


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))  # [..., dim]


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_hidden: int, eps: float, fused: bool) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn_name = "attn" if fused else "attention"
        self.add_module(self.attn_name, Attention(dim, heads, fused))
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = MLP(dim, mlp_hidden)

    def forward(self, x: Tensor, layer: int, rope: Rope3D, attend: Attend) -> Tensor:
        """x [..., N, dim] -> [..., N, dim]."""
        attn: Attention = getattr(self, self.attn_name)
        q, k, v = attn.qkv_of(self.norm1(x))  # each [..., N, heads, d]
        out = attend(layer, rope(q), rope(k), v)  # [..., N, heads, d]
        x = x + attn.proj(out.flatten(-2))  # [..., N, dim]
        return x + self.mlp(self.norm2(x))  # [..., N, dim]


def dense(mask: Tensor | None = None) -> Attend:
    """Attention without a cache over [..., N, heads, d]; `mask` [N, N] bool (True: attend) or none."""
    def attend(_: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out = F.scaled_dot_product_attention(q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2),
                                             attn_mask=mask)  # [..., heads, N, d]
        return out.transpose(-3, -2)  # [..., N, heads, d]

    return attend


def normalize_reps(x: Tensor) -> Tensor:
    """LayerNorm without affine over the last axis, eps 1e-5: the world-model wrapper's normalize_reps,
    applied to every encoded frame and every prediction before it is fed back or scored."""
    return F.layer_norm(x, (x.shape[-1],), eps=REPS_EPS)
