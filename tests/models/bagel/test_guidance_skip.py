"""BAGEL computes only the guidance branches combine.step reads: combine.reads_text / reads_image are
Guidance.active / uses_image, llm.velocity runs no forward for a call whose `needed` is 0 (a batch
mixing both forwards only the needed calls), and the walk's images are bit-identical to computing
every branch, with the forward counts the schedule predicts."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from wgc.models.bagel import LanguageModel
from wgc.models.bagel.combine import GuidanceCombine
from wgc.models.bagel.guidance import Guidance, schedule
from wgc.runtime.components.base import Call, CallError, Component, load_class
from wgc.runtime.process.local import LocalCluster

from tests.models.bagel.helpers import LABELS, call, tiny_llm
from tests.models.bagel.test_end_to_end import EDIT, RecordingDecoder, edit, image, plan, released, t2i
from wgc.plan.model import ComponentSpec

COMBINE = ComponentSpec("combine", "wgc.models.bagel.GuidanceCombine", "stateless", [], {}, [], {"dtype": "bf16"},
                        [0], 1, {})
STEPS = 8  # 7 Euler updates; at shift 3 the last one has t <= 0.4 (6 steps would have none)


# ---- the flags ----------------------------------------------------------------------------------

def test_the_read_flags_are_the_guidance_skip_rules_over_a_grid() -> None:
    comp = GuidanceCombine(COMBINE, 0, "cpu")
    ts = [0.0, 0.2, 0.4, 0.4000001, 0.7, 0.9999, 1.0]
    settings = [(s_txt, s_img, low, high) for s_txt in (0.5, 1.0, 1.0001, 4.0) for s_img in (1.0, 1.5, 2.0)
                for low, high in ((0.4, 1.0), (0.0, 1.0), (0.2, 0.7), (0.4, 0.4))]
    grid = [(t, *s) for t in ts for s in settings]
    text = comp.call("reads_text", [Call(i, "", (t, s_txt, low, high)) for i, (t, s_txt, _, low, high) in enumerate(grid)])
    img = comp.call("reads_image", [Call(i, "", g) for i, g in enumerate(grid)])
    for (t, s_txt, s_img, low, high), got_text, got_img in zip(grid, text, img):
        g = Guidance(s_txt, s_img, interval=(low, high))
        assert (got_text, got_img) == (int(g.active(t)), int(g.uses_image(t))), (t, s_txt, s_img, low, high)
    assert {v for v in text + img} == {0, 1} and all(type(v) is int for v in text + img)  # the checker's scalar
    # the boundaries: t == low is outside the interval, t == high inside
    assert comp.call("reads_text", [Call(1, "", (0.4, 4.0, 0.4, 1.0)), Call(2, "", (1.0, 4.0, 0.4, 1.0))]) == [0, 1]
    assert comp.call("reads_image", [Call(1, "", (0.4, 4.0, 2.0, 0.4, 1.0)),
                                     Call(2, "", (1.0, 4.0, 2.0, 0.4, 1.0))]) == [0, 1]


@pytest.mark.parametrize("entry, args", [("reads_text", (0.5, "4.0", 0.4, 1.0)), ("reads_text", (0.5, 4.0, 0.4)),
                                         ("reads_image", (0.5, 4.0, 2.0, 0.4, None))])
def test_a_read_flag_with_a_bad_argument_fails_its_request(entry: str, args: tuple) -> None:
    comp = GuidanceCombine(COMBINE, 0, "cpu")
    good = (0.5, 4.0, 0.4, 1.0) if entry == "reads_text" else (0.5, 4.0, 2.0, 0.4, 1.0)
    with pytest.raises(CallError, match=f"combine.{entry}") as err:
        comp.call(entry, [Call(1, "", good), Call(7, "", args)])
    assert err.value.request == 7


def test_a_needed_branch_that_arrives_empty_still_fails_the_step() -> None:
    comp = GuidanceCombine(COMBINE, 0, "cpu")
    gen = torch.Generator().manual_seed(0)
    z, main, txt, img = (torch.randn(16, 64, generator=gen) for _ in range(4))
    empty = z[:0]

    def args(t: float, v_text: torch.Tensor, v_img: torch.Tensor) -> tuple:
        return (z, t, 0.02, main, v_text, v_img, 4.0, 2.0, 0.4, 1.0, "global", 0.0)

    outside = comp.call("step", [Call(1, "", args(0.3, empty, empty))])  # neither branch read at t <= 0.4
    assert torch.equal(outside[0], (z - 0.02 * main).to(z.dtype))
    with pytest.raises(CallError, match=r"v_text \[0, 64\] does not match z \[16, 64\]") as err:
        comp.call("step", [Call(1, "", args(0.7, txt, img)), Call(2, "", args(0.7, empty, img))])
    assert err.value.request == 2
    with pytest.raises(CallError, match=r"v_img \[0, 64\] does not match z \[16, 64\]"):
        comp.call("step", [Call(3, "", args(0.7, txt, empty))])


# ---- llm.velocity's `needed` --------------------------------------------------------------------

def generating(m: LanguageModel, request: int, prompt: str) -> torch.Tensor:
    """The walk's prefill of a text-to-image request; its starting latents [N, 64]."""
    m.fork(request, "cfg_text", "main")
    m.prefill_text([call(request, "main", prompt), call(request, "cfg_img", prompt)])
    return m.init_latents([call(request, "", 64, 64 + 16 * request)])[0]


