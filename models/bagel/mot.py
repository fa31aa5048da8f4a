"""BAGEL's Mixture-of-Transformers decoder: Qwen2.5 with QK-norm and a second copy of every per-token
weight for the generation expert (models-wave2.md §1.2).

Per layer, the und expert (text, ViT tokens, image markers) uses `input_layernorm`, `self_attn.*`,
`post_attention_layernorm`, `mlp.*`; the gen expert (VAE latents in gen mode) the same names with
`_moe_gen` (`mlp_moe_gen.*`); after the last layer `norm` / `norm_moe_gen`. The attention itself is
shared: every token's q, k and v (each from its own expert) enter one attention over the whole
sequence, and the KV cache holds both experts' keys side by side. The embedding, RoPE (theta 1e6,
no scaling) and the untied `lm_head` are shared too.

Routing is a boolean mask over the packed rows (True: gen). The residual stream is kept as the two
experts' rows apart (`Route.split`) for the whole stack, so each expert runs only on its own rows;
only q, k, v are put back in packed order for the attention, and its output split again. A step
with no gen rows (text, ViT, decode) runs the und expert alone, with no indexing at all.

Parameter names are the checkpoint's under `language_model.`: `model.embed_tokens`,
`model.layers.{i}.*`, `model.norm`, `model.norm_moe_gen`, `lm_head`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor, nn
from wgc.models.bagel.config import BagelLLMConfig
from wgc.models.layers import Embedding, LMHead, RMSNorm, RotaryEmbedding, SelfAttention, SwiGLU

GEN = "_moe_gen"  # the suffix of the generation expert's weights

Parts = tuple[Tensor | None, Tensor | None]  # (und rows, gen rows) of a packed tensor; None: that expert has none


class Attends(Protocol):
    """Attention over a step's context: a `KVStep` (paged), or a dense stand-in in tests."""

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor: ...


class Route:
    """Which packed rows each expert takes; `gen` [N] bool (True: the gen expert), None: all und."""

    def __init__(self, gen: Tensor | None, device: torch.device | str = "cpu") -> None:
        mask = None if gen is None else gen.to("cpu", torch.bool)  # [N]
        self.n = 0 if mask is None else int(mask.numel())
        gen_count = 0 if mask is None else int(mask.sum())
        self.und_only = gen_count == 0
        self.gen_only = not self.und_only and gen_count == self.n
        self.und_rows = self.gen_rows = None
        if not (self.und_only or self.gen_only):
            assert mask is not None
            self.und_rows = (~mask).nonzero()[:, 0].to(device)  # [N_und]
            self.gen_rows = mask.nonzero()[:, 0].to(device)  # [N_gen]

    def split(self, x: Tensor) -> Parts:
        """x [N, ...] -> (x[und rows], x[gen rows])."""
        if self.und_only:
            return x, None
        if self.gen_only:
            return None, x
        return x.index_select(0, self.und_rows), x.index_select(0, self.gen_rows)

    def merge(self, parts: Parts) -> Tensor:
        """The inverse of `split`: the experts' rows back in packed order, [N, ...]."""
        und, gen = parts
        if gen is None:
            assert und is not None
            return und
        if und is None:
            return gen
        out = und.new_empty((self.n, *und.shape[1:]))  # [N, ...]
        out.index_copy_(0, self.und_rows, und)
        return out.index_copy_(0, self.gen_rows, gen)


def each(parts: Parts, und: Callable[[Tensor], Tensor], gen: Callable[[Tensor], Tensor]) -> Parts:
    """Each expert's function on its own rows (an expert without rows runs nothing)."""
    return (None if parts[0] is None else und(parts[0]), None if parts[1] is None else gen(parts[1]))


def add(a: Parts, b: Parts) -> Parts:
    return (None if a[0] is None else a[0] + b[0], None if a[1] is None else a[1] + b[1])  # type: ignore[operator]


