"""Start-up: load, capture CUDA graphs, then ready — in the in-process cluster and in worker processes.

CPU placements produce no CaptureSpecs (the compiler captures for `device = "cuda"` only), so the toy
program is compiled by the real compiler for a CUDA placement with cuda_graph_buckets; its toy
components ignore their device, which lets the whole start-up run on CPU. `llm` (toys.Capturing)
takes 0.3 s per capture and records each call; `mix` (toys.ExplodingCapture) raises in capture.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from wgc.runtime.api import Runtime, StartupLine
from wgc.runtime.coordinator.request import RequestSpec

from tests.runtime.cluster import ToyCluster, compile_text
from tests.runtime.toys import CAPTURE_SECONDS
from wgc.plan.model import Plan

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
model captoy
import tests.runtime.toys as toy
param max_tokens: int = 4 in 1..100
component llm: toy.Capturing engine kv {
    prefill(prompt: text) -> token
    decode(prev: token) -> token
}
component mix: toy.ExplodingCapture engine stateless {
    add(a: token, b: token) -> token
}
walk prefill(prompt: text) -> token {
    tok = llm.prefill(prompt)
    emit text tok
    return tok
}
walk decode(first: token) {
    loop until tok == 1000 max max_tokens carry tok = first {
        next = llm.decode(tok)
        tok = mix.add(next, next)
        emit text tok
    }
}
flow { start -> prefill -> decode -> done }
"""
CUDA_PLACEMENT = """
[cluster]
device = "cuda"
memory = "8GiB"
ranks = 2
[defaults]
ranks = [0]
engine = { kv_memory = "64MiB", cuda_graph_buckets = [1, 2, 4], max_batch = 4 }
[components.mix]
ranks = [1]
"""
REQUEST = RequestSpec(params={"max_tokens": 3}, inputs={"prompt": "abc"})
EXPECTED_TEXT = [8, 18, 38]  # prefill 3, then decode adds 1 (on rank 0) and mix.add doubles (on rank 1)


def toy_plan(tmp_path: Path) -> Plan:
    plan = compile_text(tmp_path, PROGRAM, CUDA_PLACEMENT)
    assert {(c.rank, c.component, c.entry) for c in plan.captures} == {
        (0, "llm", "prefill"), (0, "llm", "decode"), (1, "mix", "add")}
    return plan


def ended_at(lines: list[str]) -> list[float]:
    return [float(m.group(1)) for line in lines if (m := re.search(r"ended at ([0-9.]+)$", line))]


def test_in_process_cluster_captures_every_spec_once_with_its_buckets_before_ready(tmp_path: Path) -> None:
    plan = toy_plan(tmp_path)
    t0 = time.time()
    cluster = ToyCluster(plan)
    llm = cluster.component("llm", 0)
    # (a) once per CaptureSpec of the rank, with the plan's buckets, largest first
    want = sorted((c.entry, c.walk, sorted(c.buckets, reverse=True)) for c in plan.captures if c.rank == 0)
    assert sorted(call[:3] for call in llm.captured) == want
    assert all(sorted(c.buckets) == [1, 2, 4] for c in plan.captures)
    # (b) ready only after every capture ended (and the captures did take their time)
    assert cluster.ready_at >= max(end for *_, end in llm.captured)
    assert cluster.ready_at - t0 >= len(want) * CAPTURE_SECONDS
    # (c) the progress lines: loading, each bucket, each entry's summary
    lines = [line for _, _, line in cluster.startup_log]
    assert "rank 0: loading llm (tests.runtime.toys.Capturing) ..." in lines
    assert any(re.fullmatch(r"rank 0: llm loaded in \d+\.\d s", line) for line in lines)
    assert "rank 0: llm.decode captured bucket 4" in lines
    assert any(re.fullmatch(r"rank 0: llm\.decode captured buckets 4,2,1 \(0\.\d s\)", line) for line in lines)
    assert lines.index("rank 0: loading llm (tests.runtime.toys.Capturing) ...") < lines.index(
        "rank 0: llm.decode captured bucket 4")
    # warm-up: each component's, after loading and before any capture; one that raises is reported, not fatal
    assert len(llm.warmed) == 1 and llm.warmed[0] <= min(start for *_, start, _ in llm.captured)
    assert "rank 0: llm warmed the toy's shapes" in lines
    assert any(re.fullmatch(r"rank 0: llm warmed up in \d+\.\d s", line) for line in lines)
    assert "rank 1: mix warm-up failed (RuntimeError: toy warm-up exploded); its first calls run cold" in lines
    assert lines.index("rank 0: llm warmed the toy's shapes") < lines.index("rank 0: llm.decode captured bucket 4")
    # (d) the capture that raised: every bucket failed, the entry eager, and requests still served
    (add,) = cluster.captures[1]
    assert (add.name, add.report.state, add.report.captured) == ("mix.add", "eager", [])
    assert add.report.failed == {b: "ValueError: toy capture of add exploded" for b in (4, 2, 1)}
    assert "capture raised ValueError: toy capture of add exploded" in add.report.eager
    assert any(line.startswith("rank 1: mix.add runs eagerly: capture raised ValueError") for line in lines)
    assert [c.report.state for c in cluster.captures[0]] == ["captured", "captured"]
    out = cluster.run([REQUEST])
    assert next(iter(out.values()))["text"] == [3, *EXPECTED_TEXT]


