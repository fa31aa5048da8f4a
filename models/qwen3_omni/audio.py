"""`audio_enc` of models/qwen3_omni.walk: Qwen3-Omni's audio tower (AuT) over 128-bin log-mel.

encode(clip) -> [N, output_dim]: the clip at 16 kHz (audio_features.py: resampled when it comes at
another rate), its log-mel from transformers' WhisperFeatureExtractor, then the tower as transformers
implements it (`Qwen3OmniMoeAudioEncoder`; models-wave2 §2.1): the frames cut into chunks of 100,
each chunk through three stride-2 Conv2d of `downsample` channels with GELU (a chunk of 100 frames
becomes 13 positions), `conv_out` (no bias) over channels x remaining bins, plus a sinusoid position
per position within the chunk; the clip's valid positions, packed, through `layers` pre-LayerNorm
encoder layers attending within windows of 104 tokens (audio_config.py), then `ln_post`, `proj1`,
GELU and `proj2` into the thinker's width. N = audio_config.tokens(frames): 13 per second.

Each clip is encoded as transformers encodes it alone: a clip of at least one full chunk has its last
chunk zero-padded to 100 frames before the convolutions, a shorter clip is not padded (the padding
changes the conv outputs at a chunk's last valid positions, since a padded position holds
GELU(bias) after the first conv, not zero). Batching: chunks of the same padded length from every
call run through the convolutions together; all calls' tokens then form one pack (segments.py).

Parameter names are the checkpoint's with `thinker.audio_tower.` dropped: conv2d1..3, conv_out,
layers.{i}.self_attn.{q,k,v,out}_proj, layers.{i}.self_attn_layer_norm, layers.{i}.fc1/fc2,
layers.{i}.final_layer_norm, ln_post, proj1, proj2. The sinusoid table is computed, not stored.
A Qwen3-Omni directory (`weights=` or WGC_QWEN3_OMNI_DIR) gives them and the configs (weights.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models.layers.dtypes import compute_dtype
from wgc.models.layers.presets import TinyPreset
from wgc.models.qwen3_omni.audio_config import SAMPLE_RATE, AudioConfig, conv_length
from wgc.models.qwen3_omni.audio_features import log_mel, to_16k
from wgc.models.qwen3_omni.segments import Segments
from wgc.models.qwen3_omni.weights import KNOB, Checkpoint
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import Call, CallError, Component

from wgc.plan.model import ComponentSpec


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> Tensor:
    """[length, channels]: sin then cos of position x timescale, Whisper's encoder table (on CPU: real
    even when the tower is built on meta)."""
    step = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2, device="cpu").float())  # [channels / 2]
    angles = torch.arange(length, device="cpu").float()[:, None] * inv[None, :]  # [length, channels / 2]
    return torch.cat([angles.sin(), angles.cos()], dim=1)  # [length, channels]


class AudioAttention(nn.Module):
    def __init__(self, c: AudioConfig) -> None:
        super().__init__()
        self.heads, self.head_dim = c.heads, c.head_dim
        self.q_proj = nn.Linear(c.d_model, c.d_model)
        self.k_proj = nn.Linear(c.d_model, c.d_model)
        self.v_proj = nn.Linear(c.d_model, c.d_model)
        self.out_proj = nn.Linear(c.d_model, c.d_model)

    def forward(self, x: Tensor, segments: Segments) -> Tensor:
        shape = (-1, self.heads, self.head_dim)
        q, k, v = self.q_proj(x).view(shape), self.k_proj(x).view(shape), self.v_proj(x).view(shape)  # [T, H, d]
        return self.out_proj(segments.attend(q, k, v).flatten(1))  # [T, d_model]


class AudioLayer(nn.Module):
    def __init__(self, c: AudioConfig) -> None:
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(c.d_model, eps=c.eps)
        self.self_attn = AudioAttention(c)
        self.final_layer_norm = nn.LayerNorm(c.d_model, eps=c.eps)
        self.fc1 = nn.Linear(c.d_model, c.ffn)
        self.fc2 = nn.Linear(c.ffn, c.d_model)

    def forward(self, x: Tensor, segments: Segments) -> Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), segments)  # [T, d_model]
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))  # [T, d_model]


class AudioTower(nn.Module):
    """The tower from log-mel to the thinker's width; `forward` takes several clips' features."""

    def __init__(self, c: AudioConfig) -> None:
        super().__init__()
        self.config = c
        self.conv2d1 = nn.Conv2d(1, c.downsample, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(c.downsample, c.downsample, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(c.downsample, c.downsample, 3, 2, padding=1)
        self.conv_out = nn.Linear(c.conv_features, c.d_model, bias=False)
        self.register_buffer("positions", sinusoids(c.tokens_per_chunk, c.d_model), persistent=False)
        self.layers = nn.ModuleList(AudioLayer(c) for _ in range(c.layers))
        self.ln_post = nn.LayerNorm(c.d_model, eps=c.eps)
        self.proj1 = nn.Linear(c.d_model, c.d_model)
        self.proj2 = nn.Linear(c.d_model, c.output_dim)

    def convolve(self, chunks: Tensor) -> Tensor:
        """chunks [B, bins, L] (zero-padded) -> [B, conv_length(L), d_model], positions added."""
        outs = []
        for part in chunks[:, None].split(self.config.conv_batch):  # [b, 1, bins, L]
            x = F.gelu(self.conv2d1(part))
            x = F.gelu(self.conv2d2(x))
            outs.append(F.gelu(self.conv2d3(x)))  # [b, C, bins', L']
        x = torch.cat(outs) if len(outs) > 1 else outs[0]
        x = self.conv_out(x.permute(0, 3, 1, 2).flatten(2))  # [B, L', C * bins'] -> [B, L', d_model]
        return x + self.positions[: x.shape[1]].to(x.dtype)  # [B, L', d_model]

    def embed(self, mels: list[Tensor]) -> Tensor:
        """Clips' log-mel [bins, F_i] -> their valid conv positions, packed in call order [T, d_model]."""
        c = self.config
        pieces: list[tuple[int, int, int, int]] = []  # (clip, start frame, frames, padded length)
        for i, mel in enumerate(mels):
            frames = mel.shape[1]
            padded = c.chunk_frames if frames >= c.chunk_frames else frames
            at = 0
            for n in c.chunks(frames):
                pieces.append((i, at, n, padded))
                at += n
        outputs: list[Tensor | None] = [None] * len(pieces)
        for length in sorted({p[3] for p in pieces}):
            which = [j for j, p in enumerate(pieces) if p[3] == length]
            batch = torch.stack([F.pad(mels[pieces[j][0]][:, pieces[j][1]:pieces[j][1] + pieces[j][2]],
                                       (0, length - pieces[j][2])) for j in which])  # [B, bins, length]
            out = self.convolve(batch)  # [B, L', d_model]
            for row, j in enumerate(which):
                outputs[j] = out[row, : conv_length(pieces[j][2])]  # [tokens, d_model]
        return torch.cat(outputs)  # type: ignore[arg-type]  # [T, d_model]

    def forward(self, mels: list[Tensor]) -> list[Tensor]:
        """Clips' log-mel [bins, F_i] (the tower's dtype) -> [tokens(F_i), output_dim] each."""
        c = self.config
        tokens = [c.tokens(mel.shape[1]) for mel in mels]
        x = self.embed(mels)  # [T, d_model]
        segments = Segments([w for n in tokens for w in c.windows(n)], x.device)
        for layer in self.layers:
            x = layer(x, segments)
        x = self.proj2(F.gelu(self.proj1(self.ln_post(x))))  # [T, output_dim]
        return list(x.split(tokens))


