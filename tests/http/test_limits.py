"""Request limits that hold before any expensive work (runtime/http/admission/limits.py, context.py), through real
servers: the image-amplification request is refused from the headers with the server's memory flat;
a 1 MiB stop string answers 400 at once while /health stays quick (and, with the limit raised, costs
linear time); a 10 MB prompt never reaches a rank; prompt tokens and max_tokens against the model's
positions and the KV pool; the limits from a placement's [serve] table and --limit over it."""

from __future__ import annotations

import json
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http.server import ROOT, TOY, Server, compile_plan
from wgc.compile import compile_program

SERVE_TABLE = """
extends = "{cpu}"

[serve]
max_images = 2
max_stop_chars = 2097152
max_body_bytes = "4MiB"
"""


def _png(width: int, height: int) -> bytes:
    """A black RGB PNG of any size, a few KB per megapixel on the wire (zeros compress well)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    z = zlib.compressobj(9)
    row = b"\0" * (1 + 3 * width)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def _image_part(png: bytes) -> dict[str, Any]:
    import base64

    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}


def _chat(server: Server, content: Any, timeout: float = 30, **fields: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", timeout=timeout,
                      json={"model": server.ready["model"], "messages": [{"role": "user", "content": content}],
                            **fields})


def _error(r: httpx.Response) -> dict[str, Any]:
    assert 400 <= r.status_code < 500, r.text[:500]
    return r.json()["error"]


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory (VmHWM) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


@pytest.fixture(scope="module")
def toy(toy_plan: Path) -> Iterator[Server]:
    """A toy server of its own (its memory is measured), with the default limits."""
    server = Server(toy_plan, "--max-running", "8")
    yield server
    assert server.stop() == 128 + 15


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The toy compiled with a placement's [serve] table, one of its limits overridden by --limit."""
    tmp = tmp_path_factory.mktemp("limits")
    (tmp / "serve.toml").write_text(SERVE_TABLE.format(cpu=ROOT / "placements" / "cpu.toml"))
    server = Server(compile_plan(tmp, TOY, str(tmp / "serve.toml")), "--limit", "max_images=3")
    yield server
    assert server.stop() == 128 + 15


HEALTH_BOUND = 1.0  # seconds a /health call may take before the probe counts it as unanswered


class HealthProbe:
    """/health every 20 ms on a thread of its own, each call allowed `HEALTH_BOUND` seconds: a blocked
    event loop fails the probe (a hang guard ten times the 100 ms target, not a speed measurement;
    speeds belong in bench/)."""

    def __init__(self, server: Server) -> None:
        self.url = f"{server.url}/health"
        self.answers: list[bool] = []  # one per call: answered 200 within HEALTH_BOUND
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=HEALTH_BOUND) as client:
            while not self._stop.is_set():
                try:
                    ok = client.get(self.url).status_code == 200
                except httpx.TimeoutException:
                    ok = False
                self.answers.append(ok)
                time.sleep(0.02)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.1)
        self._stop.set()
        self._thread.join(15)


def test_sixteen_large_images_are_refused_from_their_headers_before_decoding(toy: Server) -> None:
    png = _png(4096, 4096)  # 48 MiB of pixels each, ~50 KB on the wire
    assert len(png) < 100_000
    pid = toy.proc.pid
    _reset_peak(pid)
    before = _peak_rss(pid)
    r = _chat(toy, [{"type": "text", "text": "look"}, *[_image_part(png)] * 16])
    err = _error(r)
    assert r.status_code == 400 and err["code"] == "limit_exceeded" and "`max_images`" in err["message"]
    assert err["param"] == "messages" and err["message"].startswith("messages: 16 images, more than the 8")
    # Fewer images, but more pixels than the request may decode together: 413, from the headers.
    r = _chat(toy, [_image_part(png)] * 3)
    err = _error(r)
    assert r.status_code == 413 and err["code"] == "media_too_large" and "`max_request_pixels`" in err["message"]
    assert _peak_rss(pid) - before < 100 * 2**20


def test_a_1mib_stop_string_is_refused_at_once_while_health_stays_quick(toy: Server) -> None:
    with HealthProbe(toy) as probe:
        r = _chat(toy, "hi", timeout=5, stop="x" * 2**20, max_tokens=8)  # before: no answer for minutes
    err = _error(r)
    assert r.status_code == 400 and err["param"] == "stop" and "`max_stop_chars`" in err["message"]
    assert probe.answers and all(probe.answers)


def test_with_the_limit_raised_a_1mib_stop_string_costs_linear_time(configured: Server) -> None:
    """The stop matcher is an automaton: its cost does not grow with the square of the stop's length."""
    stop = "Echo: " + "z" * (2**20 - 6)  # the reply begins like it, so the matcher holds text back
    with HealthProbe(configured) as probe:
        r = _chat(configured, "zzzzzzzzzzzz", timeout=10, stop=stop, max_tokens=64, stream=True)
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert [d for d in deltas if d] == ["Echo: zzzzzzzzzzzz"]  # held back while it could begin the stop, then shown
    assert probe.answers and all(probe.answers)


