"""The talker's config (models-wave2.md §2.1, §2.4, §2.5): the MoE codec decoder, its code predictor,
the codec and speaker ids, and the few thinker-vocabulary ids whose thinker embeddings the talker
needs itself (the assistant prefix and the text-part markers). Presets `tiny` (tests, CPU demos)
and `30b` (Qwen3-Omni-30B-A3B-Instruct's `talker_config`), or `from_hf` over a checkpoint's
`config.json`, whose ids win over transformers' class defaults.

Codec ids are the model's own (the tiny codec vocabulary puts its specials at 1000-1012); at the
component's boundary the model's codec EOS is the walk's `const codec_eos` (2150), so the walk's
stop test means the same with either preset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wgc.models.qwen3_omni.config import ThinkerConfig, VocabMap

SUPPRESSED_TOP = 1024  # generate() suppresses the codec vocabulary's top 1024 ids, all but codec EOS
PREDICTOR_TOP_K = 50  # the code predictor's sampling (transformers 5.24 `prepare_inputs_for_generation`)
PREDICTOR_TOP_P = 0.8
PREDICTOR_TEMPERATURE = 1.0


@dataclass(frozen=True)
class CodePredictorConfig:
    """The dense decoder filling codebooks 1..groups-1 of a frame."""

    vocab: int  # codes per codebook
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    groups: int = 16  # codebooks per frame, codebook 0 included
    norm_eps: float = 1e-6
    rope_theta: float = 1e6


@dataclass(frozen=True)
class ThinkerIds:
    """Ids in the thinker's *model* vocabulary (the tiny one is compact: config.VocabMap) whose input
    embeddings the talker projects itself: the assistant header, the turn close, the tts markers."""

    im_start: int = 151644
    im_end: int = 151645
    assistant: int = 77091
    newline: int = 198
    tts_pad: int = 151671
    tts_bos: int = 151672
    tts_eos: int = 151673

    def rows(self) -> tuple[int, ...]:
        """The order of `TalkerModel.thinker_rows` (the `ROW_*` indices of talker_model.py)."""
        return (self.im_start, self.assistant, self.newline, self.im_end, self.tts_pad, self.tts_bos, self.tts_eos)

    @staticmethod
    def of(thinker: ThinkerConfig) -> ThinkerIds:
        """The thinker config's ids, mapped into its model vocabulary."""
        t, vmap = thinker.tokens, VocabMap(thinker)
        return ThinkerIds(*(vmap.to_model(i) for i in (t.im_start, t.im_end, t.assistant)),
                          newline=vmap.to_model(t.newline),
                          tts_pad=vmap.to_model(t.tts_pad), tts_bos=vmap.to_model(t.tts_bos),
                          tts_eos=vmap.to_model(t.tts_eos))


