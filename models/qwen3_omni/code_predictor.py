"""The talker's code predictor (`talker.code_predictor`, models-wave2.md §2.2): a small dense decoder
that fills codebooks 1..15 of a codec frame from the talker's last hidden state and codebook 0.

Per frame it sees `[talker hidden, codec_embedding(c0)]` (2 positions), and each of its 15 steps j
reads `lm_head[j]` at the last position and, but for the last, feeds its code back through its own
table `codec_embedding[j]` (transformers' `generation_steps`). Its cache lives only for one frame
(at most 16 positions), so it is dense and per call of `generate`: every row of the batch (one per
request) advances through the 15 positions together, one forward per position for the whole batch
instead of a nested `generate` per frame. The component picks each step's codes (`Pick`), so this
module does no sampling.

Parameter names are the checkpoint's under `talker.code_predictor.`: `model.layers.{i}.*`,
`model.norm`, `model.codec_embedding.{j}`, `lm_head.{j}`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models.layers import Embedding, LMHead, RMSNorm, RotaryEmbedding, SelfAttention, SwiGLU
from wgc.models.qwen3_omni.talker_config import CodePredictorConfig

Pick = Callable[[int, Tensor], Tensor]  # (step j, logits [B, vocab]) -> codes [B] of codebook j + 1


class FrameCache:
    """K/V of one frame's positions for a batch of rows that all advance together: [B, T, kvh, d] a layer."""

    def __init__(self, layers: int, batch: int, length: int, kv_heads: int, head_dim: int, like: Tensor) -> None:
        shape = (layers, batch, length, kv_heads, head_dim)
        self.k = like.new_empty(shape)
        self.v = like.new_empty(shape)
        self.filled = 0  # positions written by the finished forwards

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [B, n, heads, d], k, v [B, n, kvh, d] of the next n positions -> [B, n, heads, d]."""
        start, n = self.filled, q.shape[1]
        if n > 1 and start:
            raise ValueError("a frame cache takes several positions only as its first forward")
        self.k[layer, :, start:start + n] = k
        self.v[layer, :, start:start + n] = v
        keys, values = self.k[layer, :, :start + n], self.v[layer, :, :start + n]  # [B, T, kvh, d]
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
                                             is_causal=n > 1, enable_gqa=q.shape[2] != k.shape[2])  # [B, heads, n, d]
        return out.transpose(1, 2)  # [B, n, heads, d]


class PredictorLayer(nn.Module):
    def __init__(self, c: CodePredictorConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.norm_eps)
        self.self_attn = SelfAttention(layer, c.hidden, c.heads, c.kv_heads, c.head_dim, qk_norm_eps=c.norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.norm_eps)
        self.mlp = SwiGLU(c.hidden, c.intermediate)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: FrameCache) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)  # type: ignore[arg-type]  # [B, n, hidden]
        return x + self.mlp(self.post_attention_layernorm(x))  # [B, n, hidden]


class PredictorModel(nn.Module):
    """`talker.code_predictor.model`: the layers, the final norm and the 15 codec tables."""

    def __init__(self, c: CodePredictorConfig) -> None:
        super().__init__()
        self.config = c
        self.layers = nn.ModuleList(PredictorLayer(c, i) for i in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.norm_eps)
        self.codec_embedding = nn.ModuleList(Embedding(c.vocab, c.hidden) for _ in range(c.groups - 1))
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta)

    def forward(self, x: Tensor, cache: FrameCache) -> Tensor:
        """x [B, n, hidden], the next n positions of every row -> final-normed hidden [B, n, hidden]."""
        positions = torch.arange(cache.filled, cache.filled + x.shape[1], device=x.device)  # [n], shared by the rows
        cos, sin = self.rotary(positions, x.dtype)  # each [n, head_dim]
        for layer in self.layers:
            x = layer(x, cos, sin, cache)
        cache.filled += x.shape[1]
        return self.norm(x)  # [B, n, hidden]


class CodePredictor(nn.Module):
    """`talker.code_predictor`: the decoder and its 15 heads."""

    def __init__(self, c: CodePredictorConfig) -> None:
        super().__init__()
        self.config = c
        self.model = PredictorModel(c)
        self.lm_head = nn.ModuleList(LMHead(c.hidden, c.vocab) for _ in range(c.groups - 1))

    def generate(self, hidden: Tensor, first: Tensor, pick: Pick) -> Tensor:
        """hidden [B, hidden] (the talker's final-normed state at the frame), first [B, hidden] (codebook
        0 through the talker's codec_embedding) -> codes of codebooks 1..15 [B, 15] int64."""
        c = self.config
        steps = c.groups - 1
        cache = FrameCache(c.layers, hidden.shape[0], steps + 1, c.kv_heads, c.head_dim, hidden)
        x = torch.stack([hidden, first], dim=1)  # [B, 2, hidden]
        codes = []
        for j in range(steps):
            h = self.model(x, cache)[:, -1]  # [B, hidden]
            code = pick(j, self.lm_head[j](h))  # [B]
            codes.append(code)
            if j + 1 < steps:
                x = self.model.codec_embedding[j](code)[:, None]  # [B, 1, hidden]
        return torch.stack(codes, dim=1)  # [B, 15]

    def embed(self, codes: Tensor) -> Tensor:
        """codes [B, 15] of codebooks 1..15 -> the sum of their embeddings [B, hidden] (the next talker input's share)."""
        tables = self.model.codec_embedding
        return torch.stack([tables[j](codes[:, j]) for j in range(len(tables))]).sum(0)  # [B, hidden]
