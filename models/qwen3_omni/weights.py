"""Real Qwen3-Omni weights from a local `Qwen/Qwen3-Omni-30B-A3B-Instruct` directory (models-wave2.md §2.7):

    model-000NN-of-00015.safetensors with model.safetensors.index.json, the tensors by prefix:
        thinker.model.*, thinker.lm_head.*   the MoE thinker (thinker.py), experts stored one by one
        thinker.audio_tower.*                the audio encoder (audio.py)
        thinker.visual.*                     the vision encoder (vision.py)
        talker.*                             the talker and its code predictor (talker.py); the talker
                                             also reads seven rows of thinker.model.embed_tokens
        code2wav.*                           code2wav (code2wav.py)
    config.json               thinker_config (text_config, audio_config, vision_config, the media ids),
                              talker_config, code2wav_config, and the chat ids at the top level
    tokenizer.json            Qwen's tokenizer: the chat markers at the config's ids, "\\n" one token
    preprocessor_config.json  the processor: WhisperFeatureExtractor's settings (the audio encoder's
                              log-mel) and the image processor's patch, merge and pixel bounds

`Checkpoint` reads config.json, the index and every shard's header once; each component then loads
its part (`PARTS`: thinker, audio, vision, talker, code2wav) with `load(part, build, ...)`. A part is
built on the meta device from its config (`build`, the component's module), every name, shape and dtype it owns is checked against the headers (a name under no
Qwen3-Omni prefix counts as unexpected to every part), and only then is memory allocated on the
target device and each tensor read once, straight into its parameter (weights_io.py). Every problem
is a WeightsError of one line naming the file, the tensor and what is wrong.

Token ids are the checkpoint's (config.json, §2.4), never transformers' class defaults; the newline
the chat framing writes after a role is the tokenizer's id for "\\n".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn
from wgc.models.layers.tp_modules import Group
from wgc.models.layers.tp_shard import shard_reads, shard_structure
from wgc.models.qwen3_omni import chat
from wgc.models.qwen3_omni.audio_config import SAMPLE_RATE, AudioConfig, MelConfig
from wgc.models.qwen3_omni.code2wav_config import Code2WavConfig
from wgc.models.qwen3_omni.config import ThinkerConfig
from wgc.models.qwen3_omni.talker_config import TalkerConfig, ThinkerIds
from wgc.models.qwen3_omni.vision_config import ResizeBounds, VisionConfig
from wgc.models.weights_io import (
    INDEX,
    Entry,
    WeightsError,
    allocate,
    check_tensors,
    load_tensors,
    meta_module,
    read_checkpoint,
    read_json,
    read_rows,
    shapes,
)

KNOB = "WGC_QWEN3_OMNI_DIR"
CONFIG, TOKENIZER, PROCESSOR = "config.json", "tokenizer.json", "preprocessor_config.json"
LAYOUT = f"a Qwen3-Omni directory holds {CONFIG}, the shards with {INDEX}, {TOKENIZER} and {PROCESSOR}"
PARTS = {  # component -> (the checkpoint prefixes it owns, the prefix its parameter names drop)
    "thinker": (("thinker.model.", "thinker.lm_head."), "thinker."),
    "audio": (("thinker.audio_tower.",), "thinker.audio_tower."),
    "vision": (("thinker.visual.",), "thinker.visual."),
    "talker": (("talker.",), "talker."),
    "code2wav": (("code2wav.",), "code2wav."),
}
KNOWN = tuple(p for owned, _ in PARTS.values() for p in owned)  # every prefix of the checkpoint
EMBED = "thinker.model.embed_tokens.weight"  # the talker's seven thinker rows come from it
NORMALISE = [0.5, 0.5, 0.5]  # image_mean and image_std of the processor (vision_transform.py)


class Checkpoint:
    """A local Qwen3-Omni directory: its configs and headers, read once, and each component's part."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise WeightsError(f"{self.directory}: not a directory ({KNOB} names a local Qwen3-Omni directory; "
                               f"{LAYOUT})")
        self.name = self.directory.name

    # ---- files -------------------------------------------------------------------------------------

    @cached_property
    def raw(self) -> dict[str, Any]:
        return read_json(self.directory / CONFIG, f"{self.directory}: no {CONFIG} ({LAYOUT})")

    @cached_property
    def found(self) -> dict[str, Entry]:
        """Every tensor of the shards, from their headers (nothing read yet)."""
        return read_checkpoint(self.directory)

    @cached_property
    def processor(self) -> dict[str, Any]:
        return read_json(self.directory / PROCESSOR, f"{self.directory}: no {PROCESSOR} ({LAYOUT})")

    def sub(self, *keys: str) -> dict[str, Any]:
        """A sub-config of config.json (`sub("thinker_config", "audio_config")`), which must be an object."""
        value: Any = self.raw
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, dict):
            raise WeightsError(f"{self.directory / CONFIG}: no `{'.'.join(keys)}` object")
        return value

    def _parse(self, what: str, parse: Callable[[], Any]) -> Any:
        """A config parser's KeyError / TypeError / ValueError as one line naming config.json."""
        try:
            return parse()
        except KeyError as err:
            raise WeightsError(f"{self.directory / CONFIG}: `{what}` has no `{err.args[0]}`") from None
        except (TypeError, ValueError) as err:
            raise WeightsError(f"{self.directory / CONFIG}: {what}: {err}") from None

    # ---- configs -----------------------------------------------------------------------------------

    @cached_property
    def _thinker_base(self) -> ThinkerConfig:
        """thinker_config as config.json gives it (the newline id still the class default)."""
        self.sub("thinker_config", "text_config")
        c = self._parse("thinker_config", lambda: ThinkerConfig.from_checkpoint(self.raw, self.name))
        largest = max(c.tokens.specials())
        if largest >= c.vocab:
            raise WeightsError(f"{self.directory / CONFIG}: special token id {largest} is outside "
                               f"thinker_config.text_config.vocab_size {c.vocab}")
        return c

    @cached_property
    def tokenizer(self) -> Tokenizer:
        """tokenizer.json, checked: each chat marker at config.json's id, "\\n" one token, every id in the vocabulary."""
        path, tokens, vocab = self.directory / TOKENIZER, self._thinker_base.tokens, self._thinker_base.vocab
        try:
            tokenizer = chat.load_tokenizer(self.directory)
        except (FileNotFoundError, ValueError) as err:
            raise WeightsError(str(err)) from None
        for field, text in chat.SPECIAL_NAMES.items():
            found, want = tokenizer.token_to_id(text), getattr(tokens, field)
            if found != want:
                raise WeightsError(f"{path}: {text} is token {found}, {CONFIG} gives {want}")
        if len(chat.encode(tokenizer, "\n")) != 1:
            raise WeightsError(f"{path}: a newline is not one token")
        largest = max(tokenizer.get_vocab(with_added_tokens=True).values())
        if largest >= vocab:
            raise WeightsError(f"{path}: token id {largest} is outside {CONFIG}'s thinker vocab_size {vocab}")
        return tokenizer

    @cached_property
    def thinker_config(self) -> ThinkerConfig:
        c = self._thinker_base
        newline = chat.encode(self.tokenizer, "\n")[0]
        return replace(c, tokens=replace(c.tokens, newline=newline))

    @cached_property
    def talker_config(self) -> TalkerConfig:
        self.sub("talker_config", "text_config")
        self.sub("talker_config", "code_predictor_config")
        c = self._parse("talker_config", lambda: TalkerConfig.from_hf(self.raw, self.name))
        c = replace(c, thinker=ThinkerIds.of(self.thinker_config))
        ids = {"codec_pad_id": c.codec_pad, "codec_bos_id": c.codec_bos, "codec_eos_token_id": c.codec_eos,
               "codec_nothink_id": c.codec_nothink, "codec_think_bos_id": c.codec_think_bos,
               "codec_think_eos_id": c.codec_think_eos, **{f"speaker_id.{n}": i for n, i in c.speakers}}
        for key, value in ids.items():
            if not 0 <= value < c.vocab:
                raise WeightsError(f"{self.directory / CONFIG}: talker_config `{key}` {value} is outside the "
                                   f"codec vocab_size {c.vocab}")
        if c.thinker_hidden != self._thinker_base.hidden:
            raise WeightsError(f"{self.directory / CONFIG}: talker_config `thinker_hidden_size` {c.thinker_hidden} is "
                               f"not the thinker's hidden_size {self._thinker_base.hidden}")
        return c

    @cached_property
    def code2wav_config(self) -> Code2WavConfig:
        sub = self.sub("code2wav_config")
        return self._parse("code2wav_config", lambda: Code2WavConfig.from_hf(sub, name=self.name))

    @cached_property
    def audio_config(self) -> AudioConfig:
        """thinker_config.audio_config, with the log-mel front end of preprocessor_config.json."""
        sub = self.sub("thinker_config", "audio_config")
        c = self._parse("thinker_config.audio_config", lambda: AudioConfig.from_hf(sub, name=self.name))
        mel = mel_config(self.processor, self.directory / PROCESSOR)
        if mel.bins != c.mel_bins:
            raise WeightsError(f"{self.directory / PROCESSOR}: `feature_size` {mel.bins} is not audio_config's "
                               f"num_mel_bins {c.mel_bins}")
        self._same_width("audio_config `output_dim`", c.output_dim)
        return replace(c, mel=mel)

    @cached_property
    def vision_config(self) -> VisionConfig:
        """thinker_config.vision_config, with the image processor's bounds of preprocessor_config.json."""
        sub = self.sub("thinker_config", "vision_config")
        c = self._parse("thinker_config.vision_config", lambda: VisionConfig.from_hf(sub, name=self.name))
        self._same_width("vision_config `out_hidden_size`", c.out_hidden)
        return replace(c, image=image_bounds(self.processor, self.directory / PROCESSOR, c))

    def _same_width(self, what: str, width: int) -> None:
        hidden = self._thinker_base.hidden
        if width != hidden:
            raise WeightsError(f"{self.directory / CONFIG}: {what} {width} is not the thinker's hidden_size {hidden}")

    # ---- the parts ---------------------------------------------------------------------------------

    def load(self, part: str, build: Callable[[], nn.Module], device: torch.device | str, dtype: torch.dtype,
             extra: dict[str, tuple[int, ...]] | None = None, group: Group | None = None,
             keep: Callable[[str], bool] = lambda name: False) -> Any:
        """`build()` (the part's module, parameters named as the checkpoint's less `PARTS[part]`'s
        prefix) on meta; the part's names, and any under no known prefix, checked against the headers
        (with `extra`: tensors of other prefixes it reads too); with a tensor-parallel `group` of more
        than one rank, cut to its shard (tp_shard.py; `keep`: submodules left whole); then allocated
        on `device` in `dtype` and each tensor, or the shard's part of it, read once into its
        parameter (another rank's experts are never read)."""
        owned, prefix = PARTS[part]
        module = meta_module(build)
        expected = {**shapes(module, lambda n: prefix + n), **(extra or {})}
        mine = {n: e for n, e in self.found.items() if n.startswith(owned) or n in expected or not n.startswith(KNOWN)}
        check_tensors(mine, expected, self.directory)
        cuts = shard_structure(module, group, keep) if group is not None and group.size > 1 else {}
        module = allocate(module, device, dtype)
        targets, parts = shard_reads(module, cuts, lambda n: prefix + n)
        load_tensors(targets, self.found, parts)
        return module.eval().requires_grad_(False)

    def load_talker(self, build: Callable[[], nn.Module], device: torch.device | str, dtype: torch.dtype,
                    group: Group | None = None, keep: Callable[[str], bool] = lambda name: False) -> Any:
        """`talker.*`, and the seven thinker rows the talker projects itself (`thinker_rows`), read row by
        row from the thinker's embedding table (checked as the thinker's: its vocabulary and width)."""
        c = self.talker_config
        model = self.load("talker", build, device, dtype, {EMBED: (self.thinker_config.vocab, c.thinker_hidden)},
                          group, keep)
        with torch.no_grad():
            model.thinker_rows.copy_(read_rows(self.found[EMBED], EMBED, c.thinker.rows()))  # [7, thinker_hidden]
        return model


