"""Qwen3-Omni served: models/qwen3_omni.walk compiled for placements/cpu.toml, `wgc run PLAN --serve` with
the real tiny components (thinker, talker, code2wav, audio and vision encoders), driven with the
official `openai` client.

Chat with text, audio and image parts; speech out as OpenAI's chat does it, streamed (text deltas with
the audio's transcript, base64 PCM as code2wav produces it) and whole (`message.audio`); its length is
code2wav's 1920·N − 555 samples for the N frames the talker sent (read from its counters in /health);
"length" when the talker's frame bound stopped the speech; a text-only request never starts the
talker flow; a WAV at 8 or 24 kHz reaches the audio encoder at its own rate and is resampled there;
/v1/audio/speech and /v1/generate through the same walks; the talker's speakers as voices; bad inputs
are 4xx naming their field.
"""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import torch
from wgc.models.qwen3_omni.audio import AudioEncoder
from wgc.runtime.http.media.decode import MediaLimits, audio_clip

from tests.http.server import API_KEY, Server
from wgc.plan.model import ComponentSpec

PIL = pytest.importorskip("PIL.Image")
HOP, TRIM, RATE = 1920, 555, 24000  # code2wav: samples per frame, lost once at the end; its rate
GREEDY = {"temperature": 0.0}
SPEAK = {"talker_temperature": 0.0, "talker_max_tokens": 30}  # 30 frames: a first chunk of 25 and a flush
VOICES = "Ethan, Chelsie, Aiden"


@pytest.fixture(scope="module")
def omni(qwen3_omni_plan: Path) -> Iterator[Server]:
    server = Server(qwen3_omni_plan, "--api-key", API_KEY, ready_timeout=180)
    yield server
    server.stop()


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, timeout=120, max_retries=0)


def counters(server: Server) -> dict[str, int]:
    return httpx.get(f"{server.url}/health", timeout=30).json()["ranks"][0]["counters"]


def since(before: dict[str, int], server: Server) -> dict[str, int]:
    after = counters(server)
    return {k: v - before.get(k, 0) for k, v in after.items()}


def samples_for(delta: dict[str, int]) -> tuple[int, int]:
    """(frames the talker sent to code2wav, the samples code2wav makes of them). The talker returns one
    frame more than it sends: the codec EOS, or the frame after its `max` bound."""
    frames = delta["talker.frames_out"] - 1
    return frames, HOP * frames - TRIM if frames else 0


def wav_file(rate: int, seconds: float = 1.0) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def audio_part(rate: int = 16000) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav_file(rate)).decode(), "format": "wav"}}


def image_part() -> dict[str, Any]:
    buf = io.BytesIO()
    PIL.new("RGB", (40, 48), (10, 200, 10)).save(buf, "PNG")
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()}}