class MoTAttention(SelfAttention):
    """Qwen2 attention with QK-norm (biases on q/k/v, none on o), plus the gen expert's `*_moe_gen` copies."""

    expert_suffixes = ("", GEN)

    def __init__(self, layer: int, c: BagelLLMConfig) -> None:
        super().__init__(layer, c.hidden, c.heads, c.kv_heads, c.head_dim, bias=True, o_bias=False,
                         qk_norm_eps=c.norm_eps)
        self.q_proj_moe_gen = nn.Linear(c.hidden, c.heads * c.head_dim, bias=True)
        self.k_proj_moe_gen = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=True)
        self.v_proj_moe_gen = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=True)
        self.o_proj_moe_gen = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)
        self.q_norm_moe_gen = RMSNorm(c.head_dim, c.norm_eps)
        self.k_norm_moe_gen = RMSNorm(c.head_dim, c.norm_eps)

    def routed(self, h: Parts, route: Route, cos: Parts, sin: Parts, attn: Attends) -> Parts:
        """h: the normed rows of each expert -> each expert's attention output rows."""
        qkv = [None if x is None else self.qkv(x, c, s, suffix)  # each ([n, heads, d], [n, kvh, d], [n, kvh, d])
               for x, c, s, suffix in zip(h, cos, sin, ("", GEN))]
        q, k, v = (route.merge((None if qkv[0] is None else qkv[0][i], None if qkv[1] is None else qkv[1][i]))
                   for i in range(3))  # q [N, heads, d], k and v [N, kv_heads, d]
        out = route.split(attn.attend(self.layer, q, k, v))  # each [n, heads, d]
        return each(out, self.out, lambda o: self.out(o, GEN))  # each [n, hidden]


class MoTLayer(nn.Module):
    def __init__(self, c: BagelLLMConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.norm_eps)
        self.input_layernorm_moe_gen = RMSNorm(c.hidden, c.norm_eps)
        self.self_attn = MoTAttention(layer, c)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.norm_eps)
        self.post_attention_layernorm_moe_gen = RMSNorm(c.hidden, c.norm_eps)
        self.mlp = SwiGLU(c.hidden, c.intermediate)
        self.mlp_moe_gen = SwiGLU(c.hidden, c.intermediate)

    def forward(self, x: Parts, route: Route, cos: Parts, sin: Parts, attn: Attends) -> Parts:
        h = each(x, self.input_layernorm, self.input_layernorm_moe_gen)
        x = add(x, self.self_attn.routed(h, route, cos, sin, attn))  # each [n, hidden]
        h = each(x, self.post_attention_layernorm, self.post_attention_layernorm_moe_gen)
        return add(x, each(h, self.mlp, self.mlp_moe_gen))  # each [n, hidden]


class MoTModel(nn.Module):
    """`language_model.model`: the embedding, the layers, and both experts' final norms."""

    def __init__(self, c: BagelLLMConfig) -> None:
        super().__init__()
        self.config = c
        self.embed_tokens = Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(MoTLayer(c, i) for i in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.norm_eps)
        self.norm_moe_gen = RMSNorm(c.hidden, c.norm_eps)
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta)

    def forward(self, x: Tensor, positions: Tensor, attn: Attends, gen: Tensor | None = None) -> Tensor:
        """x [N, hidden] input embeddings of the step's packed rows, positions [N], gen [N] bool or None
        (all und) -> the final-normed hidden states [N, hidden]."""
        route = Route(gen, x.device)
        cos, sin = self.rotary(positions, x.dtype)  # each [N, head_dim]
        cos_parts, sin_parts = route.split(cos), route.split(sin)
        parts = route.split(x)
        for layer in self.layers:
            parts = layer(parts, route, cos_parts, sin_parts, attn)
        return route.merge(each(parts, self.norm, self.norm_moe_gen))  # [N, hidden]


class MoTLM(nn.Module):
    """`language_model`: the decoder and its untied head."""

    def __init__(self, c: BagelLLMConfig) -> None:
        super().__init__()
        self.config = c
        self.model = MoTModel(c)
        self.lm_head = LMHead(c.hidden, c.vocab)

    def forward(self, x: Tensor, positions: Tensor, attn: Attends, gen: Tensor | None = None) -> Tensor:
        return self.model(x, positions, attn, gen)  # [N, hidden]

    def embed(self, tokens: Tensor) -> Tensor:
        return self.model.embed_tokens(tokens)  # [..., hidden]

    def logits(self, hidden: Tensor) -> Tensor:
        return self.lm_head(hidden)  # [..., vocab]


def init_random(module: nn.Module, seed: int = 0, std: float = 0.02) -> None:
    """Random weights as transformers initialises Qwen (normal(0, std)), norms at one, and frozen
    parameters (the sin-cos position tables) kept as built; the gen expert independent of und."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            if "norm" in name.split(".")[-2:][0]:  # the owning module's name: a norm's weight
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * std)
