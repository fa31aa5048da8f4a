"""httpx against a real server: the native NDJSON route, metrics, the OpenAPI document, limits, and a
real model's plan on fake components."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.http.server import Server


def lines(response: httpx.Response) -> list[dict]:
    return [json.loads(line) for line in response.iter_lines() if line]


def test_generate_streams_typed_events_for_actions_and_tensors(toy: Server, headers: dict[str, str]) -> None:
    with httpx.stream("POST", f"{toy.url}/v1/generate", json={"task": "act", "params": {"seed": 2}},
                      headers=headers, timeout=20) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        events = lines(r)
    assert [e["type"] for e in events] == ["start", "output", "output", "done"]
    action, tensor = events[1], events[2]
    assert (action["modality"], action["shape"], action["dtype"]) == ("action", [4, 2], "float32")
    assert action["data"] == [[2.0, 3.0], [4.0, 5.0], [6.0, 7.0], [8.0, 9.0]]
    assert (tensor["modality"], tensor["data"], tensor["dtype"]) == ("tensor", [3, 6, 9], "int64")
    assert events[3]["outputs"] == 2 and events[3]["t_first"] <= events[3]["t"]


def test_generate_raw_base64_tensors_and_text(toy: Server, headers: dict[str, str]) -> None:
    r = httpx.post(f"{toy.url}/v1/generate", headers=headers, timeout=20, json={
        "task": "act", "stream": False, "tensor_encoding": "base64"})
    action = r.json()["events"][0]
    raw = base64.b64decode(action["data"])
    assert action["encoding"] == "base64" and len(raw) == 4 * 2 * 4
    r = httpx.post(f"{toy.url}/v1/generate", headers=headers, timeout=20, json={
        "parts": [{"kind": "text", "data": "<|user|>é\n"}], "outputs": ["text"], "stream": False})
    outs = [e for e in r.json()["events"] if e["type"] == "output"]
    assert "".join(e["text"] for e in outs) == "Echo: é"
    assert [e["data"] for e in outs][-2:] == [0xC3, 0xA9] and outs[-2]["text"] == ""  # é waits for its 2nd byte


def test_generate_takes_tensors_and_images_as_inputs(toy: Server, headers: dict[str, str]) -> None:
    img = {"dtype": "u8", "shape": [2, 5, 3], "b64": base64.b64encode(bytes(30)).decode()}
    r = httpx.post(f"{toy.url}/v1/generate", headers=headers, timeout=20, json={
        "parts": [{"kind": "text", "data": "<|user|>see "}, {"kind": "image", "data": img}], "stream": False})
    text = "".join(e.get("text", "") for e in r.json()["events"])
    assert text == "Echo: see [image 2x5x3]"
    bad = httpx.post(f"{toy.url}/v1/generate", headers=headers, json={
        "parts": [{"kind": "image", "data": {"dtype": "u8", "shape": [9], "b64": "AAAA"}}]})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


def scrape(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics parsed: (sample name, sorted labels) -> value."""
    families = text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_metrics_parse_and_cover_routes_latency_and_pages(toy: Server, headers: dict[str, str]) -> None:
    intervals = ("wgc_stream_chunk_interval_seconds_count", (("route", "chat"),))
    for _ in range(10):  # a stream whose events all pile up before the front end writes is one chunk, no interval
        httpx.post(f"{toy.url}/v1/chat/completions", headers=headers, timeout=20, json={
            "model": "toy", "messages": [{"role": "user", "content": "m"}], "stream": True})
        if scrape(toy).get(intervals, 0) >= 1:
            break
    httpx.post(f"{toy.url}/v1/chat/completions", headers=headers, json={"model": "toy", "messages": []})
    samples = scrape(toy)
    assert samples[("wgc_http_requests_total", (("route", "/v1/chat/completions"), ("status", "200")))] >= 1
    assert samples[("wgc_http_requests_total", (("route", "/v1/chat/completions"), ("status", "422")))] >= 1
    assert samples[("wgc_time_to_first_output_seconds_count", (("modality", "text"),))] >= 1
    assert samples[("wgc_inter_output_seconds_count", (("modality", "text"),))] >= 1
    assert samples[intervals] >= 1
    assert samples[("wgc_kv_pages", (("component", "llm"), ("rank", "0"), ("state", "free")))] == 4096
    assert ("wgc_queue_depth", ()) in samples and ("wgc_requests_running", ()) in samples
    assert samples[("wgc_rank_up", (("rank", "0"),))] == 1
    assert samples[("wgc_rank_batched_calls_total", (("rank", "0"),))] >= 1


