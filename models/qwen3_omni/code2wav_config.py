"""Code2wav's config (transformers `Qwen3OmniMoeCode2WavConfig`, the checkpoint's `code2wav_config`),
its sample arithmetic, and how a left_context chunk splits into context and new frames.

Sample arithmetic (models-wave2.md §2.3). A decode of n frames runs the pre-transformer over n
positions, then the `upsampling_ratios` transposed convolutions (kernel = stride: exactly ×r, nothing
trimmed), then a causal kernel-7 conv, then one decoder block per `upsample_rates` entry r, whose
transposed convolution has kernel 2r and stride r and trims r samples from each side:
T inputs give r·T − r outputs. So the samples missing at the end compound as t → r·t + r:
0 → 8 → 45 → 184 → 555 for rates (8, 5, 4, 3), and n frames give `hop·n − trim` = 1920·n − 555.

Every output sample depends on inputs at and before its own position, plus one input step ahead
at each decoder transposed conv (the 555 trimmed samples are those whose lookahead frame does not
exist). Hence any prefix of frames decodes to a prefix of the samples, and a window that starts at
frame s maps its sample u to sample hop·s + u of the utterance. A window of L context frames and C
new ones has hop·(L + C) − trim samples; the first hop·L − trim are the context's, the last hop·C are
the new frames'. A stream keeps those: the first window (no context) all hop·C − trim, every later
one hop·C, so N frames stream to hop·N − trim samples, as one decode of all N does.

Kept samples equal the full decode's exactly when the decoder's left reach (`left_reach_frames`:
the sliding-window attention, `layers·(window − 1)` frames, plus the convolutions, under 11 frames)
is under the context. The tiny preset's window of 8 makes it so (17.9 < 25 frames); the real
checkpoint's (8 layers × 71 + 10.9 = 578.9 frames) does not: there streaming is an approximation
(models-wave2 §2.3), while each window still equals a decode of that window.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

SAMPLE_RATE = 24000  # Hz, both presets (the tiny one keeps the real hop of 1920 samples per frame)
CONV_KERNEL = 7  # every causal conv of the decoder (the ConvNeXt depthwise conv, the residual units)
DILATIONS = (1, 3, 9)  # the three residual units of a decoder block


@dataclass(frozen=True)
class Code2WavConfig:
    name: str = "30b-a3b"
    codebook_size: int = 2048
    num_quantizers: int = 16
    hidden: int = 1024
    layers: int = 8
    heads: int = 16
    kv_heads: int = 16
    intermediate: int = 3072
    sliding_window: int = 72
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    layer_scale: float = 0.01
    decoder_dim: int = 1536
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    upsampling_ratios: tuple[int, ...] = (2, 2)

    @staticmethod
    def preset(name: str) -> Code2WavConfig:
        if name == "tiny":  # models-wave2 §2.5, with a sliding window that fits the stream's context
            return Code2WavConfig("tiny", codebook_size=64, hidden=32, layers=1, heads=2, kv_heads=2,
                                  intermediate=64, sliding_window=8, decoder_dim=32)
        if name == "30b-a3b":
            return Code2WavConfig()
        raise ValueError(f"unknown code2wav preset {name!r} (known: tiny, 30b-a3b)")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def hop(self) -> int:
        """Samples per frame: 1920 = 2·2·8·5·4·3."""
        return math.prod(self.upsampling_ratios) * math.prod(self.upsample_rates)

    @property
    def trim(self) -> int:
        """Samples a decode lacks at its end: 555 for rates (8, 5, 4, 3)."""
        missing = 0
        for r in self.upsample_rates:
            missing = r * missing + r
        return missing

    def samples(self, frames: int) -> int:
        """Samples of one decode of `frames` frames: hop·n − trim (none for none)."""
        return max(0, self.hop * frames - self.trim)

    def left_reach_frames(self) -> float:
        """How far back (in frames) the earliest input any output sample reads lies."""
        reach = self.layers * (self.sliding_window - 1)  # attention: each layer sees window − 1 back
        rate = 1  # samples per frame at the current stage
        for r in self.upsampling_ratios:
            reach += 1 / rate  # a transposed conv's output reads the input step it falls in
            rate *= r
            reach += (CONV_KERNEL - 1) / rate  # the ConvNeXt block's depthwise conv
        reach += (CONV_KERNEL - 1) / rate  # the decoder's first conv
        for r in self.upsample_rates:
            reach += 1 / rate
            rate *= r
            reach += sum((CONV_KERNEL - 1) * d for d in DILATIONS) / rate  # the three residual units
        return reach + (CONV_KERNEL - 1) / rate  # the output conv

    # ---- transformers' config ---------------------------------------------------------------------

    def hf_config(self) -> dict[str, Any]:
        """`code2wav_config` as config.json holds it (transformers' Qwen3OmniMoeCode2WavConfig keys)."""
        return {
            "codebook_size": self.codebook_size, "num_quantizers": self.num_quantizers,
            "hidden_size": self.hidden, "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads, "num_key_value_heads": self.kv_heads,
            "intermediate_size": self.intermediate, "sliding_window": self.sliding_window,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "rms_norm_eps": self.rms_eps, "layer_scale_initial_scale": self.layer_scale,
            "decoder_dim": self.decoder_dim, "upsample_rates": list(self.upsample_rates),
            "upsampling_ratios": list(self.upsampling_ratios), "hidden_act": "silu", "attention_bias": False,
        }

    @staticmethod
    def from_hf(raw: dict[str, Any], name: str = "checkpoint") -> Code2WavConfig:
        """From a `code2wav_config` dict; missing keys take transformers' class defaults (the real ones).
        A ValueError names the key when a value cannot be this architecture."""
        base = asdict(Code2WavConfig())
        keys = {"codebook_size": "codebook_size", "num_quantizers": "num_quantizers", "hidden": "hidden_size",
                "layers": "num_hidden_layers", "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
                "intermediate": "intermediate_size", "sliding_window": "sliding_window",
                "decoder_dim": "decoder_dim"}
        fields: dict[str, Any] = {"name": name}
        for ours, theirs in keys.items():
            value = raw.get(theirs, base[ours])
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"code2wav_config `{theirs}` is {value!r}, expected a positive integer")
            fields[ours] = value
        for ours, theirs in (("upsample_rates", "upsample_rates"), ("upsampling_ratios", "upsampling_ratios")):
            value = raw.get(theirs, base[ours])
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and v >= 1 for v in value):
                raise ValueError(f"code2wav_config `{theirs}` is {value!r}, expected a list of positive integers")
            fields[ours] = tuple(value)
        rope = raw.get("rope_parameters") or {}
        fields["rope_theta"] = float(rope.get("rope_theta", raw.get("rope_theta", base["rope_theta"])))
        fields["rms_eps"] = float(raw.get("rms_norm_eps", base["rms_eps"]))
        fields["layer_scale"] = float(raw.get("layer_scale_initial_scale", base["layer_scale"]))
        for key, wanted in (("hidden_act", "silu"), ("attention_bias", False)):
            if raw.get(key, wanted) != wanted:
                raise ValueError(f"code2wav_config `{key}` is {raw[key]!r}; code2wav's is {wanted!r}")
        config = Code2WavConfig(**fields)
        if config.hidden % config.heads or config.heads % config.kv_heads:
            raise ValueError(f"code2wav_config: {config.heads} heads over hidden {config.hidden} with "
                             f"{config.kv_heads} kv heads do not divide evenly")
        if config.decoder_dim % 2 ** len(config.upsample_rates):
            raise ValueError(f"code2wav_config `decoder_dim` {config.decoder_dim} does not halve "
                             f"{len(config.upsample_rates)} times")
        return config