def random_tower(c: AudioConfig, seed: int = 0, device: torch.device | str = "cpu") -> AudioTower:
    """AudioTower with torch's default initialisation from `seed` (global RNG state untouched)."""
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        return AudioTower(c).to(device)  # the position table was computed on CPU




class AudioEncoder(TinyPreset, Component):
    """Stateless: encode(clip: audio) -> tensor [N, output_dim], N = 13 tokens per second of audio."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: AudioConfig | None = None, seed: int = 0) -> None:
        """Weights from `weights` (a Qwen3-Omni directory: `thinker.audio_tower.*`, audio_config and the
        processor's log-mel settings, weights.py), else random ones for `config` or `preset`, else from
        WGC_QWEN3_OMNI_DIR, else the tiny preset's."""
        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        self.dtype = compute_dtype(spec, self.torch_device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        if directory is not None:
            checkpoint = Checkpoint(directory)
            self.config = c = checkpoint.audio_config
            self.model = checkpoint.load("audio", lambda: AudioTower(c), self.torch_device, self.dtype)
            self.source = f"{directory} (thinker.audio_tower.*)"
        else:
            self.config = config or AudioConfig.preset(preset or "tiny")
            self.model = random_tower(self.config, seed, self.torch_device).to(self.dtype).eval()
            self.source = f"{self.config.name} preset, random weights (seed {seed})"
        self.extractor = self.config.mel.extractor()
        self.stats = {"clips": 0, "tokens": 0, "forwards": 0}
        announce("qwen3_omni", spec.name, KNOB if fallback else None, "the tiny preset", self.source, self._what())

    def describe(self) -> str:
        return f"{self.source}; {self._what()}"

    def _what(self) -> str:
        c = self.config
        return (f"AuT {c.layers} layers x {c.d_model}, {c.mel_bins} mel bins at {SAMPLE_RATE} Hz, "
                f"into {c.output_dim} on {self.device}")

    def features(self, clip: Any) -> Tensor:
        """One clip in any accepted form -> its log-mel [bins, frames]; ValueError for a bad clip."""
        return log_mel(to_16k(clip), self.config.mel, self.extractor)

    def encode(self, calls: list[Call]) -> list[Tensor]:
        mels = []
        for call in calls:
            try:
                mels.append(self.features(call.args[0]))
            except ValueError as err:
                raise CallError(call.request, f"{self.spec.name}.encode: {err}") from None
        return self.encode_features(mels)

    def encode_features(self, mels: list[Tensor]) -> list[Tensor]:
        """Log-mel features [bins, F_i] -> one [N_i, output_dim] tensor each, in order."""
        with torch.no_grad():  # not inference_mode: the thinker may write into these tensors outside it
            out = self.model([m.to(self.torch_device, self.dtype) for m in mels])
        self.stats["clips"] += len(mels)
        self.stats["tokens"] += sum(int(o.shape[0]) for o in out)
        self.stats["forwards"] += 1
        return out

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """Encode 2.5 s of silence: both chunk shapes (a full chunk and a short tail)."""
        self.encode([Call(0, "", (torch.zeros(SAMPLE_RATE * 5 // 2),))])
        self.stats = dict.fromkeys(self.stats, 0)  # counters count requests' clips only
        progress("encoded 2.5 s of audio")

    def counters(self) -> dict[str, int]:
        return dict(self.stats)