def test_a_cpu_plan_has_no_captures_and_starts_without_capturing(tmp_path: Path) -> None:
    from tests.runtime.cluster import cpu_placement

    plan = compile_text(tmp_path, PROGRAM, cpu_placement(1))
    cluster = ToyCluster(plan)
    assert plan.captures == [] and cluster.captures == {0: []} and cluster.component("llm").captured == []
    assert not any("captur" in line for _, _, line in cluster.startup_log)


def run(coro: Any, timeout: float = 60.0) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def test_worker_processes_report_ready_after_capture_with_progress_and_health(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import tests.runtime.toys
    plan = toy_plan(tmp_path)
    seen: list[StartupLine] = []

    async def body() -> tuple[Any, ...]:
        async with await Runtime.start(plan, on_progress=seen.append, allow_modules=["tests.runtime"]) as runtime:
            handle = runtime.submit_spec(REQUEST)
            out = await handle.collect()
            return runtime.ready_at, list(runtime.startup_log), dict(runtime.captures), await runtime.health(), out

    ready_at, log, captures, health, out = run(body())
    lines = [entry.line for entry in log]
    assert [entry.line for entry in seen if entry.line] == lines
    # each phase's count (startup.Step), per rank: it only moves forward and ends complete
    last = {(e.rank, e.phase): (e.done, e.total) for e in seen if e.phase}
    assert last == {(0, "load"): (1, 1), (0, "warm"): (1, 1), (0, "capture"): (6, 6),  # 2 entries x 3 buckets
                    (1, "load"): (1, 1), (1, "warm"): (1, 1), (1, "capture"): (3, 3)}
    for key in last:
        done = [e.done for e in seen if (e.rank, e.phase) == key]
        assert done == sorted(done), key
    # (a) rank 0 captured its two specs, each once, with the plan's buckets
    toy_lines = sorted(line for line in lines if "ended at" in line)
    assert [re.sub(r" ended at .*", "", line) for line in toy_lines] == [
        "rank 0: llm.decode toy capture of decode for walk decode with buckets [4, 2, 1]",
        "rank 0: llm.prefill toy capture of prefill for walk prefill with buckets [4, 2, 1]"]
    # (b) the runtime was ready only after the last capture ended (worker clock = our clock)
    assert ready_at is not None and ready_at >= max(ended_at(lines))
    assert all(entry.t <= ready_at for entry in log)
    # (c) progress lines from both ranks, in order: loading before capturing
    assert lines.index("rank 0: loading llm (tests.runtime.toys.Capturing) ...") < min(
        i for i, line in enumerate(lines) if "captured bucket" in line)
    assert any(line.startswith("rank 1: loading mix") for line in lines)
    # (d) the raising capture is in the health report; the request was served (eagerly)
    assert out == {"text": [3, *EXPECTED_TEXT]}
    assert health.ok
    by_rank = {r.rank: {c.name: c for c in r.captures} for r in health.ranks}
    assert by_rank[0]["llm.decode"].report.captured == [4, 2, 1]
    assert by_rank[0]["llm.decode"].report.seconds >= CAPTURE_SECONDS
    add = by_rank[1]["mix.add"]
    assert add.report.state == "eager" and add.report.failed[4] == "ValueError: toy capture of add exploded"
    assert {r: [c.name for c in cs] for r, cs in captures.items()} == {0: ["llm.prefill", "llm.decode"],
                                                                       1: ["mix.add"]}


def test_http_health_shows_the_captures_and_the_server_logs_the_start_up(tmp_path: Path) -> None:
    import json
    import urllib.request

    from tests.http.server import Server

    path = tmp_path / "captoy.plan"
    from wgc.plan.file import encode_plan

    path.write_bytes(encode_plan(toy_plan(tmp_path), "", ""))
    server = Server(path)
    try:
        with urllib.request.urlopen(f"{server.url}/health", timeout=10) as response:
            body = json.loads(response.read())
    finally:
        server.stop()
    ranks = {r["rank"]: r for r in body["ranks"]}
    decode = next(c for c in ranks[0]["captures"] if c["entry"] == "decode")
    assert (decode["state"], decode["captured"], decode["failed"]) == ("captured", [4, 2, 1], {})
    (add,) = ranks[1]["captures"]
    assert add["state"] == "eager" and add["failed"]["4"] == "ValueError: toy capture of add exploded"
    errors = server.errors()  # the workers' stderr: their start-up lines
    assert "rank 0: loading llm (tests.runtime.toys.Capturing) ..." in errors
    assert re.search(r"rank 0: llm\.decode captured buckets 4,2,1 \(0\.\d s\)", errors)