def test_a_10mb_prompt_on_generate_is_refused_before_it_reaches_a_rank(toy: Server) -> None:
    r = httpx.post(f"{toy.url}/v1/generate", timeout=10, json={"parts": [{"kind": "text", "data": "a" * 10**7}]})
    err = _error(r)
    assert r.status_code == 400 and err["code"] == "limit_exceeded" and "`max_prompt_chars`" in err["message"]
    counters = httpx.get(f"{toy.url}/health").json()["ranks"][0]["counters"]
    assert counters["llm.kv_pages_used"] == 0  # nothing reached the rank


def test_counts_are_refused_naming_their_limits(toy: Server) -> None:
    cases = {
        "max_stop": ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        "max_n": ({"n": 9}, "n"),
    }
    for name, (fields, param) in cases.items():
        err = _error(_chat(toy, "hi", **fields))
        assert err["code"] == "limit_exceeded" and f"`{name}`" in err["message"] and err["param"] == param
    err = _error(_chat(toy, [{"type": "text", "text": "x"}] * 257))
    assert err["code"] == "limit_exceeded" and "`max_parts`" in err["message"]


def test_prompt_tokens_are_checked_against_the_kv_pool_with_the_numbers(toy: Server) -> None:
    # The toy's pool: 4096 pages x 16 tokens (the plan's page_size); its tokenizer is a byte a token.
    err = _error(_chat(toy, "x" * 70_000))
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
    assert "more than the 65,536 of the llm KV pool of rank 0 (4096 pages x 16 tokens)" in err["message"]
    err = _error(_chat(toy, "x" * 65_400, max_tokens=200))
    assert err["code"] == "context_length_exceeded" and err["param"] == "max_tokens"
    assert "max_tokens = 200 does not fit" in err["message"]


def test_prompt_tokens_and_max_tokens_against_the_model_positions(bagel_plan: Path) -> None:
    server = Server(bagel_plan, "--fake")
    try:
        err = _error(_chat(server, "x" * 40_000))
        assert err["code"] == "context_length_exceeded" and "of llm.max_seq_len" in err["message"]
        assert "more than the 32,768" in err["message"]
        err = _error(_chat(server, "x" * 30_000, max_tokens=8000))
        assert err["param"] == "max_tokens" and "leave 2,7" in err["message"]
        assert _chat(server, "x" * 30_000, max_tokens=8).status_code == 200
    finally:
        server.stop()


def test_placement_serve_limits_and_the_command_line_over_them(configured: Server) -> None:
    small = _image_part(_png(8, 8))
    assert _chat(configured, [small] * 3, max_tokens=4).status_code == 200  # --limit max_images=3 over [serve] 2
    err = _error(_chat(configured, [small] * 4))
    assert err["code"] == "limit_exceeded" and "4 images, more than the 3" in err["message"]
    r = httpx.post(f"{configured.url}/v1/generate", content=b" " * (5 * 2**20),
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 413 and "`max_body_bytes`" in r.json()["error"]["message"]  # [serve] 4MiB


def test_serve_limits_in_a_placement_are_checked_at_their_line(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(f'extends = "{ROOT / "placements" / "cpu.toml"}"\n\n[serve]\n'
                                       'max_images = 0\nmax_body_bytes = "lots"\nmax_audio_seconds = -1\n'
                                       "max_imags = 3\n")
    result = compile_program(str(TOY), TOY.read_text(), str(tmp_path / "bad.toml"))
    found = {(d.code, d.span.line) for d in result.diagnostics}
    assert result.data is None and found == {("P003", 4), ("P003", 5), ("P003", 6), ("P002", 7)}


def test_a_bad_limit_on_the_command_line_is_a_usage_error(toy_plan: Path) -> None:
    import subprocess
    import sys

    for flag, message in (("max_images=many", "expected a whole number"), ("max_imags=3", "unknown limit"),
                          ("max_images", "expected NAME=VALUE")):
        run = subprocess.run([sys.executable, "-m", "wgc", "run", str(toy_plan), "--serve", "127.0.0.1:0",
                              "--limit", flag], capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and message in run.stderr, run.stderr


def test_every_limit_has_its_placement_key_and_the_command_line_wins() -> None:
    from wgc.runtime.http.admission.limits import Limits

    from wgc.placement.spec import LIMIT_KEYS
    from wgc.plan.model import Setting

    assert tuple(LIMIT_KEYS) == Limits.names()
    settings = [Setting("serve.max_images", 2, "placement"), Setting("serve.allow_modules", "x", "placement")]
    limits = Limits.of(settings, {"max_images": 5, "max_body_bytes": 2**20})
    assert (limits.max_images, limits.max_body_bytes, limits.max_stop) == (5, 2**20, 4)
    assert Limits.of(settings, {}).max_images == 2
