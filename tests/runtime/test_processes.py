"""The runtime as real processes: a worker process per rank, ZeroMQ sockets, signals, deaths, cancels."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import zmq
from wgc.runtime.api import ErrorEvent, RankDownError, Runtime, StartError
from wgc.runtime.components.base import Call, Component
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process import wire
from wgc.runtime.process.gate import InitGate
from wgc.runtime.process.local import LocalCluster
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import Data, Part, RequestInit, StartWalk

from tests.processes import alive
from tests.runtime.cluster import compile_text, cpu_placement
from wgc.compile import compile_program
from wgc.plan.file import load_plan

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def compiled(tmp_path: Path, model: str, placement: str) -> Path:
    source = ROOT / "models" / f"{model}.walk"
    result = compile_program(str(source), source.read_text(), str(ROOT / "placements" / placement))
    assert result.data is not None, [d.message for d in result.diagnostics]
    path = tmp_path / f"{model}-{placement}.plan"
    path.write_bytes(result.data)
    return path


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


async def outputs_of(runtime: Runtime, specs: list[RequestSpec]) -> list[dict[str, list[Any]]]:
    handles = [runtime.submit_spec(s) for s in specs]  # all in flight together
    return [await h.collect() for h in handles]


ORPHEUS_SPECS = [RequestSpec(params={"voice": v, "max_tokens": 200}, inputs={"prompt": "hello"},
                             output_modalities=["audio"]) for v in ("leah", "leo", "tara", "zoe")]
BAGEL_SPECS = [
    RequestSpec(params={"max_tokens": 40}, parts=[Part("text", "a")], input_modalities=["text"]),
    RequestSpec(params={"steps": 6}, parts=[Part("text", "b")], input_modalities=["text"], output_modalities=["image"]),
    RequestSpec(params={"max_tokens": 20, "steps": 4, "think": True}, parts=[Part("text", "c")],
                input_modalities=["text"], output_modalities=["image"], think=True),
]


def test_orpheus_on_one_worker_process_equals_the_in_process_cluster(tmp_path: Path) -> None:
    path = compiled(tmp_path, "orpheus", "cpu.toml")

    async def body() -> list[dict[str, list[Any]]]:
        async with await Runtime.start(path, fake=True) as runtime:
            return await outputs_of(runtime, ORPHEUS_SPECS)

    got = run(body())
    expected = LocalCluster(load_plan(path)[1]).run(ORPHEUS_SPECS)
    assert got == list(expected.values())
    assert any(o.get("audio") for o in got)  # the stream fired its walk: the comparison covers streams


def test_bagel_on_three_worker_processes_equals_the_in_process_cluster(tmp_path: Path) -> None:
    path = compiled(tmp_path, "bagel", "cpu3.toml")

    async def body() -> list[dict[str, list[Any]]]:
        async with await Runtime.start(path, fake=True) as runtime:
            assert len(runtime.pids) == 3
            return await outputs_of(runtime, BAGEL_SPECS * 2)

    got = run(body())
    expected = LocalCluster(load_plan(path)[1]).run(BAGEL_SPECS * 2)
    assert got == list(expected.values())


# ---- tensors between processes ----------------------------------------------------------------------


class TensorLlm(Component):
    """A guidance branch: a (2, 3) float tensor per call, from its own label's weight and the latents."""

    def velocity(self, calls: list[Call]) -> list[Any]:
        weights = {"main": 1.0, "cfg_text": 10.0, "cfg_img": 100.0}
        return [c.args[0] * 0 + weights[c.label] + c.args[1] for c in calls]  # z crossed ranks as a tensor


class TensorMix(Component):
    def zero(self, calls: list[Call]) -> list[Any]:
        import torch

        return [torch.zeros(2, 3) for _ in calls]

    def step(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] + c.args[1] + c.args[2] + c.args[3] for c in calls]


TENSORS = """
model tensors
import tests.runtime.test_processes as tp
param steps: int = 5 in 2..20
component llm: tp.TensorLlm engine kv {
    velocity(z: tensor[2, 3; f32], t: scalar) -> tensor[2, 3; f32]
    labels main, cfg_text, cfg_img
}
component mix: tp.TensorMix engine stateless {
    zero() -> tensor[2, 3; f32]
    step(z: tensor[2, 3; f32], a: tensor[2, 3; f32], b: tensor[2, 3; f32], c: tensor[2, 3; f32]) -> tensor[2, 3; f32]
}
walk gen() {
    z0 = mix.zero()
    loop steps - 1 as t carry z = z0 {
        parallel {
            branch main { a = llm.velocity(z, t, cache=main) }
            branch cfg_text { b = llm.velocity(z, t, cache=cfg_text) }
            branch cfg_img { c = llm.velocity(z, t, cache=cfg_img) }
        }
        z = mix.step(z, a, b, c)
    } yield terminal z
    emit tensor z
}
flow { start -> gen -> done }
"""
TWO_RANKS = cpu_placement(2, """
[components.llm]
ranks = [0, 1]
routing = "mirror"
[walks.gen.branches]
main = [0]
cfg_text = [1]
cfg_img = [1]
""")


