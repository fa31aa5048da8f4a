"""The audio encoder's input: a clip checked, resampled to 16 kHz, and made into its log-mel features.

A clip arrives as the HTTP frontend hands every audio input to a component (runtime/http/media/decode.py
`audio_clip`): a dict `{"samples": float32 [N] in [-1, 1], mono, "rate": the WAV's own rate}`, or a
pair `(samples, rate)`, resampled here. A bare tensor (or numpy array) is taken to be at 16 kHz.

Resampling (`resample`): band-limited interpolation with a Hann-windowed sinc, 6 zero crossings
each side, cut off at 0.99 of the lower Nyquist frequency (the filter `torchaudio.functional.resample`
uses by default), as a polyphase convolution: the ratio reduced by the gcd (44.1 kHz -> 16 kHz is
441 -> 160), one kernel per output phase, strided over the input. Neither torchaudio nor soxr (what
`librosa.load` uses) is a dependency; the frontend's `decode_wav(rate=)` interpolates linearly, which
aliases, and so leaves the rate to the component.

Features (`log_mel`): transformers' WhisperFeatureExtractor (audio_config.MelConfig), one clip per
call as the Qwen3-Omni processor makes them for one audio: padding to the longest of a batch would
give the clip's last frames the STFT of trailing zeros instead of its reflection.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from wgc.models.qwen3_omni.audio_config import SAMPLE_RATE, MelConfig

ZERO_CROSSINGS = 6
ROLLOFF = 0.99


def check_clip(value: Any) -> tuple[Tensor, int]:
    """(float32 samples [N], rate) from a clip in any accepted form; ValueError naming what came instead."""
    rate: Any = SAMPLE_RATE
    if isinstance(value, dict) and set(value) == {"samples", "rate"}:
        value, rate = value["samples"], value["rate"]
    elif isinstance(value, (tuple, list)) and len(value) == 2 and not isinstance(value[0], (int, float)):
        value, rate = value
    if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
        raise ValueError(f"an audio clip's rate is a positive integer (Hz), got {rate!r}")
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "f":
            raise ValueError(f"audio is float samples [N] in [-1, 1], got a {value.dtype} array")
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, Tensor):
        raise ValueError(f"audio is float samples [N] in [-1, 1], got {type(value).__name__}")
    if not value.is_floating_point() or value.dim() != 1:
        raise ValueError(f"audio is float samples [N] in [-1, 1], got {value.dtype} {list(value.shape)}")
    samples = value.detach().to("cpu", torch.float32)
    if not bool(torch.isfinite(samples).all()):
        raise ValueError("audio samples must be finite (found NaN or infinity)")
    return samples, rate


def resample(samples: Tensor, rate_in: int, rate_out: int) -> Tensor:
    """float32 [N] at `rate_in` -> [ceil(N * rate_out / rate_in)] at `rate_out` (module docstring)."""
    if rate_in == rate_out:
        return samples
    g = math.gcd(rate_in, rate_out)
    orig, new = rate_in // g, rate_out // g
    cutoff = ROLLOFF * min(orig, new) / orig  # of the input's Nyquist frequency, per input sample
    width = ZERO_CROSSINGS / cutoff  # the filter's half-length, in input samples
    reach = math.ceil(width)
    taps = torch.arange(-reach, reach + orig, dtype=torch.float64)  # [K]: input offsets from q * orig
    phase = torch.arange(new, dtype=torch.float64)[:, None] * orig / new  # [new, 1]: output phase p's time
    t = (phase - taps[None, :]).clamp(-width, width)  # [new, K]: output time minus input time, in input samples
    window = torch.cos(t * math.pi / (2 * width)) ** 2  # Hann, zero at +-width
    kernel = cutoff * torch.special.sinc(cutoff * t) * window  # [new, K], unit gain at DC
    n = samples.shape[0]
    length = math.ceil(n * new / orig)
    padded = F.pad(samples[None, None].double(), (reach, reach + orig))  # [1, 1, N + K]
    # output m = q * new + p sits at input time q * orig + p * orig / new: kernel p over the taps from q * orig
    out = F.conv1d(padded, kernel[:, None, :], stride=orig)  # [1, new, Q]
    return out[0].t().reshape(-1)[:length].float()  # [length]


def to_16k(value: Any) -> Tensor:
    """A clip in any accepted form as float32 samples [N] at 16 kHz."""
    samples, rate = check_clip(value)
    return resample(samples, rate, SAMPLE_RATE)


def log_mel(samples: Tensor, mel: MelConfig, extractor: Any) -> Tensor:
    """float32 samples [N] at 16 kHz -> float32 log-mel [bins, N // hop] (WhisperFeatureExtractor)."""
    if samples.shape[0] < mel.n_fft:
        raise ValueError(f"an audio clip needs at least {mel.n_fft} samples at {mel.sample_rate} Hz "
                         f"({1000 * mel.n_fft / mel.sample_rate:g} ms), got {samples.shape[0]}")
    out = extractor(samples.numpy(), sampling_rate=mel.sample_rate, padding=True, truncation=False,
                    return_attention_mask=True, return_tensors="np")
    frames = int(out["attention_mask"][0].sum())
    return torch.from_numpy(np.ascontiguousarray(out["input_features"][0][:, :frames]))  # [bins, frames] f32