def say(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_streamed_chat_sends_text_and_audio_as_they_are_produced(omni: Server) -> None:
    before = counters(omni)
    stream = client(omni).chat.completions.create(
        model="qwen3_omni", messages=say("hi"), max_tokens=4, stream=True, modalities=["text", "audio"],
        audio={"voice": "Ethan", "format": "pcm16"}, **GREEDY, extra_body={"params": SPEAK})
    text, transcript, chunks, expiry, finish = "", "", [], [], []
    for chunk in stream:
        (c,) = chunk.choices
        text += c.delta.content or ""
        if c.delta.audio is not None:
            transcript += c.delta.audio.transcript or ""
            if c.delta.audio.data:
                chunks.append(base64.b64decode(c.delta.audio.data))
            if c.delta.audio.expires_at is not None:
                expiry.append(c.delta.audio.expires_at)
        finish += [c.finish_reason] if c.finish_reason else []
    frames, samples = samples_for(since(before, omni))
    assert frames == 30 and finish == ["length"]  # the talker's bound stopped the speech
    assert len(chunks) == 2  # code2wav's first chunk of 25 frames, then the flush of 5: sent as each came
    assert sum(len(c) for c in chunks) == 2 * samples == 2 * (HOP * 30 - TRIM)  # 16-bit PCM, no hole at the boundary
    assert transcript == text and len(expiry) == 1


def test_the_whole_answer_has_message_audio_from_text_audio_and_image_parts(omni: Server) -> None:
    before = counters(omni)
    messages = [{"role": "user", "content": [audio_part(), image_part(), {"type": "text", "text": "What is this?"}]}]
    r = client(omni).chat.completions.create(model="qwen3_omni", messages=messages, max_tokens=4,
                                             modalities=["text", "audio"], audio={"voice": "Chelsie", "format": "wav"},
                                             **GREEDY, extra_body={"params": {**SPEAK, "talker_temperature": 0.9}})
    delta = since(before, omni)
    assert delta["audio_enc.clips"] == 1 and delta["vision_enc.images"] == 1
    (choice,) = r.choices
    audio = choice.message.audio
    assert audio.id.startswith("audio-") and audio.expires_at > r.created and audio.transcript == choice.message.content
    frames, samples = samples_for(delta)
    with wave.open(io.BytesIO(base64.b64decode(audio.data))) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (RATE, 1, 2)
        assert w.getnframes() == samples
    assert r.usage.completion_tokens == 4 and choice.finish_reason == "length" and frames <= 30


def test_the_talkers_bound_alone_makes_finish_reason_length(omni: Server) -> None:
    c = client(omni)
    text = c.chat.completions.create(model="qwen3_omni", messages=say("!"), max_tokens=64, **GREEDY)
    assert text.choices[0].finish_reason == "stop" and text.usage.completion_tokens < 64  # the reply ended itself
    before = counters(omni)
    spoken = c.chat.completions.create(model="qwen3_omni", messages=say("!"), max_tokens=64, **GREEDY,
                                       modalities=["text", "audio"], audio={"voice": "Aiden", "format": "pcm16"},
                                       extra_body={"params": {**SPEAK, "talker_max_tokens": 8}})
    frames, samples = samples_for(since(before, omni))
    assert frames == 8 and len(base64.b64decode(spoken.choices[0].message.audio.data)) == 2 * samples
    assert spoken.choices[0].message.content == text.choices[0].message.content
    assert spoken.choices[0].finish_reason == "length"


def test_a_text_only_request_never_starts_the_talker(omni: Server) -> None:
    before = counters(omni)
    messages = [{"role": "user", "content": [audio_part(), {"type": "text", "text": "hello"}]}]
    r = client(omni).chat.completions.create(model="qwen3_omni", messages=messages, max_tokens=6)
    delta = since(before, omni)
    assert r.choices[0].message.audio is None and r.usage.completion_tokens <= 6
    assert delta["thinker.decode.calls"] > 0 and delta["audio_enc.clips"] == 1
    talker = {k: v for k, v in delta.items() if k.startswith(("talker.", "code2wav.")) and k.endswith((".calls", "_out"))}
    assert talker and not any(talker.values()), talker


@pytest.mark.parametrize("rate", [8000, 24000])
def test_a_wav_reaches_the_audio_encoder_at_its_own_rate(omni: Server, rate: int) -> None:
    before = counters(omni)
    messages = [{"role": "user", "content": [audio_part(rate), {"type": "text", "text": "?"}]}]
    client(omni).chat.completions.create(model="qwen3_omni", messages=messages, max_tokens=1)
    assert since(before, omni)["audio_enc.tokens"] == 13  # one second: 13 positions, at 8, 16 or 24 kHz alike


def test_the_audio_encoder_resamples_the_clip_the_frontend_decodes() -> None:
    spec = ComponentSpec("audio_enc", "wgc.models.qwen3_omni.AudioEncoder", "stateless", [], {}, [], {}, [0], 1, {})
    encoder = AudioEncoder(spec, 0, "cpu")
    mel = {rate: encoder.features(audio_clip(wav_file(rate), "audio", MediaLimits())) for rate in (8000, 16000, 24000)}
    clip = audio_clip(wav_file(24000), "audio", MediaLimits())
    assert clip["rate"] == 24000 and clip["samples"].shape == (24000,) and clip["samples"].dtype == torch.float32
    assert mel[8000].shape == mel[16000].shape == mel[24000].shape == (128, 100)  # 1 s: 100 frames at 16 kHz
    assert encoder.features(clip["samples"]).shape == (128, 150)  # a bare tensor is taken as 16 kHz: 1.5 s
    assert (mel[24000] - mel[16000]).abs().max() < 0.1 and (mel[24000] - mel[16000]).abs().mean() < 0.01
    assert (mel[8000] - mel[16000]).abs().mean() < 0.01  # the same sine, resampled from either rate


def test_speech_streams_a_wav_through_the_same_walks(omni: Server) -> None:
    before = counters(omni)
    with client(omni).audio.speech.with_streaming_response.create(
            model="qwen3_omni", voice="Chelsie", input="Hello there.", response_format="wav",
            extra_body={"params": {**SPEAK, "max_tokens": 4}}) as response:
        assert response.headers["content-type"] == "audio/wav" and response.headers["x-sample-rate"] == str(RATE)
        data = b"".join(response.iter_bytes())
    delta = since(before, omni)
    frames, samples = samples_for(delta)
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE" and frames == 30
    with wave.open(io.BytesIO(data[:44])) as w:
        assert w.getframerate() == RATE
    assert (len(data) - 44) // 2 == samples and delta["thinker.begin_reply.calls"] == 1


def test_the_native_route_reports_which_loop_was_cut(omni: Server) -> None:
    r = httpx.post(f"{omni.url}/v1/generate", timeout=120, headers={"authorization": f"Bearer {API_KEY}"},
                   json={"model": "qwen3_omni", "parts": [{"kind": "text", "data": "hi"}], "outputs": ["text", "audio"],
                         "params": {**SPEAK, **GREEDY, "max_tokens": 3, "talker_max_tokens": 5, "speaker": "Aiden"},
                         "stream": False, "tensor_encoding": "base64"})
    assert r.status_code == 200, r.text
    events = r.json()["events"]
    audio = [e for e in events if e.get("modality") == "audio"]
    assert sum(e.get("modality") == "text" for e in events) == 3
    assert [e["shape"] for e in audio] == [[HOP * 5 - TRIM]] and audio[0]["dtype"] == "float32"
    assert events[-1]["type"] == "done" and sorted(events[-1]["cut"]) == ["talker_decode", "thinker_decode"]


def _refused(call: Any) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as err:
        call()
    return err.value


@pytest.mark.parametrize(("make", "status", "param", "says"), [
    (lambda c: c.chat.completions.create(model="qwen3_omni", messages=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"not a wav at all").decode(),
                                                "format": "wav"}}]}]),
     400, "messages[0].content[0]", "not a readable WAV"),
    (lambda c: c.chat.completions.create(model="qwen3_omni", messages=say("hi"), modalities=["text", "audio"],
                                         audio={"voice": "nova", "format": "wav"}), 400, "audio.voice", VOICES),
    (lambda c: c.audio.speech.create(model="qwen3_omni", voice="nova", input="hi"), 400, "voice", VOICES),
    (lambda c: c.chat.completions.create(model="qwen3_omni", messages=say("hi"), modalities=["text", "audio"],
                                         audio={"voice": "Ethan", "format": "mp3"}), 422, "audio.format", "wav"),
    (lambda c: c.audio.speech.create(model="qwen3_omni", voice="Ethan", input="hi", response_format="mp3"),
     422, "response_format", "wav"),
    (lambda c: c.chat.completions.create(model="qwen3_omni", messages=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "mp3"}}]}]), 422, "format", "wav"),
])
def test_bad_inputs_are_4xx_naming_the_field(omni: Server, make: Any, status: int, param: str, says: str) -> None:
    err = _refused(lambda: make(client(omni)))
    body = err.body if isinstance(err.body, dict) else {}
    assert err.status_code == status and param in str(body.get("param")) and says in str(body.get("message")), body


def test_an_unknown_speaker_param_is_refused_before_any_rank(omni: Server) -> None:
    before = counters(omni)
    r = httpx.post(f"{omni.url}/v1/generate", timeout=30, headers={"authorization": f"Bearer {API_KEY}"},
                   json={"model": "qwen3_omni", "parts": [{"kind": "text", "data": "hi"}], "outputs": ["audio"],
                         "params": {"speaker": "nova"}})
    assert 400 <= r.status_code < 500 and r.json()["error"]["param"] == "params.speaker", r.text
    assert since(before, omni)["thinker.prefill_text.calls"] == 0