def test_a_batch_mixing_needed_and_skipped_calls_forwards_only_the_needed_ones() -> None:
    m = tiny_llm(seed=3)
    zs = {r: generating(m, r, f"prompt {r}") for r in (1, 2)}
    flags = {(1, "main"): 1, (1, "cfg_text"): 0, (1, "cfg_img"): 1, (2, "main"): 1, (2, "cfg_text"): 1,
             (2, "cfg_img"): 0}
    calls = [call(r, lab, zs[r], 0.6, flags[r, lab]) for r in (1, 2) for lab in LABELS]
    forwards = m.stats["forwards"]
    out = m.velocity(calls)
    assert m.stats["forwards"] == forwards + 1  # the four needed calls in one forward
    assert (m.stats["velocities"], m.stats["velocities_skipped"]) == (4, 2)
    for c, v in zip(calls, out):
        if c.args[2]:
            assert v.shape == zs[c.request].shape
            assert torch.equal(v, m.velocity([call(c.request, c.label, zs[c.request], 0.6, 1)])[0])  # as alone
        else:
            assert v.shape == (0, 64) and v.dtype == m.out_dtype
    # no needed call at all: no forward
    forwards = m.stats["forwards"]
    assert [v.shape for v in m.velocity([call(1, "cfg_img", zs[1], 0.3, 0)])] == [(0, 64)]
    assert m.stats["forwards"] == forwards


def test_a_velocity_without_a_needed_flag_is_computed_and_a_bad_flag_fails_its_request() -> None:
    m = tiny_llm(seed=4)
    z = generating(m, 1, "a cat")
    assert torch.equal(m.velocity([call(1, "main", z, 0.5)])[0], m.velocity([call(1, "main", z, 0.5, 1.0)])[0])
    with pytest.raises(CallError, match="`needed` must be 1 or 0, found 2") as err:
        m.velocity([call(1, "main", z, 0.5, 1), call(1, "cfg_text", z, 0.5, 2)])
    assert err.value.request == 1
    with pytest.raises(CallError, match="`z` must be a tensor"):  # a bad z fails even where it is skipped
        m.velocity([call(1, "cfg_img", torch.randn(3), 0.5, 0)])


# ---- end to end: the same image, the predicted forwards ---------------------------------------

class CountingLM(LanguageModel):
    """The tiny LLM, recording the label of every velocity call that reaches a forward."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.forwarded: list[str] = []

    def _velocities(self, wave: list[Call]) -> list[Any]:
        self.forwarded += [self.label_of(c) for c in wave]
        return super()._velocities(wave)


class EveryBranchLM(CountingLM):
    """The walk before the skip: every branch's velocity computed, whatever its flag."""

    def velocity(self, calls: list[Call]) -> list[Any]:
        return super().velocity([c._replace(args=(*c.args[:2], 1)) for c in calls])


