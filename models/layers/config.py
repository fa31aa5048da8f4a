"""LlamaConfig: a frozen dataclass with named presets (`tiny` for tests and CPU demos, `3b`)."""

from __future__ import annotations

from dataclasses import dataclass, field

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
