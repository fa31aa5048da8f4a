"""`wgc run PLAN --request JSON -o DIR`: each request's outputs as files a person can open.

    out/audio.wav  audio: 1.54 s, 16-bit mono at 6000 Hz (18.5 KB)
    out/text.txt   text: 12 tokens, 40 characters (40 B)
    out/image.png  image: 512x512 RGB (301.2 KB)
    out/action.npy action: float32 [4, 2] (160 B)

Streams are concatenated, one file per modality and request: every audio window into one WAV
(16-bit mono at the audio emitter's sample rate, as /v1/audio/speech sends it), every text token
into one UTF-8 .txt (decoded as chat decodes, end tokens left out). Each image is a PNG and each
other output (actions, embeddings, tensors) an .npy, numbered from the second on (image.png,
image-2.png, ...). One request writes into DIR itself; several (or `--request -`) write request n
into DIR/n/. A request's files are written when it ends (also when it fails: what came is kept).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wgc.plan.model import Plan
from wgc.runtime.api import OutputEvent
from wgc.runtime.http.media.audio import to_pcm16, wav_file
from wgc.runtime.http.media.png import encode_png, to_pixels
from wgc.runtime.http.serving.capabilities import Capabilities
from wgc.runtime.http.serving.outputs import OutputFormats
from wgc.runtime.http.text.choice import token_ids
from wgc.runtime.http.text.detok import Detokenizer

DEFAULT_IMAGE_SIZE = 256  # a fake component's image (a plain number) without width/height params
_CHANNELS = {1: "grey", 2: "grey+alpha", 3: "RGB", 4: "RGBA"}


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.1f} MB"


def _array(payload: Any) -> np.ndarray:
    if hasattr(payload, "detach"):
        t = payload.detach().to("cpu")
        try:
            return t.numpy()
        except TypeError:  # bfloat16 and the other dtypes numpy lacks: as float32
            return t.float().numpy()
    return np.asarray(payload)


@dataclass
class RequestFiles:
    """One request's outputs, gathered as they come and written when it ends."""

    directory: Path
    formats: OutputFormats
    image_size: tuple[int, int]
    pcm: list[bytes] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    others: list[OutputEvent] = field(default_factory=list)

    def add(self, event: OutputEvent) -> None:
        if event.modality == "audio":
            self.pcm.append(to_pcm16(event.payload))
        elif event.modality == "text":
            self.tokens += [t for t in token_ids(event.payload) if t not in self.formats.end_ids]
        else:
            self.others.append(event)

    def write(self) -> list[str]:
        """Write every file; one line per file: its path, what it holds, its size."""
        self.directory.mkdir(parents=True, exist_ok=True)
        lines = []
        if self.pcm:
            lines.append(self._audio())
        if self.tokens:
            lines.append(self._text())
        counts: dict[str, int] = {}
        for event in self.others:
            counts[event.modality] = counts.get(event.modality, 0) + 1
            lines.append(self._other(event, counts[event.modality]))
        return lines

    def _put(self, name: str, data: bytes, what: str) -> str:
        path = self.directory / name
        path.write_bytes(data)
        return f"{path}  {what} ({_size(len(data))})"

    def _audio(self) -> str:
        pcm, rate = b"".join(self.pcm), self.formats.sample_rate
        seconds = len(pcm) / 2 / rate
        return self._put("audio.wav", wav_file(pcm, rate), f"audio: {seconds:.2f} s, 16-bit mono at {rate} Hz")

    def _text(self) -> str:
        detok = Detokenizer(self.formats.tokenizer)
        text = detok.push(self.tokens) + detok.finish()
        return self._put("text.txt", text.encode("utf-8"), f"text: {len(self.tokens)} tokens, {len(text)} characters")

    def _other(self, event: OutputEvent, number: int) -> str:
        stem = _safe(event.modality) + ("" if number == 1 else f"-{number}")
        if event.modality == "image":
            pixels = to_pixels(event.payload, self.image_size)
            h, w, c = pixels.shape
            return self._put(f"{stem}.png", encode_png(pixels), f"image: {w}x{h} {_CHANNELS[c]}")
        arr = _array(event.payload)
        buf = _npy(arr)
        return self._put(f"{stem}.npy", buf, f"{event.modality}: {arr.dtype} {list(arr.shape)}")


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name) or "output"


def _npy(arr: np.ndarray) -> bytes:
    import io

    out = io.BytesIO()
    np.save(out, arr, allow_pickle=False)
    return out.getvalue()


class OutputDirectory:
    """Where `wgc run -o DIR` puts each request's files."""

    def __init__(self, root: str, plan: Plan, fake: bool, single: bool) -> None:
        self.root = Path(root)
        self.plan = plan
        self.single = single  # one request: its files go into DIR itself
        self.formats = OutputFormats.of(Capabilities.of(plan), fake)

    def request(self, number: int, doc: dict[str, Any]) -> RequestFiles:
        params = {p.name: p.default for p in self.plan.params} | dict(doc.get("params") or {})
        size = (_int(params.get("width")), _int(params.get("height")))
        directory = self.root if self.single else self.root / str(number)
        return RequestFiles(directory, self.formats, size)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_IMAGE_SIZE
