"""Qwen3-Omni's `audio_enc`: the log-mel against WhisperFeatureExtractor as the checkpoint configures
it, the tower against transformers 5.24 `Qwen3OmniMoeAudioEncoder` on the same random weights,
resampling, and bad clips failing their own call only."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch
from transformers import WhisperFeatureExtractor
from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeAudioEncoderConfig
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
    Qwen3OmniMoeAudioEncoder,
    _get_feat_extract_output_lengths,
)
from wgc.models.qwen3_omni.audio import AudioEncoder, AudioTower, random_tower
from wgc.models.qwen3_omni.audio_config import AudioConfig
from wgc.models.qwen3_omni.audio_features import resample
from wgc.runtime.components.base import Call, CallError

from wgc.plan.model import ComponentSpec

TINY = AudioConfig.preset("tiny")
# windows of 26 tokens (2 s) and two layers, so that a few seconds of audio spans several windows
WINDOWED = dataclasses.replace(TINY, name="windowed", n_window_infer=200, layers=2)

# Qwen/Qwen3-Omni-30B-A3B-Instruct's preprocessor_config.json, its audio keys
PREPROCESSOR = {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128, "hop_length": 160,
                "n_fft": 400, "n_samples": 4800000, "nb_max_frames": 30000, "sampling_rate": 16000, "dither": 0.0,
                "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True}
# Qwen3OmniMoeProcessor.audio_kwargs
AUDIO_KWARGS = {"sampling_rate": 16000, "padding": True, "truncation": False, "return_attention_mask": True}


def spec() -> ComponentSpec:
    return ComponentSpec("audio_enc", "wgc.models.qwen3_omni.AudioEncoder", "stateless", [], {}, [],
                         {"dtype": "bf16"}, [0], 1, {})


def clip(seconds: float, seed: int = 0, rate: int = 16000) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    n = round(seconds * rate)
    t = torch.arange(n) / rate
    return (0.3 * torch.sin(2 * math.pi * 220 * t) + 0.05 * torch.randn(n, generator=g)).float()  # [N] f32


def randomised(c: AudioConfig, seed: int = 1) -> AudioTower:
    """Random weights with LayerNorm scales and biases off their defaults, so that a skipped norm shows."""
    model = random_tower(c, seed).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
    return model


def reference(c: AudioConfig, model: AudioTower) -> Qwen3OmniMoeAudioEncoder:
    hf = Qwen3OmniMoeAudioEncoder._from_config(Qwen3OmniMoeAudioEncoderConfig(**c.hf_config()),
                                               attn_implementation="sdpa").eval()
    hf.load_state_dict(model.state_dict(), strict=True)  # the checkpoint's names, less `thinker.audio_tower.`
    return hf


def hf_features(samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """input_features [1, 128, F] and feature_attention_mask [1, F] as the processor makes them."""
    out = WhisperFeatureExtractor(**PREPROCESSOR)([samples.numpy()], return_tensors="pt", **AUDIO_KWARGS)
    return out["input_features"], out["attention_mask"]


def hf_encode(hf: Qwen3OmniMoeAudioEncoder, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The thinker's `get_audio_features`: the valid frames, then the tower."""
    lengths = mask.sum(-1)
    flat = features.permute(0, 2, 1)[mask.bool()].permute(1, 0)  # [128, F]
    with torch.no_grad():
        return hf(flat, feature_lens=lengths).last_hidden_state  # [N, output_dim]


