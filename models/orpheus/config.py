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

from wgc.models.layers import LlamaConfig

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
        out = {**self.llama.to_hf(), "bos_token_id": BEGIN_OF_TEXT, "eos_token_id": END_OF_SPEECH}
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
        llama = LlamaConfig.from_hf(raw)
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