def test_openapi_document_lists_the_plan_routes_and_schemas(toy: Server) -> None:
    doc = httpx.get(f"{toy.url}/openapi.json").json()
    assert {"/v1/chat/completions", "/v1/audio/speech", "/v1/images/generations", "/v1/images/edits",
            "/v1/generate", "/v1/models", "/health", "/metrics"} <= set(doc["paths"])
    schemas = doc["components"]["schemas"]
    chat = schemas["ToyChatRequest"]["properties"]
    assert chat["max_tokens"]["anyOf"][0]["maximum"] == 256  # the plan's bound
    assert "seed" in chat and "logprobs" not in chat
    assert schemas["ToySpeechRequest"]["properties"]["voice"]["enum"] == ["alto", "bass"]
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert set(doc["paths"]["/v1/chat/completions"]["post"]["responses"]) >= {"200", "400", "404", "422", "429"}


def test_limits_and_malformed_bodies_get_4xx(toy: Server, headers: dict[str, str]) -> None:
    big = httpx.post(f"{toy.url}/v1/generate", headers=headers, content=b"x" * (65 * 1024 * 1024))
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    for content_type in ({}, {"content-type": "application/json"}):
        r = httpx.post(f"{toy.url}/v1/generate", headers={**headers, **content_type}, content=b"{nope")
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(f"{toy.url}/v1/generate", headers=headers, json={"params": {"width": 4}})
    assert r.status_code == 422 and r.json()["error"]["param"] == "params.width"
    r = httpx.get(f"{toy.url}/v1/generate", headers=headers)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert httpx.post(f"{toy.url}/v1/generate", json={}).status_code == 401  # no key


def test_an_output_input_or_part_the_plan_has_no_use_for_is_400_naming_the_allowed_values(
        toy: Server, headers: dict[str, str]) -> None:
    text = [{"kind": "text", "data": "<|user|>hi\n"}]
    refused = {
        "outputs: unknown modality `smell` (this model emits: action, audio, image, tensor, text)":
            {"parts": text, "outputs": ["text", "smell"]},
        "inputs: unknown input `prompt` (this model takes no named inputs)": {"parts": text, "inputs": {"prompt": "x"}},
        "parts[1]: unknown part kind `smell` (this model takes parts of kind: image, text)":
            {"parts": [*text, {"kind": "smell", "data": "x"}]},
    }
    for message, body in refused.items():
        for stream in (True, False):
            r = httpx.post(f"{toy.url}/v1/generate", headers=headers, timeout=20, json={**body, "stream": stream})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == "invalid_request" and r.json()["error"]["message"] == message


@pytest.fixture(scope="module")
def bagel(bagel_plan: Path) -> Iterator[Server]:
    server = Server(bagel_plan, "--fake")
    yield server
    server.stop()


def test_a_fake_plan_serves_what_its_components_produce(bagel: Server) -> None:
    r = httpx.post(f"{bagel.url}/v1/chat/completions", timeout=20, json={
        "model": "bagel", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    body = r.json()
    assert r.status_code == 200, body
    assert body["usage"]["completion_tokens"] <= 8  # mock tokens are bytes 0..12 under the byte fallback
    r = httpx.post(f"{bagel.url}/v1/images/generations", timeout=20, json={
        "model": "bagel", "prompt": "a cat", "size": "256x512", "params": {"steps": 3}})
    png = base64.b64decode(r.json()["data"][0]["b64_json"])
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (256, 512)


def test_a_route_the_plan_cannot_serve_is_404_with_the_reason(bagel: Server) -> None:
    r = httpx.post(f"{bagel.url}/v1/audio/speech", json={"model": "bagel", "input": "x", "voice": "default"})
    assert r.status_code == 404
    assert r.json()["error"] == {"message": "model `bagel` emits no audio, so its plan cannot serve this route",
                                 "type": "not_found_error", "param": None, "code": "route_not_supported"}
    assert "/v1/audio/speech" not in httpx.get(f"{bagel.url}/openapi.json").json()["paths"]


def test_the_front_end_and_each_rank_froze_their_start_up_heap(toy: Server) -> None:
    """runtime/process/heap.py: once started, a served process's start-up objects are out of the
    cycle collector's reach (frozen), in the front end and in each worker."""
    samples = scrape(toy)
    assert samples[("wgc_frontend_gc_frozen_objects", ())] > 10_000
    assert samples[("wgc_rank_counter", (("name", "gc_frozen_objects"), ("rank", "0")))] > 10_000
    assert ("wgc_frontend_gc_full_collections_total", ()) in samples
