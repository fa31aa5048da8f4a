"""`code2wav` of models/qwen3_omni.walk: codec frames to 24 kHz audio, one left_context chunk at a time.

The walk's `frames` stream is `left_context(left=25, chunk=25) at_end flush`: chunk 0 is frames 0..24
with no context, chunk j ≥ 1 is 25 context frames and then 25 new ones, and the last chunk (the
flush) has fewer new frames. `decode` returns the samples of a chunk's new frames only
(code2wav_config.py has the arithmetic): all 1920·n − 555 of a first chunk of n frames, the last
1920·(n − 25) of a later one. A streamed utterance of N frames is then 1920·N − 555 samples, as one
decode of all N frames, with no hole or overlap at a chunk boundary (transformers' `chunked_decode`
instead cuts `context·1920` and loses 555 samples at each boundary).

Batching: every call of a round runs in one forward per padded length. A chunk is padded at its
end (code 0 frames) to the next full chunk length (25, or 50 with context) and its rows to the next
batch bucket (1, 2, 4, 8, then multiples of 8): since no kept sample reads a later frame, padding
changes none of them, and the network sees only the shapes `warm_up` built before the first request.

Presets: with a weights directory (argument, or WGC_QWEN3_OMNI_DIR) the checkpoint's `code2wav.*`
tensors and `code2wav_config` (weights.py), in float32; else `tiny` (code2wav_config.py) on random
weights, 1920 samples per frame at 24 kHz like the real one, whose streamed audio equals one decode
sample for sample.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from wgc.models.layers.presets import TinyPreset
from wgc.models.qwen3_omni.code2wav_config import SAMPLE_RATE, Code2WavConfig, StreamWindows
from wgc.models.qwen3_omni.code2wav_net import Code2WavNet, tiny_init
from wgc.models.qwen3_omni.weights import KNOB, Checkpoint
from wgc.models.weights_io import announce, choose, one_line
from wgc.runtime.components.base import Call, CallError, Component

from wgc.plan.model import ComponentSpec

DEFAULT_MAX_BATCH = 16  # when the plan sets no max_batch for code2wav


class Code2Wav(TinyPreset, Component):
    """Stateless: decode(frames: token[N, 16]) -> audio, the samples of the chunk's new frames
    (1-D float32 in [−1, 1] at 24 kHz)."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: Code2WavConfig | None = None,
                 windows: StreamWindows | None = None) -> None:
        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        if directory is not None:
            checkpoint = Checkpoint(directory)
            c = checkpoint.code2wav_config
            self.net = checkpoint.load("code2wav", lambda: Code2WavNet(c), self.torch_device, torch.float32)
            self.source = f"{directory} (code2wav.*)"
        else:
            config = config or Code2WavConfig.preset(preset or "tiny")
            self.net = tiny_init(Code2WavNet(config)).to(self.torch_device)
            self.source = f"{config.name} preset, random weights"
        self.net.eval()
        self.config = self.net.config
        self.windows = windows or StreamWindows()
        self.sample_rate = SAMPLE_RATE
        self.buckets = batch_buckets(int(spec.settings.get("max_batch", 0) or 0) or DEFAULT_MAX_BATCH)
        self.stats = {"windows": 0, "samples": 0}
        c, w = self.config, self.windows
        exact = "equal to one decode" if c.left_reach_frames() < w.left else "approximating one decode"
        self.what = (f"{c.hop} samples per frame at {SAMPLE_RATE} Hz, left_context({w.left}, {w.chunk}) chunks "
                     f"{exact} (left reach {c.left_reach_frames():.1f} frames) on {device}")
        announce("qwen3_omni", spec.name, KNOB if fallback else None, "the tiny code2wav", self.source, self.what)

    def describe(self) -> str:
        return f"{self.source}; {self.what}"

    def counters(self) -> dict[str, int]:
        return dict(self.stats)

    # ---- the entry -----------------------------------------------------------------------------------

    def decode(self, calls: list[Call]) -> list[Tensor]:
        chunks = [self.frames_of(call) for call in calls]
        return self.decode_chunks(chunks)

    def kept(self, frames: int) -> tuple[int, int]:
        """[start, end) of the samples of a chunk of `frames` frames that belong to its new frames."""
        context = self.windows.context(frames)
        return self.config.samples(context), self.config.samples(frames)

    def decode_chunks(self, chunks: list[Tensor]) -> list[Tensor]:
        """Chunks [n, num_quantizers] → each one's kept samples [1920·new (− 555 for a first chunk)]."""
        out: list[Tensor] = [torch.empty(0)] * len(chunks)
        groups: dict[int, list[int]] = {}
        for i, chunk in enumerate(chunks):
            full = next(n for n in self.windows.lengths if n >= len(chunk))
            groups.setdefault(full, []).append(i)
        for full, rows in groups.items():
            batch = torch.zeros(len(rows), full, self.config.num_quantizers, dtype=torch.int64)  # [B, full, Q]
            for row, i in enumerate(rows):
                batch[row, :len(chunks[i])] = chunks[i]
            audio = self.decode_frames(batch)  # [B, samples(full)]
            for row, i in enumerate(rows):
                start, end = self.kept(len(chunks[i]))
                out[i] = audio[row, start:end].clone()
        self.stats["windows"] += len(chunks)
        self.stats["samples"] += sum(len(a) for a in out)
        return out

    def decode_frames(self, codes: Tensor) -> Tensor:
        """[B, T, num_quantizers] codes → [B, 1920·T − 555] float32 on CPU: one decode of each row. Rows are
        padded (copies of the first) to the next batch bucket and dropped after."""
        rows = codes.shape[0]
        padded = next((b for b in self.buckets if b >= rows), rows)
        if padded > rows:
            codes = torch.cat([codes, codes[:1].expand(padded - rows, -1, -1)])
        with torch.inference_mode():
            audio = self.net(codes.to(self.torch_device))  # [padded, samples]
        return audio[:rows].float().cpu()

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """Decode every full chunk length at every batch bucket, largest first."""
        for length in self.windows.lengths:
            for bucket in sorted(self.buckets, reverse=True):
                self.decode_frames(torch.zeros(bucket, length, self.config.num_quantizers, dtype=torch.int64))
        progress(f"decoded chunks of {','.join(map(str, self.windows.lengths))} frames at batch sizes "
                 f"{','.join(map(str, self.buckets))}")

    def frames_of(self, call: Call) -> Tensor:
        """The call's chunk as codes [n, num_quantizers]; a chunk that cannot be one fails its request only."""
        c = self.config
        try:
            codes = _as_codes(call.args[0])
        except (TypeError, ValueError, RuntimeError) as err:
            raise CallError(call.request, f"code2wav.decode: the chunk is not a list of codec frames "
                                          f"({one_line(err)})") from None
        if codes.dim() != 2 or codes.shape[1] != c.num_quantizers:
            raise CallError(call.request, f"code2wav.decode: a chunk is frames of {c.num_quantizers} codes, "
                                          f"got shape {list(codes.shape)}")
        try:
            self.windows.context(codes.shape[0])
        except ValueError as err:
            raise CallError(call.request, f"code2wav.decode: {err}") from None
        bad = (codes < 0) | (codes >= c.codebook_size)
        if bad.any():
            frame, q = (int(v) for v in bad.nonzero()[0])
            raise CallError(call.request, f"code2wav.decode: frame {frame} of the chunk has code "
                                          f"{int(codes[frame, q])} in codebook {q}, outside 0..{c.codebook_size - 1}")
        return codes


def _as_codes(chunk: Any) -> Tensor:
    if isinstance(chunk, Tensor):
        return chunk.to(torch.int64)
    items = list(chunk)
    if items and all(isinstance(item, Tensor) for item in items):
        return torch.stack([item.reshape(-1) for item in items]).to(torch.int64)
    return torch.as_tensor(items, dtype=torch.int64)


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 8, up to max_batch (always one of them)."""
    return [*(b for b in (1, 2, 4) if b < max_batch), *range(8, max_batch, 8), max_batch]
