"""A client's mistakes are 4xx naming the field, never a 500, and leave no traceback in the server's log:
a lone surrogate in the text, an image header claiming 200 megapixels, a WAV cut inside a sample, a
10 MB model name (echoed cut short), booleans written as "yes" or 0; a stream that fails after it began
ends in its own format with one line in the log."""

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


@pytest.fixture(scope="module")
def toy(toy_plan: Path) -> Iterator[Server]:
    server = Server(toy_plan)
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


def test_a_10mb_model_name_is_not_echoed_in_full(omni: Server) -> None:
    r = _chat(omni, "hi", model="m" * 10**7)
    err = r.json()["error"]
    assert r.status_code == 404 and err["code"] == "model_not_found"
    assert len(r.content) < 2000 and "m" * 64 + "…`" in err["message"]
    r = httpx.get(f"{omni.url}/v1/models/{'m' * 5000}")
    assert r.status_code == 404 and len(r.content) < 2000


def test_booleans_are_true_or_false_only(omni: Server) -> None:
    for value in ("yes", 0, 1, "true"):
        for path, body in (("/v1/chat/completions", {"model": "qwen3_omni", "stream": value,
                                                     "messages": [{"role": "user", "content": "hi"}]}),
                           ("/v1/audio/speech", {"model": "qwen3_omni", "voice": "Ethan", "input": "x",
                                                 "stream": value}),
                           ("/v1/generate", {"stream": value})):
            r = _post(omni, path, body)
            assert r.status_code == 422 and r.json()["error"]["param"] == "stream", (path, value, r.text)
    r = _chat(omni, "hi", stream=True, stream_options={"include_usage": "yes"})
    assert r.status_code == 422 and r.json()["error"]["param"] == "stream_options.include_usage"


def test_a_stream_that_fails_mid_way_ends_in_its_format_with_one_log_line(toy: Server) -> None:
    slow = {"timeout": 1, "params": {"delay_ms": 20, "max_tokens": 256}}  # ~5 s of tokens, cut at 1 s
    chat = _post(toy, "/v1/chat/completions", {"model": "toy", "stream": True, "max_tokens": 256,
                                               "messages": [{"role": "user", "content": "tell me " * 40}], **slow})
    assert chat.status_code == 200 and '"code":"request_timeout"' in chat.text.splitlines()[-2]
    ndjson = _post(toy, "/v1/generate", {"parts": [{"kind": "text", "data": "<|user|>" + "tell me " * 40}], **slow})
    assert json.loads(ndjson.text.splitlines()[-1])["type"] == "error"
    sse = _post(toy, "/v1/audio/speech", {"model": "toy", "voice": "alto", "input": "tell me " * 40,
                                          "stream_format": "sse", **slow})
    assert json.loads(sse.text.strip().splitlines()[-1][6:])["type"] == "error"
    with pytest.raises(httpx.RemoteProtocolError):  # raw audio has no error frame: the body is cut off
        _post(toy, "/v1/audio/speech", {"model": "toy", "voice": "alto", "input": "tell me " * 40, **slow})
    lines = [line for line in toy.errors().splitlines() if "stream ended early" in line]
    assert len(lines) == 4 and all("request_timeout" in line for line in lines)
    _no_traceback(toy)
    assert "without completing response" not in toy.errors()