@dataclass(frozen=True)
class StreamWindows:
    """The walk's `left_context(left, chunk)` chunks as code2wav receives them: chunk j is
    frames[max(0, j·chunk − left) : (j+1)·chunk], the last one (`at_end flush`) cut at the end.

    The component sees only a chunk's length, so the split must follow from it: with left == chunk
    the first chunk has 1..chunk frames and no context, every later one `left` context frames and
    1..chunk new ones (left + 1 .. left + chunk frames). Any other left (but 0) makes lengths ambiguous
    (a short last chunk with context reads like a first one), so it is refused."""

    left: int = 25
    chunk: int = 25

    def __post_init__(self) -> None:
        if self.chunk < 1 or self.left not in (0, self.chunk):
            raise ValueError(f"code2wav reads left_context(left={self.left}, chunk={self.chunk}) chunks only "
                             f"when left is 0 or equals chunk (a chunk's context must follow from its length)")

    @property
    def lengths(self) -> tuple[int, ...]:
        """The full chunk lengths: the first chunk's, and every later one's."""
        return (self.chunk,) if self.left == 0 else (self.chunk, self.left + self.chunk)

    def context(self, frames: int) -> int:
        """Context frames at the head of a chunk of `frames` frames; ValueError if no chunk is that long."""
        if not 1 <= frames <= self.left + self.chunk:
            raise ValueError(f"a code2wav chunk holds 1 to {self.left + self.chunk} frames "
                             f"(left_context(left={self.left}, chunk={self.chunk})), got {frames}")
        return 0 if frames <= self.chunk else self.left