@dataclass(frozen=True)
class TalkerConfig:
    name: str
    vocab: int  # codec vocabulary of codebook 0 (codes, then 1024 specials)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # the text/hidden projections' inner width (text_config.intermediate_size)
    experts: int
    top_k: int
    moe_intermediate: int
    shared_intermediate: int
    thinker_hidden: int
    predictor: CodePredictorConfig
    codec_pad: int = 2148
    codec_bos: int = 2149
    codec_eos: int = 2150
    codec_nothink: int = 2155
    codec_think_bos: int = 2156
    codec_think_eos: int = 2157
    speakers: tuple[tuple[str, int], ...] = (("chelsie", 2301), ("ethan", 2302), ("aiden", 2303))
    thinker: ThinkerIds = ThinkerIds()
    norm_topk_prob: bool = True
    norm_eps: float = 1e-6
    rope_theta: float = 1e6
    mrope_section: tuple[int, int, int] = (24, 20, 20)
    max_positions: int = 65536

    def speaker_id(self, name: str) -> int | None:
        """A speaker's codec id, by name without case (the checkpoint's `speaker_id` keys)."""
        return dict(self.speakers).get(name.lower())

    def suppressed(self) -> range:
        """Codec ids never sampled for codebook 0 (codec EOS excepted): the top 1024 of the vocabulary."""
        return range(max(0, self.vocab - SUPPRESSED_TOP), self.vocab)

    @staticmethod
    def preset(name: str) -> TalkerConfig:
        if name == "tiny":
            # §2.5: a 64-code codec (+ 1024 specials, all suppressed but EOS), codec specials at
            # 1000-1005 and speakers at 1010-1012; the thinker's ids in its compact tiny vocabulary
            predictor = CodePredictorConfig(vocab=64, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16,
                                            intermediate=64)
            thinker = ThinkerIds.of(ThinkerConfig.preset("tiny"))
            return TalkerConfig("tiny", vocab=1088, hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16,
                                intermediate=64, experts=4, top_k=2, moe_intermediate=16, shared_intermediate=32,
                                thinker_hidden=64, predictor=predictor, codec_pad=1000, codec_bos=1001, codec_eos=1002,
                                codec_nothink=1003, codec_think_bos=1004, codec_think_eos=1005,
                                speakers=(("chelsie", 1010), ("ethan", 1011), ("aiden", 1012)), thinker=thinker,
                                mrope_section=(4, 2, 2), max_positions=4096)
        if name == "30b":
            predictor = CodePredictorConfig(vocab=2048, hidden=1024, layers=5, heads=16, kv_heads=8, head_dim=128,
                                            intermediate=3072)
            return TalkerConfig("30b", vocab=3072, hidden=1024, layers=20, heads=16, kv_heads=2, head_dim=128,
                                intermediate=2048, experts=128, top_k=6, moe_intermediate=384, shared_intermediate=768,
                                thinker_hidden=2048, predictor=predictor)
        raise ValueError(f"unknown Qwen3-Omni talker preset {name!r} (known: tiny, 30b)")

    @staticmethod
    def from_hf(config: dict[str, Any], name: str = "checkpoint") -> TalkerConfig:
        """From a checkpoint's whole `config.json` (its `talker_config` and the top-level token ids)."""
        talker = config["talker_config"]
        text, cp = talker["text_config"], talker["code_predictor_config"]
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        predictor = CodePredictorConfig(
            vocab=cp["vocab_size"], hidden=cp["hidden_size"], layers=cp["num_hidden_layers"],
            heads=cp["num_attention_heads"], kv_heads=cp["num_key_value_heads"], head_dim=cp["head_dim"],
            intermediate=cp["intermediate_size"], groups=cp.get("num_code_groups", talker["num_code_groups"]),
            norm_eps=cp.get("rms_norm_eps", 1e-6), rope_theta=_theta(cp))
        thinker = ThinkerIds.of(ThinkerConfig.from_checkpoint(config))
        return TalkerConfig(
            name, vocab=text["vocab_size"], hidden=text["hidden_size"], layers=text["num_hidden_layers"],
            heads=text["num_attention_heads"], kv_heads=text["num_key_value_heads"], head_dim=text["head_dim"],
            intermediate=text["intermediate_size"], experts=text.get("num_experts", text.get("num_local_experts")),
            top_k=text["num_experts_per_tok"], moe_intermediate=text["moe_intermediate_size"],
            shared_intermediate=text["shared_expert_intermediate_size"], thinker_hidden=talker["thinker_hidden_size"],
            predictor=predictor, codec_pad=talker["codec_pad_id"], codec_bos=talker["codec_bos_id"],
            codec_eos=talker["codec_eos_token_id"], codec_nothink=talker["codec_nothink_id"],
            codec_think_bos=talker["codec_think_bos_id"], codec_think_eos=talker["codec_think_eos_id"],
            speakers=tuple(sorted(((k.lower(), int(v)) for k, v in talker["speaker_id"].items()), key=lambda s: s[1])),
            thinker=thinker,
            norm_topk_prob=bool(text.get("norm_topk_prob", True)), norm_eps=text.get("rms_norm_eps", 1e-6),
            rope_theta=_theta(text), mrope_section=tuple(rope.get("mrope_section", (24, 20, 20))),  # type: ignore[arg-type]
            max_positions=text.get("max_position_embeddings", 65536))


def _theta(sub: dict[str, Any]) -> float:
    """rope_theta from a sub-config: transformers 5 keeps it in rope_parameters, older dumps at the top."""
    rope = sub.get("rope_parameters") or {}
    return float(rope.get("rope_theta", sub.get("rope_theta", 1e6)))
