"""The Qwen3-Omni thinker's config (models-wave2.md §2.1, §2.4, §2.5): the MoE text decoder's sizes,
its M-RoPE, the layer whose hidden state feeds the talker, and the special token ids.

Token ids are the checkpoint's (`config.json`: the top level, `thinker_config`, `talker_config`),
never transformers' class defaults, several of which are Qwen2.5-Omni's (audio 151646 instead of
151675, accept layer 18 instead of 24, 25 instead of 13 positions per second). `Tokens` holds them
as Qwen ids: what the component takes and returns with either preset (the walk's `const eos`).

The tiny preset's vocabulary is compact (512): ids 0..496 are themselves (bytes 0..255 as the tiny
byte-level tokenizer gives them; 256..496 sampled by random weights, decoded to nothing) and the 15 special ids of `Tokens.specials()` are 497..511, in that order
(§2.5: transformers' tiny config remaps the same ids into its small vocabulary). `VocabMap` maps
Qwen ids to model ids and back at the component's boundary; with the real vocabulary it is the
identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

TINY_VOCAB = 512


@dataclass(frozen=True)
class Tokens:
    """Special ids, as Qwen ids (the checkpoint's values are the defaults)."""

    im_start: int = 151644
    im_end: int = 151645  # the thinker's EOS
    system: int = 8948  # role ids: the token after <|im_start|>
    user: int = 872
    assistant: int = 77091
    audio_start: int = 151669
    audio_end: int = 151670
    audio: int = 151675  # the placeholder of each audio position
    vision_start: int = 151652
    vision_end: int = 151653
    image: int = 151655
    video: int = 151656
    tts_pad: int = 151671
    tts_bos: int = 151672
    tts_eos: int = 151673
    newline: int = 198  # "\n" after a role, as Qwen's tokenizer gives it (the tiny tokenizer: byte 10)

    def specials(self) -> tuple[int, ...]:
        """The ids the tiny vocabulary remaps (everything but the newline, which is a byte there)."""
        return tuple(getattr(self, f.name) for f in fields(self) if f.name != "newline")

    @staticmethod
    def from_checkpoint(config: dict[str, Any]) -> Tokens:
        """From a checkpoint's config.json (its three sub-configs); a key it lacks keeps the value above."""
        thinker = config.get("thinker_config") or {}
        keys = {"im_start": (config, "im_start_token_id"), "im_end": (config, "im_end_token_id"),
                "system": (config, "system_token_id"), "user": (config, "user_token_id"),
                "assistant": (config, "assistant_token_id"), "tts_pad": (config, "tts_pad_token_id"),
                "tts_bos": (config, "tts_bos_token_id"), "tts_eos": (config, "tts_eos_token_id"),
                "audio_start": (thinker, "audio_start_token_id"), "audio_end": (thinker, "audio_end_token_id"),
                "audio": (thinker, "audio_token_id"), "vision_start": (thinker, "vision_start_token_id"),
                "vision_end": (thinker, "vision_end_token_id"), "image": (thinker, "image_token_id"),
                "video": (thinker, "video_token_id")}
        found = {name: int(src[key]) for name, (src, key) in keys.items() if src.get(key) is not None}
        return replace(Tokens(), **found)


@dataclass(frozen=True)
class ThinkerConfig:
    """`thinker.model` + `thinker.lm_head`: every layer MoE (no shared expert), QK-norm, no biases."""

    name: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int  # 128 in the checkpoint; never hidden / heads (2048 / 32 = 64: §2.8)
    experts: int
    top_k: int
    moe_intermediate: int
    norm_topk_prob: bool = True
    mrope_section: tuple[int, int, int] = (24, 20, 20)  # frequencies per axis (t, h, w); sums to head_dim / 2
    rope_theta: float = 1e6
    norm_eps: float = 1e-6
    max_positions: int = 32768
    accept_layer: int = 24  # talker_config.accept_hidden_layer: hidden_states[k], the output of layer k
    deepstack_layers: int = 3  # vision deepstack features added after layers 0..n-1
    spatial_merge: int = 2  # vision_config.spatial_merge_size: patches per thinker token along h and w
    position_per_second: float = 13  # position_id_per_seconds: the temporal step of video frames
    tokens: Tokens = field(default_factory=Tokens)
    compact_vocab: bool = False  # the tiny layout of the module docstring

    def __post_init__(self) -> None:
        if sum(self.mrope_section) * 2 != self.head_dim:
            raise ValueError(f"mrope_section {list(self.mrope_section)} must sum to head_dim / 2 = {self.head_dim // 2}")
        if not 0 <= self.accept_layer <= self.layers:
            raise ValueError(f"accept layer {self.accept_layer} is not in 0..{self.layers}")

    @staticmethod
    def preset(name: str) -> ThinkerConfig:
        if name == "tiny":
            # §2.5: 64 wide, 2 layers, 4/2 heads of 16, 4 experts top-2; the tiny talker accepts layer 1
            return ThinkerConfig("tiny", vocab=TINY_VOCAB, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                                 experts=4, top_k=2, moe_intermediate=32, mrope_section=(4, 2, 2), max_positions=4096,
                                 accept_layer=1, deepstack_layers=2, tokens=Tokens(newline=10), compact_vocab=True)
        if name == "30b":
            # Qwen/Qwen3-Omni-30B-A3B-Instruct's thinker_config.text_config (§2.1)
            return ThinkerConfig("30b", vocab=152064, hidden=2048, layers=48, heads=32, kv_heads=4, head_dim=128,
                                 experts=128, top_k=8, moe_intermediate=768)
        raise ValueError(f"unknown Qwen3-Omni thinker preset {name!r} (known: tiny, 30b)")

    @staticmethod
    def from_checkpoint(config: dict[str, Any], name: str = "checkpoint") -> ThinkerConfig:
        """From a checkpoint's config.json (the whole file: the accept layer is the talker's key)."""
        thinker = config.get("thinker_config") or {}
        text = thinker.get("text_config") or {}
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        heads = int(text["num_attention_heads"])
        vision = thinker.get("vision_config") or {}
        talker = config.get("talker_config") or {}
        return ThinkerConfig(
            name, vocab=int(text["vocab_size"]), hidden=int(text["hidden_size"]), layers=int(text["num_hidden_layers"]),
            heads=heads, kv_heads=int(text["num_key_value_heads"]),
            head_dim=int(text.get("head_dim") or 128), experts=int(text["num_experts"]),
            top_k=int(text["num_experts_per_tok"]), moe_intermediate=int(text["moe_intermediate_size"]),
            norm_topk_prob=bool(text.get("norm_topk_prob", True)),
            mrope_section=tuple(int(s) for s in rope.get("mrope_section", (24, 20, 20))),  # type: ignore[arg-type]
            rope_theta=float(rope.get("rope_theta", text.get("rope_theta", 1e6))),
            norm_eps=float(text.get("rms_norm_eps", 1e-6)),
            max_positions=int(text.get("max_position_embeddings", 32768)),
            accept_layer=int(talker.get("accept_hidden_layer", 24)),
            deepstack_layers=len(vision.get("deepstack_visual_indexes", (8, 16, 24))),
            spatial_merge=int(vision.get("spatial_merge_size", 2)),
            position_per_second=float(thinker.get("position_id_per_seconds", 13)),
            tokens=Tokens.from_checkpoint(config))


class VocabMap:
    """Qwen ids <-> model ids: the identity, or the compact layout of the module docstring."""

    def __init__(self, config: ThinkerConfig) -> None:
        self.identity = not config.compact_vocab
        specials = config.tokens.specials()
        self._to = {t: TINY_VOCAB - len(specials) + i for i, t in enumerate(specials)}
        self._from = {m: t for t, m in self._to.items()}

    def to_model(self, token: int) -> int:
        token = int(token)
        if self.identity or 0 <= token < TINY_VOCAB - len(self._to):
            return token
        mapped = self._to.get(token)
        if mapped is None:
            raise ValueError(f"token {token} has no id in the tiny vocabulary (bytes and {len(self._to)} specials)")
        return mapped

    def from_model(self, token: int) -> int:
        """A sampled model id as a Qwen id; a tiny id below the specials stays as it is (every id is a token)."""
        token = int(token)
        return token if self.identity else self._from.get(token, token)
