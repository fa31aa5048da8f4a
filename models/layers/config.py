"""LlamaConfig: a frozen dataclass with named presets (`tiny` for tests and CPU demos, `3b`).

Gemma (PaliGemma's language model, π0's action expert) is the same decoder with three options:
`activation` "gelu_tanh" (GeGLU), `norm_unit_offset` (RMSNorm scales by 1 + w) and `embed_scale`
(embeddings times sqrt(hidden)); `gemma()` sets all three with Gemma's RoPE and norm epsilon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wgc.models.layers.rope import Llama3Scaling


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rope_theta: float = 500000.0
    rope_scaling: Llama3Scaling | None = field(default_factory=Llama3Scaling)
    norm_eps: float = 1e-5
    max_positions: int = 131072
    tie_embeddings: bool = False
    activation: str = "silu"  # the gated MLP's: "silu" (SwiGLU) or "gelu_tanh" (Gemma's GeGLU)
    norm_unit_offset: bool = False  # Gemma's RMSNorm: the weight w scales by 1 + w
    embed_scale: bool = False  # Gemma: embeddings times sqrt(hidden)

    @staticmethod
    def gemma(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, intermediate: int,
              max_positions: int = 8192) -> LlamaConfig:
        """A Gemma (v1) decoder: GeGLU, (1 + w) norms at eps 1e-6, scaled and tied embeddings, RoPE 10000."""
        return LlamaConfig(vocab, hidden, layers, heads, kv_heads, head_dim, intermediate, rope_theta=10000.0,
                           rope_scaling=None, norm_eps=1e-6, max_positions=max_positions, tie_embeddings=True,
                           activation="gelu_tanh", norm_unit_offset=True, embed_scale=True)

    @staticmethod
    def preset(name: str) -> LlamaConfig:
        if name == "tiny":
            # about 0.8M parameters (3 MB in float32); the short original context makes all three
            # Llama-3 frequency bands (kept, interpolated, divided) occur in a 32-dim head
            return LlamaConfig(vocab=512, hidden=128, layers=4, heads=4, kv_heads=2, head_dim=32, intermediate=256,
                               rope_scaling=Llama3Scaling(factor=32.0, original_max_positions=256), max_positions=4096)
        if name == "3b":
            # Llama-3.2-3B as fine-tuned by Orpheus (canopylabs/orpheus-3b-0.1-ft): its vocabulary holds
            # the 7 x 4096 SNAC audio codes and control tokens after Llama's 128256
            return LlamaConfig(vocab=156940, hidden=3072, layers=28, heads=24, kv_heads=8, head_dim=128,
                               intermediate=8192, tie_embeddings=True)
        raise ValueError(f"unknown Llama preset {name!r} (known: tiny, 3b)")

    # ---- Hugging Face config.json ----------------------------------------------------------------

    def to_hf(self) -> dict[str, Any]:
        """The shape keys of config.json for transformers' LlamaForCausalLM (legacy rope keys)."""
        out: dict[str, Any] = {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": self.vocab,
            "hidden_size": self.hidden, "intermediate_size": self.intermediate, "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads, "num_key_value_heads": self.kv_heads, "head_dim": self.head_dim,
            "hidden_act": "silu", "rms_norm_eps": self.norm_eps, "max_position_embeddings": self.max_positions,
            "rope_theta": self.rope_theta, "tie_word_embeddings": self.tie_embeddings, "attention_bias": False,
            "mlp_bias": False, "torch_dtype": "float32",
        }
        s = self.rope_scaling
        out["rope_scaling"] = None if s is None else {
            "rope_type": "llama3", "factor": s.factor, "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor, "original_max_position_embeddings": s.original_max_positions}
        return out

    @staticmethod
    def from_hf(raw: dict[str, Any]) -> LlamaConfig:
        """The decoder a Hugging Face Llama config.json describes; ValueError naming a missing or odd key."""

        def need(key: str) -> Any:
            if key not in raw:
                raise ValueError(f"config.json has no `{key}`")
            return raw[key]

        if raw.get("model_type", "llama") != "llama":
            raise ValueError(f"config.json describes a `{raw.get('model_type')}` model, not a Llama")
        act = raw.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"config.json: hidden_act `{act}` is not supported (Llama uses silu)")
        for flag in ("attention_bias", "mlp_bias"):
            if raw.get(flag):
                raise ValueError(f"config.json: `{flag}` is not supported")
        heads = int(need("num_attention_heads"))
        hidden = int(need("hidden_size"))
        return LlamaConfig(
            vocab=int(need("vocab_size")), hidden=hidden, layers=int(need("num_hidden_layers")), heads=heads,
            kv_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads), intermediate=int(need("intermediate_size")),
            rope_theta=_rope_theta(raw), rope_scaling=_rope_scaling(raw), norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
            max_positions=int(raw.get("max_position_embeddings", 131072)),
            tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        )


def _rope(raw: dict[str, Any]) -> dict[str, Any]:
    """The rope table of config.json: transformers 5's `rope_parameters` or the legacy `rope_scaling`."""
    return raw.get("rope_parameters") or raw.get("rope_scaling") or {}


def _rope_theta(raw: dict[str, Any]) -> float:
    return float(raw.get("rope_theta", _rope(raw).get("rope_theta", 10000.0)))


def _rope_scaling(raw: dict[str, Any]) -> Llama3Scaling | None:
    rope = _rope(raw)
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return None
    if kind != "llama3":
        raise ValueError(f"config.json: rope type `{kind}` is not supported (llama3 or default)")
    try:
        return Llama3Scaling(float(rope["factor"]), float(rope["low_freq_factor"]), float(rope["high_freq_factor"]),
                             int(rope["original_max_position_embeddings"]))
    except KeyError as err:
        raise ValueError(f"config.json: llama3 rope scaling has no `{err.args[0]}`") from None
