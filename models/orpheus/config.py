"""Orpheus's constants and the language model's config: presets `tiny` and `3b`, and the Hugging Face
`config.json` both ways.

Token ids are Orpheus's (canopylabs/orpheus-3b-0.1-ft): Llama 3's 128,256 text tokens, then ten
control tokens, then 7 x 4096 audio codes. Audio token t at position p of a 7-token frame is SNAC
code t - 128266 - 4096 * p (`codes.py`).

The tiny preset's vocabulary is compact (`vocab = "compact"`, see `vocab.py`): 256 byte tokens,
the 13 special tokens Orpheus uses, and one token per code value (4096), 4,365 rows in all, so
that the model stays a few MB and sampling sorts 4 K logits rather than 157 K. The component maps
compact ids to Orpheus ids at its boundary, so everything outside it (the `.walk` program's
`eos`, the stream, the SNAC decoder) sees Orpheus ids exactly as with the real model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from wgc.models.layers import Llama3Scaling, LlamaConfig

# ---- Orpheus's token ids ---------------------------------------------------------------------

TEXT_VOCAB = 128256  # Llama 3's text tokens (ids 0 .. 128255; 128000 and up are its specials)
BEGIN_OF_TEXT = 128000
END_OF_TEXT = 128009  # <|eot_id|>
START_OF_SPEECH = 128257
END_OF_SPEECH = 128258  # the stop token: `const eos` in models/orpheus.walk
START_OF_HUMAN = 128259
END_OF_HUMAN = 128260
START_OF_AI = 128261
AUDIO_BASE = 128266  # = 128256 + 10: code 0 of frame position 0
CODEBOOK = 4096  # codes per SNAC level
FRAME = 7  # tokens per frame: 1 + 2 + 4 codes of SNAC's three levels
AUDIO_END = AUDIO_BASE + FRAME * CODEBOOK  # 156938: one past the last audio token

PROMPT_PREFIX = (START_OF_HUMAN,)
PROMPT_SUFFIX = (END_OF_TEXT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH)

# Sampling defaults (Orpheus's; also the `.walk` program's param defaults).
TEMPERATURE = 0.6
TOP_P = 0.8
REPETITION_PENALTY = 1.3
VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")

Vocab = Literal["orpheus", "compact"]


@dataclass(frozen=True)
class OrpheusConfig:
    """The language model: a Llama decoder, and how its token ids relate to Orpheus's.

    vocab: "orpheus" — model ids are Orpheus ids (the real checkpoint, vocab 156,940); "compact" —
    the tiny preset's layout (`vocab.py`). code_bias: the tiny preset's random weights are biased
    toward audio-code tokens by this many logits (0 for a real checkpoint), see `tiny_init`.
    """

    name: str
    llama: LlamaConfig
    vocab: Vocab = "orpheus"
    code_bias: float = 0.0

    @staticmethod
    def preset(name: str) -> OrpheusConfig:
        if name == "tiny":
            from wgc.models.orpheus.vocab import COMPACT_VOCAB

            base = LlamaConfig.preset("tiny")
            return OrpheusConfig("tiny", replace(base, vocab=COMPACT_VOCAB, tie_embeddings=False), "compact", 8.0)
        if name == "3b":
            return OrpheusConfig("3b", LlamaConfig.preset("3b"))
        raise ValueError(f"unknown Orpheus preset {name!r} (known: tiny, 3b)")

    # ---- Hugging Face config.json ----------------------------------------------------------------

    def hf_config(self) -> dict[str, Any]:
        """config.json for transformers' LlamaForCausalLM (legacy rope keys, as Orpheus ships them)."""
        c = self.llama
        out: dict[str, Any] = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": c.vocab,
            "hidden_size": c.hidden,
            "intermediate_size": c.intermediate,
            "num_hidden_layers": c.layers,
            "num_attention_heads": c.heads,
            "num_key_value_heads": c.kv_heads,
            "head_dim": c.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": c.norm_eps,
            "max_position_embeddings": c.max_positions,
            "rope_theta": c.rope_theta,
            "tie_word_embeddings": c.tie_embeddings,
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": BEGIN_OF_TEXT,
            "eos_token_id": END_OF_SPEECH,
            "torch_dtype": "float32",
        }
        s = c.rope_scaling
        out["rope_scaling"] = None if s is None else {
            "rope_type": "llama3", "factor": s.factor, "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor, "original_max_position_embeddings": s.original_max_positions}
        if self.vocab != "orpheus":
            out["wgc_orpheus_vocab"] = self.vocab
            out["wgc_orpheus_code_bias"] = self.code_bias
            # transformers must not map the compact ids back: its bos/eos are the compact ones
            from wgc.models.orpheus.vocab import TokenMap

            compact = TokenMap("compact")
            out["bos_token_id"] = compact.to_model(BEGIN_OF_TEXT)
            out["eos_token_id"] = compact.to_model(END_OF_SPEECH)
        return out

    @staticmethod
    def from_hf_config(raw: dict[str, Any], name: str = "hf") -> OrpheusConfig:
        """The config of a Hugging Face Llama directory; a clear error naming a missing or odd key."""

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
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        theta = float(raw.get("rope_theta", rope.get("rope_theta", 10000.0)))
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind == "llama3":
            scaling: Llama3Scaling | None = Llama3Scaling(
                float(rope["factor"]), float(rope["low_freq_factor"]), float(rope["high_freq_factor"]),
                int(rope["original_max_position_embeddings"]))
        elif kind == "default":
            scaling = None
        else:
            raise ValueError(f"config.json: rope type `{kind}` is not supported (llama3 or default)")
        llama = LlamaConfig(
            vocab=int(need("vocab_size")), hidden=hidden, layers=int(need("num_hidden_layers")), heads=heads,
            kv_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads), intermediate=int(need("intermediate_size")),
            rope_theta=theta, rope_scaling=scaling, norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
            max_positions=int(raw.get("max_position_embeddings", 131072)),
            tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        )
        vocab = raw.get("wgc_orpheus_vocab", "orpheus")
        if vocab not in ("orpheus", "compact"):
            raise ValueError(f"config.json: unknown wgc_orpheus_vocab `{vocab}` (orpheus or compact)")
        if vocab == "orpheus" and llama.vocab < AUDIO_END:
            raise ValueError(f"config.json: vocab_size {llama.vocab} cannot hold Orpheus's audio tokens "
                             f"(they end at {AUDIO_END})")
        if vocab == "compact":
            from wgc.models.orpheus.vocab import COMPACT_VOCAB

            if llama.vocab != COMPACT_VOCAB:
                raise ValueError(f"config.json: a compact vocabulary has {COMPACT_VOCAB} tokens, "
                                 f"vocab_size says {llama.vocab}")
        return OrpheusConfig(name, llama, vocab, float(raw.get("wgc_orpheus_code_bias", 0.0)))
