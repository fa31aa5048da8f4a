"""The Qwen3-Omni thinker's decoder (`thinker.model` + `thinker.lm_head`, §2.1): Qwen3-MoE layers with
QK-norm and no biases, a sparse MoE feed-forward in every layer, interleaved M-RoPE.

One forward of packed rows returns two states per row: the final-normed hidden state (for logits)
and the talker's accept-layer state, captured in the same pass — `hidden_states[k]` of transformers
(k = accept_layer): the embeddings for k = 0, else the output of decoder layer k - 1 *before* that
layer's deepstack addition (transformers records each layer's output and adds the deepstack
features to a copy), and the final-normed state for k = layers (its recorder replaces the last).

Deepstack: the vision encoder's features from its intermediate blocks, added to the hidden state
after decoder layers 0, 1, .. at the visual rows only (`Deepstack`).

Parameter names are the checkpoint's under `thinker.`: `model.embed_tokens`, `model.layers.{i}.
{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, post_attention_layernorm,
mlp.gate, mlp.experts.{e}.{gate,up,down}_proj}`, `model.norm`, `lm_head`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor, nn
from wgc.models.layers import Embedding, LMHead, RMSNorm, RotaryEmbedding, SelfAttention, SparseMoE
from wgc.models.qwen3_omni.config import ThinkerConfig


class Attends(Protocol):
    """Attention over a step's context: a `KVStep` (paged), or a dense stand-in in tests."""

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor: ...


@dataclass(frozen=True)
class Deepstack:
    """Features added after the first decoder layers at some rows of the packed step."""

    rows: Tensor  # [V] int64: the visual rows, ascending
    features: Tensor  # [D, V, hidden]: added after decoder layer d (d < D)


class ThinkerLayer(nn.Module):
    def __init__(self, c: ThinkerConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.norm_eps)
        self.self_attn = SelfAttention(layer, c.hidden, c.heads, c.kv_heads, c.head_dim, qk_norm_eps=c.norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.norm_eps)
        self.mlp = SparseMoE(c.hidden, c.experts, c.top_k, c.moe_intermediate, norm_topk_prob=c.norm_topk_prob)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attn: Attends) -> Tensor:
        """x [N, hidden] -> [N, hidden]."""
        q, k, v = self.self_attn.qkv(self.input_layernorm(x), cos, sin)  # [N, heads, d], [N, kv_heads, d] x2
        x = x + self.self_attn.out(attn.attend(self.self_attn.layer, q, k, v))  # [N, hidden]
        return x + self.mlp(self.post_attention_layernorm(x))  # [N, hidden]


class ThinkerTextModel(nn.Module):
    """`thinker.model`."""

    def __init__(self, c: ThinkerConfig) -> None:
        super().__init__()
        self.config = c
        self.embed_tokens = Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(ThinkerLayer(c, i) for i in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.norm_eps)
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta, mrope_section=c.mrope_section)

    def forward(self, x: Tensor, positions: Tensor, attn: Attends,
                deepstack: Deepstack | None = None) -> tuple[Tensor, Tensor]:
        """x [N, hidden] input embeddings, positions [3, N] (t, h, w) -> (final-normed hidden [N, hidden],
        the accept layer's hidden [N, hidden])."""
        accept = self.config.accept_layer
        cos, sin = self.rotary(positions, x.dtype)  # each [N, head_dim]
        captured = x
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, attn)  # [N, hidden]
            if i + 1 == accept:
                captured = x  # before this layer's deepstack addition, as transformers records it
            if deepstack is not None and i < deepstack.features.shape[0]:
                x = x.index_add(0, deepstack.rows, deepstack.features[i].to(x.dtype))  # [N, hidden]
        x = self.norm(x)  # [N, hidden]
        return x, (x if accept == len(self.layers) else captured)


class ThinkerLM(nn.Module):
    """`thinker.model` and `thinker.lm_head` (untied)."""

    def __init__(self, c: ThinkerConfig) -> None:
        super().__init__()
        self.config = c
        self.model = ThinkerTextModel(c)
        self.lm_head = LMHead(c.hidden, c.vocab)

    def forward(self, x: Tensor, positions: Tensor, attn: Attends,
                deepstack: Deepstack | None = None) -> tuple[Tensor, Tensor]:
        return self.model(x, positions, attn, deepstack)  # ([N, hidden], [N, hidden])

    def embed(self, tokens: Tensor) -> Tensor:
        return self.model.embed_tokens(tokens)  # [..., hidden]

    def logits(self, hidden: Tensor) -> Tensor:
        return self.lm_head(hidden)  # [..., vocab]