def test_real_components_send_tensors_between_worker_processes(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import this module's components
    plan = compile_text(tmp_path, TENSORS, TWO_RANKS)

    async def body() -> list[Any]:
        async with await Runtime.start(plan, allow_modules=["tests.runtime"]) as runtime:
            handle = runtime.submit(params={"steps": 5}, outputs=["tensor"])
            return [e async for e in handle.events()]

    events = run(body(), timeout=60)
    out = events[0]
    assert (out.shape, out.dtype, out.rank) == ((2, 3), "float32", 0)
    assert torch.equal(out.payload, torch.full((2, 3), float(sum(111 + 3 * t for t in range(4)))))
    assert type(events[-1]).__name__ == "DoneEvent"


def test_a_tensor_crosses_a_socket_as_its_own_frame_and_arrives_writable(tmp_path: Path) -> None:
    import torch

    ctx = zmq.Context()
    try:
        inbox = wire.pull_socket(ctx, f"ipc://{tmp_path}/in")
        outbox = wire.push_socket(ctx, f"ipc://{tmp_path}/in")
        value = {"x": torch.arange(12, dtype=torch.float32).reshape(3, 4), "n": 5}
        wire.send(outbox, Codec(), Data(7, "f/w#0", "t", value))
        frames = inbox.recv_multipart(copy=False)
        msg = wire.decode(Codec(), frames)
    finally:
        ctx.destroy(linger=0)
    assert len(frames) == 2 and len(frames[1].bytes) == 48  # msgpack head + the tensor's raw bytes
    assert isinstance(msg, Data) and msg.value["n"] == 5
    assert torch.equal(msg.value["x"], value["x"])
    msg.value["x"].add_(1)  # owned, writable memory
    assert msg.value["x"][0, 0].item() == 1


# ---- ordering: a rank's messages for a request wait for the request ----------------------------------


class _Recorder:
    def __init__(self) -> None:
        self.requests: dict[int, Any] = {}
        self.dead: set[int] = set()
        self.seen: list[str] = []

    def handle(self, msg: Any) -> None:
        self.seen.append(type(msg).__name__)
        if isinstance(msg, RequestInit):
            self.requests[msg.request] = msg

    def initialised(self, request: int) -> bool:
        return request in self.requests


def test_messages_that_overtake_their_request_init_are_held_until_it_arrives() -> None:
    ex = _Recorder()
    gate = InitGate(ex)  # type: ignore[arg-type]
    gate.deliver(StartWalk(1, "main/w#1", "w", {}, None))
    gate.deliver(Data(1, "main/w#1", "t", 3))
    assert ex.seen == [] and gate.count() == 2
    gate.deliver(RequestInit(1, {}, "", [], {}, [], ["text"], False))
    assert ex.seen == ["RequestInit", "StartWalk", "Data"] and gate.count() == 0


# ---- failures, cancels, shutdown --------------------------------------------------------------------

LONG_IMAGE = {"params": {"steps": 200}, "parts": [{"kind": "text", "payload": "a cat"}], "outputs": ["image"]}


def test_a_killed_worker_fails_its_requests_naming_the_rank_and_health_reports_it_down(tmp_path: Path) -> None:
    path = compiled(tmp_path, "bagel", "cpu3.toml")

    async def body() -> tuple[list[Any], Any, dict[int, int]]:
        async with await Runtime.start(path, fake=True) as runtime:
            pids = runtime.pids
            handle = runtime.submit(**LONG_IMAGE)
            os.kill(pids[1], signal.SIGKILL)
            events = [e async for e in handle.events()]
            report = await runtime.health()
            with pytest.raises(RankDownError, match="rank 1 is down"):
                runtime.submit(**LONG_IMAGE)
            return events, report, pids

    events, report, pids = run(body())
    assert isinstance(events[-1], ErrorEvent)
    assert "rank 1 is down" in events[-1].error and "SIGKILL" in events[-1].error
    assert not report.ok
    assert [r.state for r in report.ranks] == ["up", "down", "up"]
    assert "SIGKILL" in report.ranks[1].reason
    assert not wait_gone(list(pids.values()))


def test_cancel_is_acknowledged_by_every_rank_and_frees_everything(tmp_path: Path) -> None:
    path = compiled(tmp_path, "bagel", "cpu3.toml")

    async def body() -> tuple[list[Any], list[Any], Any]:
        async with await Runtime.start(path, fake=True) as runtime:
            handles = [runtime.submit(**LONG_IMAGE) for _ in range(3)]
            handles.append(runtime.submit(params={"max_tokens": 8000}, parts=[{"kind": "text", "payload": "x"}]))
            await asyncio.sleep(0.05)
            results = [await h.cancel() for h in handles]
            finals = [h.final for h in handles]
            return results, finals, await runtime.health()

    results, finals, report = run(body())
    running = [r for r in results if r.was_running]
    assert len(running) >= 3  # the image requests take far longer than 50 ms
    assert all(r.acked_by == (0, 1, 2) for r in running)
    assert sum(type(f).__name__ == "CancelledEvent" for f in finals) == len(running)
    assert report.ok and report.requests_in_flight == 0
    for rank in report.ranks:
        left = {k: v for k, v in rank.counters.items()
                if v and (k in ("instances", "requests", "mailbox", "stream_ends") or k.endswith((".requests", ".labels")))}
        assert not left, f"rank {rank.rank} still holds {left}"


def test_cancel_of_a_streaming_request_frees_its_stream_ends(tmp_path: Path) -> None:
    path = compiled(tmp_path, "orpheus", "cpu.toml")

    async def body() -> tuple[Any, Any]:
        async with await Runtime.start(path, fake=True) as runtime:
            handle = runtime.submit(params={"voice": "leo", "max_tokens": 200}, inputs={"prompt": "hello"},
                                    outputs=["audio"])
            result = await handle.cancel()
            return result, await runtime.health()

    result, report = run(body())
    assert result.was_running and result.acked_by == (0,)
    counters = report.ranks[0].counters
    assert counters["stream_ends"] == counters["instances"] == counters["mailbox"] == 0
    assert counters["llm.requests"] == counters["snac.requests"] == 0


def test_a_rank_that_cannot_start_is_named(tmp_path: Path) -> None:
    # pi05.walk naming a component module that does not exist
    source = (ROOT / "models" / "pi05.walk").read_text().replace("import wgc.models.pi05 as", "import wgc.models.absent as")
    result = compile_program("absent.walk", source, str(ROOT / "placements" / "cpu.toml"))
    assert result.data is not None, [d.message for d in result.diagnostics]
    path = tmp_path / "absent.plan"
    path.write_bytes(result.data)
    with pytest.raises(StartError, match=r"rank 0 could not start: exited with code 3: component class wgc\.models"):
        run(Runtime.start(path))  # no --fake: the model's component classes are needed


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from wgc.cli.run_cmd import run; run()", *args]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_wgc_run_stops_every_worker(tmp_path: Path, sig: signal.Signals) -> None:
    path = compiled(tmp_path, "bagel", "cpu3.toml")
    proc = subprocess.Popen(_cli(str(path), "--fake", "--request", "-"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        pids = [r["pid"] for r in ready["ranks"]]
        assert ready["event"] == "ready" and len(pids) == 3 and all(alive(p) for p in pids)
        proc.send_signal(sig)
        code = proc.wait(timeout=15)
    finally:
        proc.kill()
        proc.communicate()
    assert code == 128 + sig
    assert not wait_gone(pids, 1.0)  # reaped before wgc run exited


def test_workers_exit_when_their_coordinator_is_killed(tmp_path: Path) -> None:
    path = compiled(tmp_path, "bagel", "cpu3.toml")
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the runtime's directory: a coordinator killed leaves it
    proc = subprocess.Popen(_cli(str(path), "--fake", "--request", "-"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        pids = [r["pid"] for r in json.loads(proc.stdout.readline())["ranks"]]  # type: ignore[union-attr]
        proc.kill()  # SIGKILL: no clean-up runs in the coordinator
        proc.wait(timeout=5)
    finally:
        proc.kill()
        proc.communicate()
    assert not wait_gone(pids, 10.0)


def test_wgc_run_prints_ndjson_events_and_exits_0(tmp_path: Path) -> None:
    path = compiled(tmp_path, "bagel", "cpu3.toml")
    text = json.dumps({"params": {"max_tokens": 5}, "parts": [{"kind": "text", "payload": "hi"}]})
    image = json.dumps({**LONG_IMAGE, "params": {"steps": 3}})
    done = subprocess.run(_cli(str(path), "--fake", "--request", text, "--request", image),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["event"] == "ready"
    by_request: dict[int, list[str]] = {}
    for line in lines[1:]:
        by_request.setdefault(line["request"], []).append(line["event"])
    assert sorted(by_request) == [1, 2]
    assert all(kinds[-1] == "done" and set(kinds[:-1]) == {"output"} for kinds in by_request.values())
    image_line = next(x for x in lines if x.get("modality") == "image")
    assert set(image_line) >= {"payload", "shape", "dtype", "walk", "rank", "t"}


@pytest.mark.parametrize(("plan", "code", "message"), [
    ("missing.plan", 2, "no such file"),
    ("garbage.plan", 1, "not a plan file"),
])
def test_wgc_run_reports_a_bad_plan_file_in_one_line(tmp_path: Path, plan: str, code: int, message: str) -> None:
    (tmp_path / "garbage.plan").write_text("garbage")
    done = subprocess.run(_cli(str(tmp_path / plan), "--fake"), capture_output=True, text=True, timeout=30)
    assert done.returncode == code
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1 and message in done.stderr


def test_wgc_run_rejects_a_malformed_request_before_starting(tmp_path: Path) -> None:
    done = subprocess.run(_cli(str(tmp_path / "x.plan"), "--request", "{not json"), capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2 and "--request 1: invalid JSON" in done.stderr and len(done.stderr.splitlines()) == 1
