"""The audio tower's config (transformers `Qwen3OmniMoeAudioEncoderConfig`, the checkpoint's
`thinker_config.audio_config`), its log-mel front end (the checkpoint's `preprocessor_config.json`)
and the token arithmetic that follows from both.

Front end: transformers' `WhisperFeatureExtractor` as the checkpoint's processor configures it
(feature_size 128, sampling_rate 16000, hop_length 160, n_fft 400, n_samples 4,800,000 = chunk_length
300 s, dither 0, padding_value 0, return_attention_mask true) and calls it (`Qwen3OmniMoeProcessor`'s
audio_kwargs: padding True, truncation False): 100 frames a second, `samples // 160` frames a clip.

Tokens (models-wave2 §2.1): the frames are cut into chunks of `2·n_window` (100) frames, the last one
shorter; three stride-2 convolutions (kernel 3, padding 1) take a chunk of L frames to
ceil(ceil(ceil(L/2)/2)/2) positions (13 for a full chunk), so a clip of F frames gives
`13·(F // 100) + tokens(F % 100)` tokens, transformers' `_get_feat_extract_output_lengths`. Attention
runs within windows of `13 · (n_window_infer // 100)` tokens (104: 8 s), each clip on its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SAMPLE_RATE = 16000  # Hz: the rate the mel front end (and so the tower) was trained at


def conv_length(frames: int, convs: int = 3) -> int:
    """Positions left after `convs` stride-2 convolutions of kernel 3 and padding 1: ceil(n/2) each."""
    for _ in range(convs):
        frames = (frames - 1) // 2 + 1
    return frames


@dataclass(frozen=True)
class MelConfig:
    """WhisperFeatureExtractor's settings, as preprocessor_config.json gives them."""

    bins: int = 128
    sample_rate: int = SAMPLE_RATE
    hop: int = 160
    n_fft: int = 400
    chunk_seconds: int = 300  # n_samples / sampling_rate; only bounds padding="max_length", unused here

    def extractor(self) -> Any:
        """transformers' WhisperFeatureExtractor with these settings (transformers imported here only)."""
        from transformers import WhisperFeatureExtractor

        return WhisperFeatureExtractor(feature_size=self.bins, sampling_rate=self.sample_rate, hop_length=self.hop,
                                       n_fft=self.n_fft, chunk_length=self.chunk_seconds, padding_value=0.0,
                                       dither=0.0, return_attention_mask=True)

    def frames(self, samples: int) -> int:
        """Mel frames of a clip of `samples` samples at `sample_rate` (the STFT's last frame dropped)."""
        return samples // self.hop


@dataclass(frozen=True)
class AudioConfig:
    name: str = "30b-a3b"
    mel_bins: int = 128
    d_model: int = 1280
    layers: int = 32
    heads: int = 20
    ffn: int = 5120
    downsample: int = 480  # channels of the three Conv2d
    output_dim: int = 2048  # the thinker's hidden size (proj2's output)
    n_window: int = 50  # half a chunk, in mel frames
    n_window_infer: int = 800  # an attention window, in mel frames
    max_positions: int = 1500  # rows of the sinusoid position table (13 are used: one per chunk position)
    conv_batch: int = 500  # chunks per convolution call (transformers' conv_chunksize, a memory bound)
    eps: float = 1e-5  # every LayerNorm (torch's default, as transformers builds them)
    mel: MelConfig = MelConfig()

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"audio d_model {self.d_model} does not split into {self.heads} heads")
        if self.n_window_infer < self.chunk_frames:
            raise ValueError(f"audio n_window_infer {self.n_window_infer} is shorter than a chunk of "
                             f"{self.chunk_frames} frames")
        if self.tokens_per_chunk > self.max_positions:
            raise ValueError(f"a chunk's {self.tokens_per_chunk} positions overflow the {self.max_positions}-row table")
        if self.mel.bins != self.mel_bins:
            raise ValueError(f"the tower takes {self.mel_bins} mel bins, the front end makes {self.mel.bins}")

    @staticmethod
    def preset(name: str) -> AudioConfig:
        if name == "tiny":  # models-wave2 §2.5
            return AudioConfig("tiny", d_model=32, layers=1, heads=2, ffn=64, downsample=16, output_dim=64)
        if name == "30b-a3b":
            return AudioConfig()
        raise ValueError(f"unknown audio preset {name!r} (known: tiny, 30b-a3b)")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def chunk_frames(self) -> int:
        return 2 * self.n_window

    @property
    def tokens_per_chunk(self) -> int:
        return conv_length(self.chunk_frames)

    @property
    def window_tokens(self) -> int:
        return self.tokens_per_chunk * (self.n_window_infer // self.chunk_frames)

    @property
    def conv_features(self) -> int:
        """conv_out's input: channels times the mel bins left after the three convolutions."""
        return self.downsample * conv_length(self.mel_bins)

    def chunks(self, frames: int) -> list[int]:
        """Chunk lengths of a clip of `frames` mel frames: full chunks, then the remainder if any."""
        full, rest = divmod(frames, self.chunk_frames)
        return [self.chunk_frames] * full + ([rest] if rest else [])

    def tokens(self, frames: int) -> int:
        """Tokens a clip of `frames` mel frames encodes to (transformers' `_get_feat_extract_output_lengths`)."""
        return sum(conv_length(n) for n in self.chunks(frames))

    def windows(self, tokens: int) -> list[int]:
        """Attention window lengths over a clip's tokens."""
        full, rest = divmod(tokens, self.window_tokens)
        return [self.window_tokens] * full + ([rest] if rest else [])

    # ---- transformers' config ---------------------------------------------------------------------

    def hf_config(self) -> dict[str, Any]:
        """`audio_config` as config.json holds it (transformers' Qwen3OmniMoeAudioEncoderConfig keys)."""
        return {
            "num_mel_bins": self.mel_bins, "d_model": self.d_model, "encoder_layers": self.layers,
            "encoder_attention_heads": self.heads, "encoder_ffn_dim": self.ffn,
            "downsample_hidden_size": self.downsample, "output_dim": self.output_dim, "n_window": self.n_window,
            "n_window_infer": self.n_window_infer, "max_source_positions": self.max_positions,
            "conv_chunksize": self.conv_batch, "activation_function": "gelu", "scale_embedding": False,
        }

    @staticmethod
    def from_hf(raw: dict[str, Any], name: str = "checkpoint") -> AudioConfig:
        """From an `audio_config` dict; missing keys take transformers' class defaults (output_dim the
        checkpoint's 2048, the class default being 3584). A ValueError names a key this code cannot run."""
        base = asdict(AudioConfig())
        keys = {"mel_bins": "num_mel_bins", "d_model": "d_model", "layers": "encoder_layers",
                "heads": "encoder_attention_heads", "ffn": "encoder_ffn_dim", "downsample": "downsample_hidden_size",
                "output_dim": "output_dim", "n_window": "n_window", "n_window_infer": "n_window_infer",
                "max_positions": "max_source_positions", "conv_batch": "conv_chunksize"}
        fields: dict[str, Any] = {"name": name}
        for ours, theirs in keys.items():
            value = raw.get(theirs, base[ours])
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"audio_config `{theirs}` is {value!r}, expected a positive integer")
            fields[ours] = value
        for key, wanted in (("activation_function", "gelu"), ("scale_embedding", False)):
            if raw.get(key, wanted) != wanted:
                raise ValueError(f"audio_config `{key}` is {raw[key]!r}; the Qwen3-Omni audio tower's is {wanted!r}")
        return AudioConfig(**fields, mel=MelConfig(bins=fields["mel_bins"]))
