"""π0.5 end to end in process: models/pi05.walk on placements/cpu.toml run by the runtime's executor
(LocalCluster) on the tiny components. A request's chunk is the components' own flow (prefill, 10
velocity steps, to_actions) with the walk's noise; concurrent requests share their velocity
forwards step by step and each gets the chunk it gets alone; a seed fixes the chunk, -1 derives one
per request; every KV page is released."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from wgc.models.pi05 import PaliGemmaWithExpert
from wgc.runtime.components.base import Call, Component, load_class
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster

from tests.models.pi05.helpers import chunk, images, plan
from wgc.plan.model import ComponentSpec


class RecordingLM(PaliGemmaWithExpert):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.velocity_calls: list[list[int]] = []
        self.times: list[float] = []

    def warm_up(self, progress: Callable[[str], None]) -> None:
        super().warm_up(progress)
        self.velocity_calls.clear()  # requests' calls only
        self.times.clear()

    def velocity(self, calls: list[Call]) -> list[Any]:
        self.velocity_calls.append([c.request for c in calls])
        self.times.append(float(calls[0].args[1]))
        return super().velocity(calls)


def cluster(rounds: int | None = None) -> tuple[LocalCluster, dict[str, Component]]:
    made: dict[str, Component] = {}

    def factory(spec: ComponentSpec, rank: int) -> Component:
        cls = RecordingLM if spec.name == "llm" else load_class(spec.cls)
        made[spec.name] = cls.tiny(spec, rank, "cpu")
        return made[spec.name]

    return LocalCluster(plan(), factory, fake_inputs=False, rounds=rounds), made


def request(task: str, seed: int, cameras: int = 2) -> RequestSpec:
    return RequestSpec(params={"seed": seed}, inputs={"images": images(cameras, 56, seed=len(task)), "prompt": task,
                                                      "state": torch.linspace(-1, 1, 8)}, output_modalities=["action"])


def actions(c: LocalCluster, spec: RequestSpec) -> torch.Tensor:
    (out,) = c.run([spec]).values()
    (chunk_,) = out["action"]
    return chunk_


def test_the_walk_gives_the_components_own_chunk() -> None:
    c, made = cluster()
    got = actions(c, request("pick up the cube", seed=5))
    vit, llm = made["vit"], made["llm"]
    assert isinstance(llm, RecordingLM) and got.shape == (50, 7) and got.dtype == torch.float32
    assert llm.times == [1.0 - k / 10 for k in range(10)]  # t = 1.0, 0.9, ... 0.1 (the int k over a float)
    noise = llm.noise([Call(0, "", (5,))])[0]
    x = chunk(vit, llm, images(2, 56, seed=len("pick up the cube")), "pick up the cube", torch.linspace(-1, 1, 8),
              noise, request=99)
    torch.testing.assert_close(got, llm.to_actions([Call(99, "", (x,))])[0], rtol=0, atol=1e-6)
    llm.release(99)
    assert llm.counters()["kv_pages_used"] == 0 and llm.counters()["requests"] == 0


def test_concurrent_requests_share_velocity_steps_and_each_gets_its_own_chunk() -> None:
    specs = [request("pick up the cube", 1), request("open the drawer and put the spoon in it", 2, cameras=3),
             request("wipe", 3, cameras=1)]
    alone = [actions(cluster()[0], s) for s in specs]
    c, made = cluster(rounds=1)
    out = c.run(specs)
    llm = made["llm"]
    assert isinstance(llm, RecordingLM)
    assert max(len(calls) for calls in llm.velocity_calls) == 3  # one forward for all three requests' steps
    assert sum(map(len, llm.velocity_calls)) == 30 and len(llm.velocity_calls) <= 12  # 30 steps in 10 to 12 forwards
    for result, a in zip((out[i]["action"][0] for i in sorted(out)), alone):
        torch.testing.assert_close(result, a, rtol=1e-5, atol=1e-5)
    assert llm.counters()["kv_pages_used"] == 0


def test_a_seed_fixes_the_chunk_and_minus_one_derives_one_per_request() -> None:
    c, _ = cluster()
    fixed = [actions(c, request("stack", 3)) for _ in range(2)]
    assert torch.equal(fixed[0], fixed[1])
    derived = [actions(c, request("stack", -1)) for _ in range(2)]
    assert not torch.equal(derived[0], derived[1])
