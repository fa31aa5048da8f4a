"""The talker's modules (`talker.*` of the checkpoint, models-wave2.md §2.1): a 20-layer MoE decoder
over summed codec and text embeddings, the two thinker-side projections, the codec head, and the
code predictor.

Decoder layer: RMSNorm -> attention (QK-norm, no biases) -> residual -> RMSNorm -> sparse MoE (top-6
of 128 SwiGLU experts, renormalised, plus a shared expert behind a sigmoid gate: layers/moe.py) ->
residual; a final RMSNorm. Its rotary embedding is interleaved M-RoPE (the shared `RotaryEmbedding`
with the checkpoint's `mrope_section`): positions are (t, h, w) per row, equal for text and for
every decode step, the thinker's grid at image and video rows.

Projections (`Qwen3OmniMoeTalkerResizeMLP`: Linear with bias -> SiLU -> Linear with bias, thinker
width -> talker width): `text_projection` of a thinker *input embedding* (text positions, the
assistant header, the tts markers), `hidden_projection` of the thinker's accept-layer hidden state
(audio, image and video positions of a user turn).

`thinker_rows` holds the thinker input embeddings of the seven ids the talker writes itself
(`ThinkerIds.rows()`, in the order of the `ROW_*` indices). They are the thinker's, not the
talker's: a non-persistent buffer, filled with `load_thinker_rows` from the thinker's
`embed_tokens` weight (the checkpoint's `thinker.model.embed_tokens.weight`), random until then.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models import layers
from wgc.models.layers import Embedding, RMSNorm, RotaryEmbedding, SelfAttention, SparseMoE
from wgc.models.qwen3_omni.code_predictor import CodePredictor
from wgc.models.qwen3_omni.talker_config import TalkerConfig
from wgc.runtime.engines.attention import KVStep

ROW_IM_START, ROW_ASSISTANT, ROW_NEWLINE, ROW_IM_END, ROW_TTS_PAD, ROW_TTS_BOS, ROW_TTS_EOS = range(7)


class ResizeMLP(nn.Module):
    """`text_projection` / `hidden_projection`: thinker width -> talker width."""

    def __init__(self, inner: int, outer: int, width: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(inner, width, bias=True)
        self.linear_fc2 = nn.Linear(width, outer, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))  # [..., outer]


class TalkerLayer(nn.Module):
    def __init__(self, c: TalkerConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.norm_eps)
        self.self_attn = SelfAttention(layer, c.hidden, c.heads, c.kv_heads, c.head_dim, qk_norm_eps=c.norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.norm_eps)
        self.mlp = SparseMoE(c.hidden, c.experts, c.top_k, c.moe_intermediate, norm_topk_prob=c.norm_topk_prob,
                             shared_intermediate=c.shared_intermediate)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, kv: KVStep | None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv)  # [..., hidden]
        return x + self.mlp(self.post_attention_layernorm(x))  # [..., hidden]


class TalkerDecoder(nn.Module):
    """`talker.model`: the layers, the final norm and codebook 0's `codec_embedding`."""

    def __init__(self, c: TalkerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TalkerLayer(c, i) for i in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.norm_eps)
        self.codec_embedding = Embedding(c.vocab, c.hidden)
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta, mrope_section=c.mrope_section)

    def forward(self, x: Tensor, positions: Tensor, kv: KVStep | None = None) -> Tensor:
        """Paged: x [N, hidden] packed rows, positions [3, N]; dense (kv None): x [B, T, hidden],
        positions [3, B, T], with a causal mask -> final-normed hidden states of x's shape."""
        cos, sin = self.rotary(positions, x.dtype)  # each [..., head_dim]
        for layer in self.layers:
            x = layer(x, cos, sin, kv)
        return self.norm(x)


class TalkerModel(nn.Module):
    """`talker`: decoder, projections, codec head, code predictor; the thinker rows it projects itself."""

    def __init__(self, c: TalkerConfig) -> None:
        super().__init__()
        if c.predictor.hidden != c.hidden:
            raise ValueError(f"the code predictor's width {c.predictor.hidden} must be the talker's {c.hidden}")
        self.config = c
        self.model = TalkerDecoder(c)
        self.text_projection = ResizeMLP(c.thinker_hidden, c.hidden, c.intermediate)
        self.hidden_projection = ResizeMLP(c.thinker_hidden, c.hidden, c.intermediate)
        self.codec_head = nn.Linear(c.hidden, c.vocab, bias=False)
        self.code_predictor = CodePredictor(c.predictor)
        self.register_buffer("thinker_rows", torch.randn(len(c.thinker.rows()), c.thinker_hidden), persistent=False)

    def load_thinker_rows(self, embed_tokens: Tensor) -> None:
        """Take the seven rows from the thinker's input embedding table [vocab, thinker_hidden]."""
        ids = torch.tensor(self.config.thinker.rows(), device=embed_tokens.device)
        rows = embed_tokens.detach().index_select(0, ids)  # [7, thinker_hidden]
        self.thinker_rows = rows.to(self.thinker_rows.device, self.thinker_rows.dtype)

    def marker_rows(self) -> Tensor:
        """text_projection of the seven thinker rows [7, hidden] (indexed by `ROW_*`)."""
        return self.text_projection(self.thinker_rows)

    def project(self, rows: Tensor, multimodal: Tensor | None) -> Tensor:
        """Thinker rows [N, thinker_hidden] -> talker inputs [N, hidden]: hidden_projection where
        `multimodal` [N] bool is True (accept-layer states), text_projection elsewhere (input embeddings)."""
        if multimodal is None or not bool(multimodal.any()):
            return self.text_projection(rows)
        if bool(multimodal.all()):
            return self.hidden_projection(rows)
        mask = multimodal.to(rows.device)
        out = rows.new_empty(rows.shape[0], self.config.hidden)  # [N, hidden]
        out[mask] = self.hidden_projection(rows[mask])
        out[~mask] = self.text_projection(rows[~mask])
        return out

    def frame_embedding(self, c0: Tensor, residual: Tensor) -> Tensor:
        """A frame as the talker reads it: codebook 0 [B] through codec_embedding plus codebooks 1..15
        [B, 15] through the code predictor's tables -> [B, hidden]."""
        return self.model.codec_embedding(c0) + self.code_predictor.embed(residual)


def init_random(model: TalkerModel, seed: int = 0, std: float = 0.02) -> None:
    """Random weights (layers.init_random), and `thinker_rows` as if from a normal(0, std) thinker embedding."""
    layers.init_random(model, seed, std)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        model.thinker_rows.copy_(torch.randn(model.thinker_rows.shape, generator=gen) * std)
