"""BAGEL's language model config: the Qwen2.5-7B Mixture-of-Transformers decoder (models-wave2.md §1.2)
and the latent adapter's sizes, with presets `tiny` (tests, CPU demos) and `7b`
(ByteDance-Seed/BAGEL-7B-MoT). The ViT and VAE keep their own configs.

Token ids are Qwen2.5's. The tiny preset's vocabulary is compact (`vocab.py`): 256 byte tokens and
the four specials BAGEL uses, mapped to and from Qwen ids at the component's boundary, so the walk's
`const bos/eos` (151644/151645) mean what they say with either preset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

IM_START = 151644  # <|im_start|>: opens every text part; bos, the first decode input
IM_END = 151645  # <|im_end|>: closes every text part; eos
VISION_START = 151652  # <|vision_start|>: opens an image block (ViT, VAE or generated latents)
VISION_END = 151653  # <|vision_end|>
SPECIALS: tuple[int, ...] = (IM_START, IM_END, VISION_START, VISION_END)
SPECIAL_NAMES = {IM_START: "<|im_start|>", IM_END: "<|im_end|>", VISION_START: "<|vision_start|>",
                 VISION_END: "<|vision_end|>"}

Vocab = Literal["qwen", "compact"]


@dataclass(frozen=True)
class BagelLLMConfig:
    """The MoT decoder. Both experts share every size; `latent_grid` is the side of the latent
    position table (`max_latent_size`: 64 in BAGEL's app.py, so 1024 px at most)."""

    name: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rope_theta: float = 1e6
    norm_eps: float = 1e-6
    max_positions: int = 32768
    latent_grid: int = 64
    timestep_features: int = 256
    vocab_kind: Vocab = "qwen"

    @staticmethod
    def preset(name: str) -> BagelLLMConfig:
        if name == "tiny":
            from wgc.models.bagel.vocab import COMPACT_VOCAB

            # §1.7: 64 wide, 2 layers, 4/2 heads of 16; a 16 x 16 latent grid holds 256 x 256 px
            return BagelLLMConfig("tiny", vocab=COMPACT_VOCAB, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                                  intermediate=128, max_positions=4096, latent_grid=16, vocab_kind="compact")
        if name == "7b":
            return BagelLLMConfig("7b", vocab=152064, hidden=3584, layers=28, heads=28, kv_heads=4, head_dim=128,
                                  intermediate=18944)
        raise ValueError(f"unknown BAGEL LLM preset {name!r} (known: tiny, 7b)")
