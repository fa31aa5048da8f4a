"""The runtime on fake components gives exactly the simulator's outputs, for every model and placement.

Three independent interpreters agree on the same mock semantics: the reference (unplaced AST,
tests/sim/test_differential.py), the simulator (placed schedules) and the runtime (executors and
coordinator exchanging encoded messages).
"""

from __future__ import annotations

import pytest
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster
from wgc.runtime.protocol.messages import Part

from tests.lower.golden_pairs import PAIRS, ROOT, paths
from wgc.compile import compile_program
from wgc.sim.request import make_request
from wgc.sim.simulator import simulate

REQUESTS: dict[str, list[dict]] = {
    "bagel": [dict(parts=["text"], outputs=["text"], params={"max_tokens": 30}),
              dict(parts=["text", "image"], outputs=["image"], params={"steps": 6}),
              dict(parts=["image", "text"], outputs=["image"], params={"steps": 4}, think=True)],
    # "p6" is a prompt whose mock generation runs long enough to fill three sliding windows.
    "llama": [dict(outputs=["text"], params={"max_tokens": 24}), dict(outputs=["text"], params={"max_tokens": 1})],
    "orpheus": [dict(outputs=["audio"], params={"max_tokens": 200}),
                dict(outputs=["audio"], params={"max_tokens": 200}, named={"prompt": "p6"})],
    "pi05": [dict(outputs=["action"])],
    # With "Aiden" the mock talker's first frame is not its codec EOS, so talker_decode and speak run.
    "qwen3_omni": [dict(parts=["text", "audio"], outputs=["text", "audio"], params={"max_tokens": 40}),
                   dict(parts=["text", "audio"], outputs=["text", "audio"], params={"max_tokens": 40, "speaker": "Aiden"}),
                   dict(parts=["image"], outputs=["text"], params={"max_tokens": 10})],
    "vjepa2_ac": [dict(task="rollout", outputs=["tensor"], params={"horizon": 6}),
                  dict(task="mpc", outputs=["tensor"]), dict(task="encode", outputs=["tensor"]),
                  dict(task="plan", outputs=["tensor"], params={"cem_steps": 3})],
}


def _spec(request) -> RequestSpec:
    return RequestSpec(params=dict(request.params), task=request.task,
                       parts=[Part(kind, payload) for kind, payload in request.parts],
                       inputs=dict(request.named), input_modalities=sorted(request.inputs),
                       output_modalities=sorted(request.outputs), think=request.think)


@pytest.mark.parametrize(("model", "placement"), PAIRS, ids=[f"{m}-{p}" for m, p in PAIRS])
def test_runtime_outputs_equal_the_simulator(model: str, placement: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    source, place = paths(model, placement)
    plan = compile_program(source, (ROOT / source).read_text(), place).plan
    assert plan is not None
    requests = [make_request(**kw) for kw in REQUESTS[model]]
    expected = [simulate(plan, r) for r in requests]
    got = LocalCluster(plan).run([_spec(r) for r in requests])
    assert list(got.values()) == expected
    assert any(expected), "the requests must produce outputs for the comparison to mean anything"


def test_the_comparison_covers_streams_on_every_streaming_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    for model, modality in (("orpheus", "audio"), ("qwen3_omni", "audio")):
        source, place = paths(model, "cpu")
        plan = compile_program(source, (ROOT / source).read_text(), place).plan
        outs = [simulate(plan, make_request(**kw)) for kw in REQUESTS[model]]
        assert any(o.get(modality) for o in outs), model
