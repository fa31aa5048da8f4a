"""The runtime's Python API: typed events with timing, request checks, cancel, health, start and close."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from wgc.runtime.api import (
    CancelResult,
    DoneEvent,
    OutputEvent,
    RequestError,
    RequestFailed,
    Runtime,
    request_spec,
)
from wgc.runtime.coordinator.request import resolve_params
from wgc.runtime.process.events import describe
from wgc.runtime.protocol.messages import Part

from wgc.compile import compile_program
from wgc.plan.file import PlanFileError, load_plan
from wgc.plan.model import ParamSpec

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


@pytest.fixture(scope="module")
def orpheus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = ROOT / "models" / "orpheus.walk"
    result = compile_program(str(source), source.read_text(), str(ROOT / "placements" / "cpu.toml"))
    assert result.data is not None
    path = tmp_path_factory.mktemp("plans") / "orpheus.plan"
    path.write_bytes(result.data)
    return path


def with_runtime(plan: Any, body: Callable[[Runtime], Awaitable[T]], timeout: float = 30.0) -> T:
    async def main() -> T:
        async with await Runtime.start(plan, fake=True) as runtime:
            return await body(runtime)

    return asyncio.run(asyncio.wait_for(main(), timeout))


SPEECH = {"params": {"voice": "leo", "max_tokens": 200}, "inputs": {"prompt": "hello"}, "outputs": ["audio"]}


def test_events_are_typed_and_their_timing_never_goes_back(orpheus: Path) -> None:
    async def body(runtime: Runtime) -> list[Any]:
        return [e async for e in runtime.submit(**SPEECH).events()]

    events = with_runtime(orpheus, body)
    outputs, final = events[:-1], events[-1]
    assert outputs and all(isinstance(e, OutputEvent) for e in outputs)
    assert isinstance(final, DoneEvent) and final.outputs == len(outputs)
    first = outputs[0]
    assert (first.modality, first.walk, first.rank, first.seq) == ("audio", "snac_chunk", 0, 0)
    assert (first.shape, first.dtype) == describe(first.payload)
    times = [e.t_since_submit for e in events]
    assert times == sorted(times) and times[0] > 0
    assert all(e.t_first == first.t_since_submit for e in outputs) and final.t_first == first.t_since_submit
    assert [e.seq for e in outputs] == list(range(len(outputs)))


@pytest.mark.parametrize(("fields", "message"), [
    ({"params": {"voice": "bob"}}, "param `voice` = 'bob' is not one of"),
    ({"params": {"max_tokens": 0}}, "param `max_tokens` = 0 is outside 1..8192"),
    ({"params": {"temperature": "hot"}}, "param `temperature` must be float"),
    ({"params": {"speed": 2}}, "unknown param `speed`"),
    ({"parts": [{"kind": "text"}]}, "part 0 must be an object {kind, payload}"),
    ({"outputs": []}, "outputs must be a non-empty list"),
    ({"inputs": {"prompt": object()}}, "input `prompt`: cannot send a object between ranks"),
    ({"think": "yes"}, "think must be true or false"),
    ({"outputs": ["audio", "smell"]}, "outputs: unknown modality `smell` (this model emits: audio)"),
    ({"inputs": {"prompt": "hi", "promt": "hi"}}, "inputs: unknown input `promt` (this model takes named inputs: "
                                                  "prompt)"),
    ({"parts": [{"kind": "text", "payload": "hi"}]}, "parts[0]: unknown part kind `text` (this model takes no "
                                                     "parts)"),
])
def test_a_bad_request_raises_request_error_naming_the_field(orpheus: Path, fields: dict[str, Any],
                                                             message: str) -> None:
    async def body(runtime: Runtime) -> None:
        with pytest.raises(RequestError) as err:
            runtime.submit(**{**SPEECH, **fields})
        assert message in str(err.value)
        assert (await runtime.health()).requests_in_flight == 0  # nothing was sent anywhere

    with_runtime(orpheus, body)


def test_request_spec_accepts_json_shaped_values() -> None:
    spec = request_spec(params={"steps": 3}, parts=[{"kind": "text", "payload": "a"}, Part("image", 1)],
                        outputs=["image"])
    assert spec.parts == [Part("text", "a"), Part("image", 1)]
    assert spec.input_modalities == ["text", "image"] and spec.output_modalities == ["image"]
    assert request_spec().output_modalities == []  # none asked for: the plan's default, filled in on admission


def test_a_request_asking_for_no_outputs_gets_what_the_plan_emits(orpheus: Path) -> None:
    async def body(runtime: Runtime) -> list[str]:
        return [e.modality async for e in runtime.submit(params=SPEECH["params"], inputs=SPEECH["inputs"]).events()
                if isinstance(e, OutputEvent)]

    assert set(with_runtime(orpheus, body)) == {"audio"}  # orpheus emits no text, so that default is audio


def test_a_null_param_takes_its_default_and_one_without_a_default_is_required() -> None:
    specs = [ParamSpec("steps", "int", 4, 1, 8), ParamSpec("seed", "int", None)]
    assert resolve_params(specs, {"steps": None, "seed": 1}) == {"steps": 4, "seed": 1}
    with pytest.raises(RequestError, match=r"^param `seed` is required \(null is not a value\)$"):
        resolve_params(specs, {"steps": 2, "seed": None})
    with pytest.raises(RequestError, match=r"^param `seed` is required$"):
        resolve_params(specs, {"steps": 2})


def test_cancel_and_health_and_close(orpheus: Path) -> None:
    async def body(runtime: Runtime) -> tuple[CancelResult, CancelResult, Any, Any, list[Any]]:
        handle = runtime.submit(**SPEECH)
        cancelled = await handle.cancel()
        events = [e async for e in handle.events()]
        again = await handle.cancel()
        report = await runtime.health()
        with pytest.raises(RequestFailed, match="cancelled"):
            await _collect_cancelled(runtime)
        done = await runtime.submit(**SPEECH).collect()
        return cancelled, again, report, done, events

    cancelled, again, report, done, events = with_runtime(orpheus, body)
    assert cancelled == CancelResult(1, True, (0,))
    assert again == CancelResult(1, False, ())
    assert type(events[-1]).__name__ == "CancelledEvent"
    assert report.ok and report.ranks[0].state == "up" and report.ranks[0].pid > 0
    assert {"instances", "mailbox", "stream_ends", "llm.requests", "snac.requests"} <= set(report.ranks[0].counters)
    assert done["audio"]


async def _collect_cancelled(runtime: Runtime) -> None:
    handle = runtime.submit(**SPEECH)
    await handle.cancel()
    await handle.collect()


def test_a_plan_object_starts_too_and_a_closed_runtime_refuses_requests(orpheus: Path) -> None:
    _, plan = load_plan(orpheus)

    async def main() -> tuple[dict[int, int], Any]:
        runtime = await Runtime.start(plan, fake=True)
        pids = runtime.pids
        first = await runtime.submit(**SPEECH).collect()
        await runtime.close()
        await runtime.close()  # twice is fine
        with pytest.raises(RuntimeError, match="closed"):
            runtime.submit(**SPEECH)
        return pids, first

    pids, first = asyncio.run(asyncio.wait_for(main(), 30))
    assert list(pids) == [0] and first["audio"]


def test_a_bad_plan_file_raises_plan_file_error(tmp_path: Path) -> None:
    (tmp_path / "bad.plan").write_bytes(b"nope")
    with pytest.raises(PlanFileError, match="not a plan file"):
        asyncio.run(Runtime.start(tmp_path / "bad.plan", fake=True))
    with pytest.raises(PlanFileError, match="no such file"):
        asyncio.run(Runtime.start(tmp_path / "missing.plan", fake=True))


def test_describe_gives_shape_and_dtype() -> None:
    import torch

    assert describe(torch.zeros(2, 3, dtype=torch.bfloat16)) == ((2, 3), "bfloat16")
    assert describe(7) == ((), "int64") and describe(0.5) == ((), "float64") and describe("hi") == ((), "str")
    assert describe([[1, 2], [3, 4], [5, 6]]) == ((3, 2), "int64") and describe(None) == ((), "none")
