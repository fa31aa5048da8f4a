"""Audio out: a model's samples as 16-bit PCM and WAV, whole or as a stream.

An audio payload is float samples in [-1, 1] (a tensor or array of any shape, read in order;
values outside are clipped) or int16 PCM already. A plain number (fake components) is one sample.
The streamed WAV header declares unknown sizes (0xFFFFFFFF), as streaming players expect.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

UNKNOWN = 0xFFFFFFFF


def to_pcm16(payload: Any) -> bytes:
    """Little-endian int16 mono samples."""
    if hasattr(payload, "detach"):
        payload = payload.detach().to("cpu")
        payload = payload.float().numpy() if payload.is_floating_point() else payload.numpy()
    arr = np.asarray(payload).reshape(-1)
    if arr.dtype == np.int16:
        return arr.astype("<i2").tobytes()
    samples = np.clip(np.nan_to_num(arr.astype(np.float64)), -1.0, 1.0)
    return (samples * 32767).round().astype("<i2").tobytes()


def wav_header(sample_rate: int, data_bytes: int | None = None) -> bytes:
    """A 44-byte RIFF/WAVE header for mono int16; `None` bytes: a stream of unknown length."""
    data = UNKNOWN if data_bytes is None else data_bytes
    riff = UNKNOWN if data_bytes is None else 36 + data_bytes
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVE" + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate,
            sample_rate * 2, 2, 16) + b"data" + struct.pack("<I", data))


def wav_file(pcm: bytes, sample_rate: int) -> bytes:
    return wav_header(sample_rate, len(pcm)) + pcm
