"""π0.5's sizes (models-wave2.md §4): PaliGemma's SigLIP tower and projector, the Gemma-2B prefix, the
Gemma-300M action expert, and the action chunk, with presets `tiny` (tests, CPU demos: §4.5) and
`base` (lerobot/pi05_base). `pi05=False` is π0's variant of the same model (a state token and an
action-time MLP instead of adaRMS and the discretised state), kept for the parity test against
transformers' PI0 and for π0 checkpoints.

The expert attends over the prefix's keys and values layer by layer, so both stacks must have the
same depth, KV heads and head_dim (checked here).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from wgc.models.layers.config import LlamaConfig

PALIGEMMA_VOCAB = 257152
BOS, EOS, PAD = 2, 1, 0  # PaliGemma's <bos>, <eos>, <pad>
TINY_BOS = 256  # the tiny byte tokenizer's <bos> (bytes are ids 0..255)


@dataclass(frozen=True)
class SiglipConfig:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    image_size: int
    patch: int
    projection: int  # the projector's output: the prefix's width
    eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def tokens(self) -> int:
        """Tokens per camera image."""
        return (self.image_size // self.patch) ** 2


@dataclass(frozen=True)
class Pi05Config:
    name: str
    vision: SiglipConfig
    prefix: LlamaConfig  # PaliGemma's Gemma-2B
    expert: LlamaConfig  # the Gemma-300M action expert (its vocab unused)
    chunk: int = 50  # actions per chunk
    action_dim: int = 32  # the model's action and state width (max_action_dim, max_state_dim)
    steps: int = 10  # Euler steps of the flow
    max_prompt_tokens: int = 200  # tokenizer_max_length
    cameras: int = 3
    min_period: float = 4e-3
    max_period: float = 4.0
    pi05: bool = True  # False: π0 (state token, action-time MLP, plain norms)
    bos: int = BOS

    def __post_init__(self) -> None:
        p, e = self.prefix, self.expert
        if (p.layers, p.kv_heads, p.head_dim) != (e.layers, e.kv_heads, e.head_dim):
            raise ValueError(f"the expert ({e.layers} layers, {e.kv_heads} kv heads of {e.head_dim}) must match the "
                             f"prefix ({p.layers}, {p.kv_heads}, {p.head_dim}) to attend to its KV")
        if self.vision.projection != p.hidden:
            raise ValueError(f"the projector gives {self.vision.projection}, the prefix is {p.hidden} wide")
        if self.vision.image_size % self.vision.patch:
            raise ValueError(f"{self.vision.image_size} px does not split into patches of {self.vision.patch}")

    @property
    def max_prefix(self) -> int:
        """The prefix's most tokens: every camera and a full prompt (plus π0's state token)."""
        return self.cameras * self.vision.tokens + self.max_prompt_tokens + (0 if self.pi05 else 1)

    def as_pi0(self) -> Pi05Config:
        return replace(self, name=self.name + "-pi0", pi05=False, max_prompt_tokens=48)

    @staticmethod
    def preset(name: str) -> Pi05Config:
        if name == "tiny":
            # §4.5: 56 px images (16 tokens a camera), a 64-wide 2-layer prefix and a 32-wide expert with
            # one KV head of 32; the tiny byte tokenizer's 257 ids (and room to spare), whose byte tokens make
            # a prompt about 3x longer than PaliGemma's: 400 of them
            vision = SiglipConfig(hidden=32, layers=1, heads=2, intermediate=64, image_size=56, patch=14, projection=64)
            prefix = LlamaConfig.gemma(vocab=260, hidden=64, layers=2, heads=2, kv_heads=1, head_dim=32,
                                       intermediate=128, max_positions=1024)
            expert = LlamaConfig.gemma(vocab=260, hidden=32, layers=2, heads=2, kv_heads=1, head_dim=32,
                                       intermediate=64, max_positions=1024)
            return Pi05Config("tiny", vision, prefix, expert, max_prompt_tokens=400, bos=TINY_BOS)
        if name == "base":
            vision = SiglipConfig(hidden=1152, layers=27, heads=16, intermediate=4304, image_size=224, patch=14,
                                  projection=2048)
            prefix = LlamaConfig.gemma(vocab=PALIGEMMA_VOCAB, hidden=2048, layers=18, heads=8, kv_heads=1,
                                       head_dim=256, intermediate=16384)
            expert = LlamaConfig.gemma(vocab=PALIGEMMA_VOCAB, hidden=1024, layers=18, heads=8, kv_heads=1,
                                       head_dim=256, intermediate=4096)
            return Pi05Config("base", vision, prefix, expert)
        raise ValueError(f"unknown pi0.5 preset {name!r} (known: tiny, base)")
