"""Every model program, lowered for every placement written for it, computes what the reference computes.

The reference runs the checked program with no placement; the simulator runs
the plan's per-rank schedules. On mock components both must emit the same
values in the same order, for requests that take every flow branch, with
dynamic loops stopping naturally and forced long enough to fill every stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.check import check_source
from wgc.lower.pipeline import lower
from wgc.placement.load import load_placement
from wgc.plan.model import Plan
from wgc.sim.driver import LoopPolicy
from wgc.sim.errors import RequestError
from wgc.sim.program import facts
from wgc.sim.reference import run_reference
from wgc.sim.request import MockRequest, make_request
from wgc.sim.simulator import simulate
from wgc.sim.verify import stream_fill, synthetic_requests, verify

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted((ROOT / "models").glob("*.walk"))
PLACEMENTS = sorted((ROOT / "placements").glob("*.toml"))


def _pairs() -> list[tuple[Path, Path]]:
    """(model, placement) for every placement that loads for the model (a placement names its model)."""
    out = []
    for model in MODELS:
        checked = check_source(model.read_text(), str(model))
        for placement in PLACEMENTS:
            loaded, _ = load_placement(placement, checked.program)
            if loaded is not None:
                out.append((model, placement))
    return out


PAIRS = _pairs()


def _outcome(run, *args) -> object:
    try:
        return run(*args)
    except RequestError as e:
        return ("request error", str(e).split(": ")[-1])


def _requests(plan: Plan) -> list[MockRequest]:
    extra = [make_request(["text", "image", "text"], outputs=["text", "image", "audio"], named={"prompt": 5}),
             make_request(["audio", "video"], outputs=["text"], task="rollout")]
    return synthetic_requests(plan) + extra


def test_every_model_has_a_cpu_placement() -> None:
    assert {m.stem for m, p in PAIRS if p.name == "cpu.toml"} == {m.stem for m in MODELS}


@pytest.mark.slow
@pytest.mark.parametrize(("model", "placement"), PAIRS, ids=lambda p: p.stem)
def test_plan_matches_reference(model: Path, placement: Path) -> None:
    checked = check_source(model.read_text(), str(model))
    loaded, diags = load_placement(placement, checked.program)
    assert loaded is not None, diags
    plan = lower(checked, loaded, str(model), str(placement))
    assert verify(plan) == []
    program = facts(checked)
    forced = LoopPolicy(max(stream_fill(plan), 3), ignore_stop=True)
    compared = 0
    for request in _requests(plan):
        for loops in (LoopPolicy(), forced):
            want = _outcome(run_reference, program, request, loops)
            got = _outcome(simulate, plan, request, loops)
            assert got == want, (request, loops)
            compared += isinstance(want, dict) and bool(want)
    assert compared > 0