def _integer(raw: dict[str, Any], key: str, path: Path, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WeightsError(f"{path}: `{key}` is {value!r}, expected a positive integer")
    return value


def mel_config(raw: dict[str, Any], path: Path) -> MelConfig:
    """The audio encoder's log-mel front end from the processor's WhisperFeatureExtractor settings."""
    kind = raw.get("feature_extractor_type", "WhisperFeatureExtractor")
    if kind != "WhisperFeatureExtractor":
        raise WeightsError(f"{path}: `feature_extractor_type` is {kind!r}; Qwen3-Omni's is 'WhisperFeatureExtractor'")
    base = MelConfig()
    rate = _integer(raw, "sampling_rate", path, base.sample_rate)
    if rate != SAMPLE_RATE:
        raise WeightsError(f"{path}: `sampling_rate` is {rate}; the audio encoder's log-mel is at {SAMPLE_RATE} Hz")
    return MelConfig(bins=_integer(raw, "feature_size", path, base.bins), sample_rate=rate,
                     hop=_integer(raw, "hop_length", path, base.hop), n_fft=_integer(raw, "n_fft", path, base.n_fft),
                     chunk_seconds=_integer(raw, "chunk_length", path, base.chunk_seconds))


def image_bounds(raw: dict[str, Any], path: Path, c: VisionConfig) -> ResizeBounds:
    """The image processor's pixel bounds (`min_pixels`/`max_pixels`, or `size`'s shortest/longest edge);
    its patch, merge and temporal patch must be the vision config's, its normalisation ours."""
    for key, want in (("patch_size", c.patch), ("merge_size", c.merge), ("temporal_patch_size", c.temporal_patch)):
        if raw.get(key, want) != want:
            raise WeightsError(f"{path}: `{key}` is {raw[key]!r}, vision_config's is {want}")
    for key in ("image_mean", "image_std"):
        if raw.get(key, NORMALISE) != NORMALISE:
            raise WeightsError(f"{path}: `{key}` is {raw[key]!r}; the vision encoder normalises with {NORMALISE}")
    size = raw.get("size") if isinstance(raw.get("size"), dict) else {}
    edges = {"min_pixels": size.get("shortest_edge"), "max_pixels": size.get("longest_edge")}
    bounds = {**{k: v for k, v in edges.items() if v is not None}, **raw}
    base = ResizeBounds()
    low = _integer(bounds, "min_pixels", path, base.min_pixels)
    high = _integer(bounds, "max_pixels", path, base.max_pixels)
    if low > high:
        raise WeightsError(f"{path}: `min_pixels` {low} is over `max_pixels` {high}")
    return ResizeBounds(factor=c.patch * c.merge, min_pixels=low, max_pixels=high)
