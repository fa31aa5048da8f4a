"""Orpheus end to end: the compiled models/orpheus.walk served with its real tiny components.

`wgc compile models/orpheus.walk --placement placements/cpu.toml` then `wgc run PLAN --serve`;
the official `openai` client streams speech and gets a valid WAV; eight concurrent streams all
complete with valid audio.
"""

from __future__ import annotations

import io
import json
import wave
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.http.server import API_KEY, ROOT, Server, compile_plan


@pytest.fixture(scope="module")
def orpheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    plan = compile_plan(tmp_path_factory.mktemp("orpheus"), ROOT / "models" / "orpheus.walk")
    server = Server(plan, "--api-key", API_KEY, ready_timeout=120)
    yield server
    server.stop()


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, timeout=120, max_retries=0)


def speak(server: Server, text: str) -> bytes:
    with client(server).audio.speech.with_streaming_response.create(
            model="orpheus", voice="tara", input=text, response_format="wav",
            extra_body={"params": {"max_tokens": 84}}) as response:
        assert response.headers["content-type"].startswith("audio/")
        return b"".join(response.iter_bytes())


def frames(wav_bytes: bytes) -> tuple[int, int]:
    # A streamed WAV cannot know its length up front: read the samples after the 44-byte header.
    with wave.open(io.BytesIO(wav_bytes[:44] + b"")) as w:
        rate = w.getframerate()
    return rate, (len(wav_bytes) - 44) // 2


def test_streamed_speech_is_a_valid_wav_of_whole_windows(orpheus: Server) -> None:
    data = speak(orpheus, "Hello from wgc.")
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    rate, samples = frames(data)
    assert rate == 6000  # the tiny SNAC's nominal rate (24 kHz with real weights)
    # 84 tokens = 12 frames; sliding(28, 7) gives 1 + (84 - 28) // 7 = 9 windows of 512 samples each.
    assert samples == 9 * 512


def test_eight_concurrent_speech_streams_all_complete(orpheus: Server) -> None:
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: speak(orpheus, f"voice number {i}"), range(8)))
    assert all(frames(r) == (6000, 9 * 512) for r in results)


def test_an_over_long_prompt_among_good_ones_fails_alone_with_its_own_limit(orpheus: Server) -> None:
    def bad() -> tuple[int, str]:
        response = httpx.post(f"{orpheus.url}/v1/audio/speech", timeout=120,
                              headers={"authorization": f"Bearer {API_KEY}"},
                              json={"model": "orpheus", "voice": "tara", "input": "word " * 1000,
                                    "response_format": "wav", "params": {"max_tokens": 84}})
        return response.status_code, response.text

    with ThreadPoolExecutor(5) as pool:
        goods = [pool.submit(speak, orpheus, f"good request {i}") for i in range(4)]
        status, body = pool.submit(bad).result()
        results = [g.result() for g in goods]
    assert all(frames(r) == (6000, 9 * 512) for r in results)
    assert 400 <= status < 500, body
    assert "5012 tokens, more than the model's 4096 positions" in body
    assert "request " not in json.loads(body)["error"]["message"]  # its own limit, no other request named


def test_metrics_count_the_schedulers_events(orpheus: Server) -> None:
    speak(orpheus, "counted")
    text = httpx.get(f"{orpheus.url}/metrics").text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    rank = (("rank", "0"),)
    for name in ("preemptions", "deferred_calls", "partial_calls", "calls_failed_alone"):
        assert (f"wgc_scheduler_{name}_total", rank) in samples
    assert samples[("wgc_prefix_cache_tokens_total", (("component", "llm"), ("outcome", "queried"), *rank))] > 0
    assert ("wgc_prefix_cache_tokens_total", (("component", "llm"), ("outcome", "hit"), *rank)) in samples
