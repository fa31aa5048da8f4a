"""models/vjepa2_ac.walk end to end in process on the tiny components (placements/cpu.toml): a rollout
through the runtime equals the components called directly; requests of different horizons share each
step's forward and each gets its own; the dynamic loop never runs or shows a step past the horizon
(outputs, step calls, KV); mpc's scores equal single rollouts scored one by one; plan returns a
trajectory [1, H, 7] and its cost; every page is released."""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from wgc.models.vjepa2_ac import ActionConditionedPredictor
from wgc.runtime.components.base import Call, Component, load_class
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster

from tests.models.orpheus.helpers import ROOT
from tests.models.vjepa2_ac.helpers import call, randn
from wgc.compile import compile_program
from wgc.plan.model import ComponentSpec, Plan


@cache
def plan() -> Plan:
    source = ROOT / "models" / "vjepa2_ac.walk"
    compiled = compile_program(str(source), source.read_text(), str(ROOT / "placements" / "cpu.toml"))
    assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
    return compiled.plan


class RecordingAC(ActionConditionedPredictor):
    """The tiny AC predictor, counting step calls and frame blocks per request and keeping each
    request's KV length when it is released."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps: dict[int, int] = {}
        self.step_batches: list[list[int]] = []
        self.final_length: dict[int, int] = {}

    def step(self, calls: list[Call]) -> list[Any]:
        self.step_batches.append([c.request for c in calls])
        for c in calls:
            self.steps[c.request] = self.steps.get(c.request, 0) + 1
        return super().step(calls)

    def release(self, request: int) -> None:
        self.final_length[request] = self.kv.length(request, self.default_label())
        super().release(request)


def cluster(rounds: int | None = None) -> tuple[LocalCluster, dict[str, Component]]:
    made: dict[str, Component] = {}

    def factory(spec: ComponentSpec, rank: int) -> Component:
        cls = RecordingAC if spec.name == "ac_predictor" else load_class(spec.cls)
        made[spec.name] = cls.tiny(spec, rank, "cpu")
        return made[spec.name]

    return LocalCluster(plan(), factory, fake_inputs=False, rounds=rounds), made


def clip(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (frames, 64, 64, 3), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def rollout_spec(frames: int, horizon: int, seed: int) -> RequestSpec:
    inputs = {"clip": clip(frames, seed), "history_actions": randn(frames - 1, 7, seed=seed + 1) * 0.05,
              "history_states": randn(frames - 1, 7, seed=seed + 2), "actions": randn(horizon, 7, seed=seed + 3) * 0.05,
              "states": randn(horizon, 7, seed=seed + 4)}
    return RequestSpec(params={"horizon": horizon}, task="rollout", inputs=inputs, output_modalities=["tensor"])


def direct(made: dict[str, Component], spec: RequestSpec, request: int) -> list[torch.Tensor]:
    """The same rollout with the components called one by one."""
    i = spec.inputs
    ac = made["ac_predictor"]
    (z,) = made["encoder"].frames([call(request, i["clip"])])
    (z,) = ac.context([call(request, z, i["history_actions"], i["history_states"])])
    out = []
    for t in range(spec.params["horizon"]):
        (z,) = ac.step([call(request, z, i["actions"][t], i["states"][t])])
        out.append(z)
    ac.release(request)
    return out


def released(made: dict[str, Component]) -> None:
    counters = made["ac_predictor"].counters()
    assert counters["kv_pages_used"] == 0 and counters["requests"] == 0, counters


def test_a_rollout_through_the_runtime_equals_the_components_and_shows_no_extra_step() -> None:
    c, made = cluster()
    ac = made["ac_predictor"]
    spec = rollout_spec(frames=2, horizon=4, seed=1)
    ((request, out),) = c.run([spec]).items()
    (frames,) = out["tensor"]
    assert len(frames) == 4
    # the loop's `max` is the horizon itself, so its last iteration ends on the bound: no iteration
    # runs ahead of the stop (a `max 32` would speculate one, indexing actions[horizon])
    assert ac.steps[request] == 4
    assert ac.final_length[request] == (1 + 4) * ac.config.block  # 1 history frame + 4 steps, nothing more
    for got, want in zip(frames, direct(made, spec, 10_000)):
        assert torch.allclose(got, want, atol=1e-5)
    released(made)


def test_requests_of_different_horizons_share_steps_and_each_gets_its_own() -> None:
    specs = [rollout_spec(1, 2, seed=10), rollout_spec(3, 5, seed=20), rollout_spec(2, 3, seed=30)]
    c, made = cluster()
    alone = [direct(made, s, 20_000 + i) for i, s in enumerate(specs)]
    ac = made["ac_predictor"]
    out = c.run(specs)
    assert max(len(b) for b in ac.step_batches) == 3  # the three requests' steps in one forward
    for (request, result), spec, want in zip(sorted(out.items()), specs, alone):
        (frames,) = result["tensor"]
        assert len(frames) == spec.params["horizon"]
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(frames, want)), request
    released(made)


def test_mpc_scores_equal_single_rollouts_scored_one_by_one() -> None:
    c, made = cluster()
    context, goal = clip(2, seed=40), clip(1, seed=41)[0]
    history = randn(1, 7, seed=42) * 0.05, randn(1, 7, seed=43)
    actions, states = randn(5, 3, 7, seed=44) * 0.05, randn(5, 3, 7, seed=45)
    spec = RequestSpec(params={"metric": "l2"}, task="mpc", output_modalities=["tensor"],
                       inputs={"clip": context, "history_actions": history[0], "history_states": history[1],
                               "actions": actions, "states": states, "goal": goal})
    ((_, out),) = c.run([spec]).items()
    costs, best = out["tensor"]
    (g,) = made["encoder"].frame([call(1, goal)])
    want = []
    for k in range(5):
        single = rollout_spec(2, 3, seed=0)
        single.inputs.update(clip=context, history_actions=history[0], history_states=history[1],
                             actions=actions[k], states=states[k])
        last = direct(made, single, 30_000 + k)[-1]
        want.append(float((last - g).pow(2).mean().sqrt()))
    assert torch.allclose(costs, torch.tensor(want), atol=1e-5)
    assert int(best) == min(range(5), key=lambda k: want[k])
    released(made)


def test_plan_returns_a_trajectory_and_its_cost() -> None:
    c, made = cluster()
    params = {"horizon": 2, "samples": 12, "topk": 4, "cem_steps": 3, "seed": 5}
    spec = RequestSpec(params=params, task="plan", output_modalities=["tensor"],
                       inputs={"clip": clip(1, seed=50), "history_actions": torch.zeros(0, 7),
                               "history_states": torch.zeros(0, 7), "state": torch.zeros(7), "goal": clip(1, seed=51)[0]})
    ((_, first),) = c.run([spec]).items()
    trajectory, cost = first["tensor"]
    assert trajectory.shape == (1, 2, 7) and cost.shape == (1,)
    assert trajectory[..., :3].abs().max() <= 0.05 and trajectory[..., 3:6].abs().sum() == 0
    ac = made["ac_predictor"]
    assert ac.stats["frame_blocks"] == 3 * 12 * 2 + 2  # cem_steps x samples x horizon, and the answer's rollout
    ((_, again),) = c.run([spec]).items()
    assert torch.equal(again["tensor"][0], trajectory)  # a fixed seed plans the same
    released(made)


def test_a_speculated_step_past_the_stop_is_rolled_back_and_never_shown() -> None:
    """The same walk with a loop bound past the stop (`max 32`): the runtime runs step 5 before it applies
    step 4's stop; the component's checkpoint and restore take that frame block (and its frame index)
    back, so the answer, the cache and a later step are as if it never ran."""
    source = (ROOT / "models" / "vjepa2_ac.walk").read_text().replace("max horizon as t", "max 32 as t")
    compiled = compile_program("speculating.walk", source, str(ROOT / "placements" / "cpu.toml"))
    assert compiled.plan is not None
    made: dict[str, Component] = {}

    def factory(spec: ComponentSpec, rank: int) -> Component:
        made[spec.name] = (RecordingAC if spec.name == "ac_predictor" else load_class(spec.cls)).tiny(spec, rank, "cpu")
        return made[spec.name]

    c = LocalCluster(compiled.plan, factory, fake_inputs=False)
    spec = rollout_spec(frames=2, horizon=4, seed=1)
    spec.inputs["actions"] = randn(32, 7, seed=4) * 0.05  # rows for the speculated step to read
    spec.inputs["states"] = randn(32, 7, seed=5)
    ((request, out),) = c.run([spec]).items()
    ac = made["ac_predictor"]
    (frames,) = out["tensor"]
    assert ac.steps[request] == 5 and len(frames) == 4  # one step ran ahead, none is shown
    assert ac.final_length[request] == (1 + 4) * ac.config.block
    for got, want in zip(frames, direct(made, spec, 40_000)):
        assert torch.allclose(got, want, atol=1e-5)
    released(made)
