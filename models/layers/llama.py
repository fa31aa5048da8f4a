"""A Llama decoder (Llama-3 family) from the shared layers; parameter names follow Hugging Face's.
With the config's Gemma options (LlamaConfig.gemma) the same classes are a Gemma decoder.

forward(tokens, positions, kv) runs either over the paged KV engine (kv: a KVStep; tokens and
positions packed [N], the step's new tokens of every sequence) or, with kv None, densely over whole
sequences (tokens, positions [B, T]), recomputing the full prefix with a causal mask.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn
from wgc.models.layers.attention import SelfAttention
from wgc.models.layers.config import LlamaConfig
from wgc.models.layers.embedding import Embedding, LMHead
from wgc.models.layers.mlp import SwiGLU
from wgc.models.layers.norm import RMSNorm
from wgc.models.layers.rope import RotaryEmbedding
from wgc.runtime.engines.attention import KVStep
from wgc.runtime.engines.prompt_rows import narrowed


class LlamaBlock(nn.Module):
    def __init__(self, config: LlamaConfig, layer: int) -> None:
        super().__init__()
        c = config
        self.input_layernorm = RMSNorm(c.hidden, c.norm_eps, c.norm_unit_offset)
        self.self_attn = SelfAttention(layer, c.hidden, c.heads, c.kv_heads, c.head_dim)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.norm_eps, c.norm_unit_offset)
        self.mlp = SwiGLU(c.hidden, c.intermediate, activation=c.activation)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, kv: KVStep | None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv)  # [..., hidden]
        return x + self.mlp(self.post_attention_layernorm(x))  # [..., hidden]

    def forward_at(self, x: Tensor, cos: Tensor, sin: Tensor, kv: KVStep | None, rows: Tensor) -> Tensor:
        """`forward`'s output at token rows `rows` [R] alone (x [..., N, hidden] -> [..., R, hidden]):
        every row's keys and values are written and attended as in `forward`, and the rest (the output
        projection, the MLP) runs on `rows` only, each with the kernels and so the bits it has there
        (prompt_rows.narrowed)."""
        attended = self.self_attn.attend(self.input_layernorm(x), cos, sin, kv)  # [..., N, heads, head_dim]
        attended = attended.index_select(attended.dim() - 3, rows)  # [..., R, heads, head_dim]
        x = x.index_select(x.dim() - 2, rows)  # [..., R, hidden]
        with narrowed(rows):
            x = x + self.self_attn.out(attended)  # [..., R, hidden]
            return x + self.mlp(self.post_attention_layernorm(x))  # [..., R, hidden]


class LlamaModel(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab, config.hidden, config.hidden**0.5 if config.embed_scale else None)
        self.layers = nn.ModuleList(LlamaBlock(config, i) for i in range(config.layers))
        self.norm = RMSNorm(config.hidden, config.norm_eps, config.norm_unit_offset)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling)
        self.lm_head = LMHead(config.hidden, config.vocab, self.embed_tokens if config.tie_embeddings else None)

    def forward(self, tokens: Tensor, positions: Tensor, kv: KVStep | None = None,
                logits_at: Tensor | None = None) -> Tensor:
        """tokens, positions: [N] (paged) or [B, T] (dense) -> logits [..., vocab].

        logits_at: indices along the token axis (paged: rows of N; dense: positions of T) to project,
        e.g. each sequence's last token; None projects every token.
        """
        x = self.hidden_states(self.embed_tokens(tokens), positions, kv, logits_at)  # [..., hidden]
        return self.lm_head(self.norm(x))  # [..., vocab]

    def hidden_states(self, x: Tensor, positions: Tensor, kv: KVStep | None = None, at: Tensor | None = None
                      ) -> Tensor:
        """Embedded inputs x [..., hidden] (tokens, or rows a family made: image features) through every
        layer, before the final norm -> [..., hidden]; with `at` (indices along the token axis) only
        those rows' [..., len(at), hidden], the last layer past its attention run on them alone: the
        other rows of a prompt need only their keys and values there (bench/last_layer_rows.py)."""
        cos, sin = self.rotary(positions, x.dtype)  # each [..., head_dim]
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # each [..., 1, head_dim]: the heads axis once a step
        layers = self._modules["layers"]
        last = len(layers) - 1 if at is not None else len(layers)
        for i, layer in enumerate(layers):
            x = layer(x, cos, sin, kv) if i < last else layer.forward_at(x, cos, sin, kv, at)  # [..., hidden]
        return x


def load_hf_state_dict(model: LlamaModel, state: Mapping[str, Tensor]) -> None:
    """Load a Hugging Face LlamaForCausalLM state dict (names `model.*` and `lm_head.weight`)."""
    ours = {name.removeprefix("model."): tensor for name, tensor in state.items()}
    if model.config.tie_embeddings:
        ours.setdefault("lm_head.weight", ours["embed_tokens.weight"])
    with torch.no_grad():
        model.load_state_dict(ours, strict=True)