@pytest.mark.parametrize("seconds", [0.03, 0.37, 1.0, 2.71, 5.0])
def test_log_mel_is_the_checkpoint_feature_extractor(seconds: float) -> None:
    enc = AudioEncoder.tiny(spec(), 0, "cpu")
    samples = clip(seconds)
    features, mask = hf_features(samples)
    ours = enc.features(samples)
    assert ours.shape == (128, int(mask.sum())) == (128, samples.shape[0] // 160)
    torch.testing.assert_close(ours, features[0][:, : ours.shape[1]], rtol=0, atol=0)


def test_token_count_is_transformers_formula() -> None:
    for frames in [3, 37, 99, 100, 101, 230, 1000, 3001, 30017]:
        assert TINY.tokens(frames) == int(_get_feat_extract_output_lengths(torch.tensor(frames)))
    assert TINY.tokens_per_chunk == 13 and AudioConfig().window_tokens == 104 and WINDOWED.window_tokens == 26


@pytest.mark.parametrize("c", [TINY, WINDOWED], ids=lambda c: c.name)
@pytest.mark.parametrize("frames", [37, 100, 137, 530, 1001])
def test_tower_matches_transformers(c: AudioConfig, frames: int) -> None:
    model = randomised(c)
    hf = reference(c, model)
    mel = torch.randn(128, frames, generator=torch.Generator().manual_seed(frames))
    with torch.no_grad():
        ours = model([mel])[0]
        ref = hf(mel, feature_lens=torch.tensor([frames])).last_hidden_state
    assert ours.shape == (c.tokens(frames), c.output_dim)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_windows_are_attention_boundaries() -> None:
    """A clip longer than a window encodes differently under wider windows: the windows are real."""
    model = randomised(WINDOWED)
    wide = AudioTower(dataclasses.replace(WINDOWED, n_window_infer=800))
    wide.load_state_dict(model.state_dict())
    mel = torch.randn(128, 530)
    with torch.no_grad():
        assert not torch.allclose(model([mel])[0], wide.eval()([mel])[0], atol=1e-4)


def test_batched_calls_equal_each_alone() -> None:
    model = randomised(WINDOWED)
    mels = [torch.randn(128, f, generator=torch.Generator().manual_seed(f)) for f in (37, 250, 60, 530, 100)]
    with torch.no_grad():
        together = model(mels)
        for mel, out in zip(mels, together):
            torch.testing.assert_close(out, model([mel])[0], rtol=1e-5, atol=1e-5)


def test_encode_matches_processor_and_tower() -> None:
    """The entry end to end: samples -> the processor's features -> transformers' tower."""
    enc = AudioEncoder(spec(), 0, "cpu", config=WINDOWED, seed=3)
    hf = reference(WINDOWED, enc.model)
    clips = [clip(2.5, 1), clip(0.4, 2), clip(4.2, 3)]
    outs = enc.encode([Call(i, "", (c,)) for i, c in enumerate(clips)])
    for samples, out in zip(clips, outs):
        torch.testing.assert_close(out, hf_encode(hf, *hf_features(samples)), rtol=1e-5, atol=1e-5)
    assert [o.shape[0] for o in outs] == [33, 5, 55]


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_resampling_keeps_the_band_and_drops_what_16k_cannot_hold(rate: int) -> None:
    t_in, t_out = torch.arange(rate, dtype=torch.float64) / rate, torch.arange(16000, dtype=torch.float64) / 16000
    tone = resample(torch.sin(2 * math.pi * 440 * t_in).float(), rate, 16000)
    assert tone.shape == (16000,)
    inner = slice(200, -200)  # the edges see the zeros beyond the clip
    assert (tone.double() - torch.sin(2 * math.pi * 440 * t_out))[inner].abs().max() < 1e-3
    if rate > 2 * 11000:
        high = resample(torch.sin(2 * math.pi * 11000 * t_in).float(), rate, 16000)
        assert high[inner].abs().max() < 1e-2  # 11 kHz is above 16 kHz's Nyquist: filtered out, not aliased


def test_a_clip_at_another_rate_is_resampled_first() -> None:
    enc = AudioEncoder.tiny(spec(), 0, "cpu")
    at_44k = clip(1.5, 4, rate=44100)
    expected = enc.encode([Call(0, "", (resample(at_44k, 44100, 16000),))])[0]
    for form in [(at_44k, 44100), {"samples": at_44k.numpy(), "rate": 44100}]:
        torch.testing.assert_close(enc.encode([Call(0, "", (form,))])[0], expected, rtol=0, atol=0)
    assert expected.shape[0] == AudioConfig().tokens(150)


@pytest.mark.parametrize("bad, says", [
    ("hello", "got str"),
    (torch.zeros(4, 1000), "float32 [4, 1000]"),
    (torch.zeros(1000, dtype=torch.int16), "torch.int16"),
    (np.zeros(1000, dtype=np.int32), "int32 array"),
    (torch.zeros(100), "at least 400 samples"),
    (torch.tensor([0.0, float("nan")] * 300), "finite"),
    ((torch.zeros(1000), 0), "rate is a positive integer"),
    (torch.zeros(32, 32, 3, dtype=torch.uint8), "torch.uint8"),  # an image, not audio
])
def test_bad_clip_fails_its_own_call(bad: object, says: str) -> None:
    enc = AudioEncoder.tiny(spec(), 0, "cpu")
    with pytest.raises(CallError, match=re.escape(says)) as err:
        enc.encode([Call(3, "", (clip(1.0),)), Call(5, "", (bad,))])
    assert err.value.request == 5 and str(err.value).startswith("audio_enc.encode: ")
    assert enc.encode([Call(3, "", (clip(1.0),))])[0].shape == (13, 64)  # the rest of the batch runs again


def test_warm_up_resets_the_counters() -> None:
    enc = AudioEncoder.tiny(spec(), 0, "cpu")
    lines: list[str] = []
    enc.warm_up(lines.append)
    assert lines and enc.counters() == {"clips": 0, "tokens": 0, "forwards": 0}
    assert "AuT 1 layers x 32" in enc.describe()


def test_the_30b_tower_has_the_checkpoint_names_and_shapes() -> None:
    c = AudioConfig()
    with torch.device("meta"):
        ours = AudioTower(c)
        hf = Qwen3OmniMoeAudioEncoder._from_config(Qwen3OmniMoeAudioEncoderConfig(**c.hf_config()))
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in hf.state_dict().items()}
    assert AudioConfig.from_hf(c.hf_config()) == dataclasses.replace(c, name="checkpoint")
    assert ours.proj2.out_features == 2048 and ours.conv_out.in_features == 480 * 16


def test_the_thinker_reads_what_the_encoder_returns() -> None:
    from wgc.models.qwen3_omni.config import ThinkerConfig
    from wgc.models.qwen3_omni.thinker_media import parse

    media = parse(AudioEncoder.tiny(spec(), 0, "cpu").encode([Call(0, "", (clip(1.5),))])[0],
                  ThinkerConfig.preset("tiny"))
    assert media.kind == "audio" and media.embeds.shape == (20, 64) and media.grid is None