def run_cluster(placement: str, llm: type[LanguageModel], specs: list) -> tuple[list[torch.Tensor], list[Component]]:
    """Each request alone in order; its final latents, and the components."""
    made: list[Component] = []

    def factory(spec: ComponentSpec, rank: int) -> Component:
        cls = {"llm": llm, "vae_dec": RecordingDecoder}.get(spec.name)
        made.append(cls(spec, rank, "cpu", preset="tiny") if cls else load_class(spec.cls).tiny(spec, rank, "cpu"))
        return made[-1]

    c = LocalCluster(plan(placement), factory, fake_inputs=False)
    dec = next(m for m in made if isinstance(m, RecordingDecoder))
    ids = [next(iter(c.run([s]))) for s in specs]
    released(made)
    return [dec.latents[i] for i in ids], made


def expected_forwards(steps: int, params: dict[str, Any]) -> dict[str, int]:
    """Velocity calls per label the skip rules leave: main every step, the cfg branches where read."""
    g = Guidance(params.get("cfg_text_scale", 4.0), params.get("cfg_img_scale", 1.0),
                 interval=(params.get("cfg_interval_low", 0.4), params.get("cfg_interval_high", 1.0)))
    ts = schedule(steps, params.get("timestep_shift", 3.0)).tolist()[:-1]  # t of each Euler update
    return {"main": len(ts), "cfg_text": sum(map(g.active, ts)), "cfg_img": sum(map(g.uses_image, ts))}


def forwarded(made: list[Component]) -> dict[str, int]:
    labels = [lab for m in made if isinstance(m, CountingLM) for lab in m.forwarded]
    return {lab: labels.count(lab) for lab in LABELS}


CASES = {"defaults": {}, "image guidance": {"cfg_img_scale": 2.0}, "interval to 0": {"cfg_interval_low": 0.0},
         "no guidance": {"cfg_text_scale": 1.0, "cfg_img_scale": 2.0}, "shift 1": {"timestep_shift": 1.0}}


@pytest.mark.parametrize("placement", ["cpu.toml", "cpu3.toml"])
def test_text_to_image_skips_the_unread_branches_and_gives_the_same_latents(placement: str) -> None:
    specs = [t2i("a lighthouse", seed=5, steps=STEPS, **params) for params in CASES.values()]
    skipped, made = run_cluster(placement, CountingLM, specs)
    every, made_every = run_cluster(placement, EveryBranchLM, specs)
    for name, a, b in zip(CASES, skipped, every):
        assert torch.equal(a, b), name
    expect = [expected_forwards(STEPS, params) for params in CASES.values()]
    assert forwarded(made) == {lab: sum(e[lab] for e in expect) for lab in LABELS}
    assert forwarded(made_every) == {lab: len(CASES) * (STEPS - 1) for lab in LABELS}
    assert expect[0]["cfg_img"] == 0 < expect[0]["cfg_text"] < STEPS - 1  # the defaults skip some of each
    assert expect[1]["cfg_img"] == expect[1]["cfg_text"] > 0


def test_each_case_forwards_what_the_schedule_predicts() -> None:
    for name, params in CASES.items():
        _, made = run_cluster("cpu.toml", CountingLM, [t2i("a boat", seed=6, steps=STEPS, **params)])
        assert forwarded(made) == expected_forwards(STEPS, params), name


def test_an_edit_reads_the_image_branch_inside_its_interval_and_gives_the_same_latents() -> None:
    spec = edit(image(64, 80, 5), "add a moon", seed=12)
    (skipped,), made = run_cluster("cpu.toml", CountingLM, [spec])
    (every,), _ = run_cluster("cpu.toml", EveryBranchLM, [spec])
    assert torch.equal(skipped, every)
    assert forwarded(made) == expected_forwards(spec.params["steps"], EDIT)
    assert forwarded(made)["cfg_img"] > 0
