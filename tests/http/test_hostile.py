"""A client's mistakes are 4xx naming the field, never a 500, and leave no traceback in the server's log:
a lone surrogate in the text, an image header claiming 200 megapixels, a WAV cut inside a sample."""

from __future__ import annotations

import base64
import io
import json
import struct
import wave
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http.server import Server


@pytest.fixture(scope="module")
def omni(qwen3_omni_plan: Path) -> Iterator[Server]:
    """Qwen3-Omni on fake components: chat with image and audio parts, speech."""
    server = Server(qwen3_omni_plan, "--fake")
    yield server
    server.stop()



def _post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    # json.dumps writes a lone surrogate as the escape \ud800, as a careless client would.
    return httpx.post(f"{server.url}{path}", content=json.dumps(body), timeout=30,
                      headers={"content-type": "application/json"})


def _chat(server: Server, content: Any, **fields: Any) -> httpx.Response:
    return _post(server, "/v1/chat/completions", {"model": server.ready["model"], "max_tokens": 4,
                                                  "messages": [{"role": "user", "content": content}], **fields})


def _png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def _wav_cut_inside_a_sample() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\1\0" * 100)
    return buf.getvalue()[:-1]  # the header still says 200 bytes of data


def _no_traceback(server: Server) -> None:
    log = server.errors()
    assert "Traceback" not in log and "response already started" not in log, log[-3000:]


def test_the_three_inputs_that_answered_500_are_4xx_naming_the_field(omni: Server) -> None:
    r = _chat(omni, "a\ud800b")
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "messages[0].content" and "lone surrogate" in r.json()["error"]["message"]
    image = base64.b64encode(_png_header(20000, 10000)).decode()  # 200 MP in its header, 100 bytes on the wire
    r = _chat(omni, [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}}])
    assert r.status_code == 413 and r.json()["error"]["code"] == "media_too_large", r.text
    assert r.json()["error"]["param"] == "messages[0].content[0]"
    audio = base64.b64encode(_wav_cut_inside_a_sample()).decode()
    r = _chat(omni, [{"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}}])
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_media", r.text
    assert "ends inside a sample" in r.json()["error"]["message"]
    for path, body in (("/v1/audio/speech", {"model": "qwen3_omni", "voice": "Ethan", "input": "\udc00"}),
                       ("/v1/generate", {"parts": [{"kind": "text", "data": "x\ud83d"}]})):
        r = _post(omni, path, body)
        assert r.status_code in (400, 422) and r.json()["error"]["param"] in ("input", "parts[0].data"), r.text
    _no_traceback(omni)
