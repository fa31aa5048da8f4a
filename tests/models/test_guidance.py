"""BAGEL's schedule and guidance (models-wave2.md §1.5): the torch reference and the `combine`
component against BAGEL's formulas, the sign on a flow whose exact solution is known, and the fused
Triton kernel against the reference (CUDA only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from wgc.models.bagel.combine import GuidanceCombine
from wgc.models.bagel.guidance import Guidance, combine, guided_step
from wgc.models.bagel.guidance_triton import LaunchPlan, global_ratio, launch_plan
from wgc.runtime.components.base import Call, CallError

from wgc.compile import compile_program
from wgc.plan.model import ComponentSpec

ROOT = Path(__file__).resolve().parents[2]
SPEC = ComponentSpec("combine", "wgc.models.bagel.GuidanceCombine", "stateless", [], {}, [], {"dtype": "bf16"},
                     [0], 1, {})


def branches(n: int = 16, c: int = 64, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """z, v_main, v_text, v_img: [n, c] each."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, c, generator=g) for _ in range(4))


def bagel_velocity(main: torch.Tensor, txt: torch.Tensor, img: torch.Tensor, s_txt: float, s_img: float,
                   mode: str, low: float) -> torch.Tensor:
    """§1.5's combination written out in float64, inside the interval, with text_scale > 1."""
    main, txt, img = main.double(), txt.double(), img.double()

    def ratio(ref: torch.Tensor, v: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
        return (ref.norm(dim=dims, keepdim=True) / (v.norm(dim=dims, keepdim=True) + 1e-8)).clamp(low, 1.0)

    text = txt + s_txt * (main - txt)
    if mode == "text_channel":
        text = text * ratio(main, text, (-1,))
        return img + s_img * (text - img) if s_img > 1 else text
    guided = img + s_img * (text - img) if s_img > 1 else text
    return guided * ratio(main, guided, (0, 1) if mode == "global" else (-1,))


def step_args(z: torch.Tensor, t: float, dt: float, main: torch.Tensor, txt: torch.Tensor | None,
              img: torch.Tensor | None, g: Guidance) -> tuple:
    """combine.step's arguments in the walk's order."""
    return (z, t, dt, main, txt, img, g.text_scale, g.image_scale, *g.interval, g.renorm, g.renorm_min)


# ---- the schedule -------------------------------------------------------------------------------

def test_the_schedule_for_50_steps_and_shift_3_is_the_closed_form() -> None:
    comp = GuidanceCombine(SPEC, 0, "cpu")
    ts = comp.call("timestep", [Call(1, "", (i, 50, 3.0)) for i in range(50)])
    for i, t in enumerate(ts):
        s = 1 - i / 49
        assert t == pytest.approx(3 * s / (1 + 2 * s), abs=1e-6)
    assert ts[0] == 1.0 and ts[-1] == 0.0
    dts = [a - b for a, b in zip(ts, ts[1:])]  # what the walk passes: t_i − t_{i+1}
    assert all(dt > 0 for dt in dts) and sum(dts) == pytest.approx(1.0, abs=1e-6)
    # shift 3 spends the steps near the noise end: the first dt is the smallest, the last the largest
    assert dts[0] == min(dts) and dts[-1] == max(dts)


def test_a_timestep_outside_the_schedule_fails_only_its_request() -> None:
    comp = GuidanceCombine(SPEC, 0, "cpu")
    with pytest.raises(CallError, match="timestep 50 of 50") as err:
        comp.call("timestep", [Call(1, "", (0, 50, 3.0)), Call(2, "", (50, 50, 3.0))])
    assert err.value.request == 2


# ---- the combination against BAGEL's formulas ----------------------------------------------------

@pytest.mark.parametrize("mode", ["global", "channel", "text_channel"])
@pytest.mark.parametrize("s_img", [2.0, 1.0])
@pytest.mark.parametrize("low", [0.0, 0.9])
def test_each_renorm_mode_follows_bagels_formula(mode: str, s_img: float, low: float) -> None:
    _, main, txt, img = branches()
    g = Guidance(text_scale=4.0, image_scale=s_img, renorm=mode, renorm_min=low)
    got = combine(main, txt, img, g, t=0.7)
    assert torch.allclose(got.double(), bagel_velocity(main, txt, img, 4.0, s_img, mode, low), atol=1e-5)
    if low > 0:  # the clamp binds: renorm_min changes the result
        assert not torch.allclose(got, combine(main, txt, img, Guidance(4.0, s_img, mode, 0.0), t=0.7))


def test_text_channel_renorms_before_image_guidance_and_not_after() -> None:
    _, main, txt, img = branches()
    v = combine(main, txt, img, Guidance(text_scale=4.0, image_scale=2.0, renorm="text_channel"), t=0.7)
    channel = combine(main, txt, img, Guidance(text_scale=4.0, image_scale=2.0, renorm="channel"), t=0.7)
    assert bool((channel.norm(dim=-1) <= main.norm(dim=-1) * (1 + 1e-5)).all())
    assert bool((v.norm(dim=-1) > main.norm(dim=-1)).any())  # image guidance after the renorm grows rows


@pytest.mark.parametrize("s_txt", [1.0, 0.5])
def test_text_scale_at_most_one_turns_off_all_guidance_image_too(s_txt: float) -> None:
    z, main, _, _ = branches()
    g = Guidance(text_scale=s_txt, image_scale=2.0, renorm="global")
    assert torch.equal(combine(main, None, None, g, t=0.7), main)  # neither branch is read
    assert torch.allclose(guided_step(z, main, None, None, t=0.7, dt=0.02, g=g), z - 0.02 * main)


@pytest.mark.parametrize("s_img", [1.0, 0.5])
def test_image_scale_at_most_one_skips_the_image_branch(s_img: float) -> None:
    _, main, txt, _ = branches()
    g = Guidance(text_scale=3.0, image_scale=s_img, renorm="global")
    assert torch.allclose(combine(main, txt, None, g, t=0.7).double(),
                          bagel_velocity(main, txt, txt, 3.0, 1.0, "global", 0.0), atol=1e-5)
    with pytest.raises(ValueError, match="v_img is needed"):
        combine(main, txt, None, Guidance(text_scale=3.0, image_scale=1.5), t=0.7)


@pytest.mark.parametrize(("t", "on"), [(0.4, False), (0.4001, True), (1.0, True), (0.2, False)])
def test_guidance_applies_only_inside_the_interval(t: float, on: bool) -> None:
    z, main, txt, img = branches()
    g = Guidance(text_scale=4.0, image_scale=2.0, interval=(0.4, 1.0))
    assert g.active(t) is on
    plain = z - 0.02 * main
    assert torch.allclose(guided_step(z, main, txt, img, t=t, dt=0.02, g=g), plain) is not on
    edit = Guidance(text_scale=4.0, image_scale=2.0, renorm="text_channel", interval=(0.0, 1.0))
    assert edit.active(0.2) and not edit.active(0.0)  # editing's interval: every step but t = 0


def test_an_unknown_renorm_is_rejected() -> None:
    with pytest.raises(ValueError, match="renormalisation `spectral`"):
        Guidance(renorm="spectral")
    z, main, txt, img = branches()
    comp = GuidanceCombine(SPEC, 0, "cpu")
    args = (*step_args(z, 0.7, 0.02, main, txt, img, Guidance())[:-2], "local", 0.0)  # the UI's "local"
    with pytest.raises(CallError, match="cfg renorm `local`"):
        comp.call("step", [Call(3, "", args)])


# ---- the sign: a flow whose exact solution is known ----------------------------------------------

def run_flow(comp: GuidanceCombine, requests: dict[int, tuple[torch.Tensor, torch.Tensor]], steps: int = 50,
             sign: float = 1.0) -> dict[int, torch.Tensor]:
    """The walk's image_gen loop from pure noise; v = noise − x0, BAGEL's velocity of the straight path
    z_t = (1 − t)·x0 + t·noise, for every branch. sign −1 is the old update z + dt·v."""
    z = {r: noise.clone() for r, (_, noise) in requests.items()}
    g = Guidance(text_scale=4.0, image_scale=2.0, renorm="global")
    for i in range(steps - 1):
        [t, t_next] = comp.call("timestep", [Call(0, "", (i, steps, 3.0)), Call(0, "", (i + 1, steps, 3.0))])
        calls = []
        for r, (x0, noise) in requests.items():
            v = noise - x0  # [N, C]
            calls.append(Call(r, "", step_args(z[r], t, sign * (t - t_next), v, v, v, g)))
        z = dict(zip(requests, comp.call("step", calls)))
    return z


def test_fifty_steps_from_noise_land_on_the_data_and_the_old_sign_does_not() -> None:
    comp = GuidanceCombine(SPEC, 0, "cpu")
    x0, noise, x1, noise1 = branches(n=64, c=64, seed=1)
    requests = {1: (x0, noise), 2: (3.0 * x1, noise1)}
    for r, z in run_flow(comp, requests).items():
        assert torch.allclose(z, requests[r][0], atol=1e-4), r
    for r, z in run_flow(comp, requests, sign=-1.0).items():  # z + dt·v: lands on 2·noise − x0
        x0_r, noise_r = requests[r]
        assert (z - x0_r).norm() > (noise_r - x0_r).norm()  # further from the data than the noise was
        assert torch.allclose(z, 2 * noise_r - x0_r, atol=1e-4)


# ---- batching -----------------------------------------------------------------------------------

def test_each_request_in_a_batch_gets_its_own_global_renorm() -> None:
    comp = GuidanceCombine(SPEC, 0, "cpu")
    za, main_a, txt_a, img_a = branches(seed=2)
    zb, main_b, txt_b, img_b = (10.0 * x for x in branches(n=8, seed=3))  # another size and scale
    g = Guidance(text_scale=4.0, image_scale=2.0, renorm="global")
    out = comp.call("step", [Call(1, "", step_args(za, 0.7, 0.02, main_a, txt_a, img_a, g)),
                             Call(2, "", step_args(zb, 0.7, 0.02, main_b, txt_b, img_b, g))])
    assert torch.allclose(out[0], guided_step(za, main_a, txt_a, img_a, 0.7, 0.02, g))
    assert torch.allclose(out[1], guided_step(zb, main_b, txt_b, img_b, 0.7, 0.02, g))
    joint = guided_step(*(torch.cat(p) for p in ((za, zb), (main_a, main_b), (txt_a, txt_b), (img_a, img_b))),
                        0.7, 0.02, g)  # one norm over both requests' latents: what must not happen
    assert not torch.allclose(torch.cat(out), joint, atol=1e-3)


def test_a_call_with_a_mismatched_branch_fails_alone() -> None:
    comp = GuidanceCombine(SPEC, 0, "cpu")
    z, main, txt, img = branches()
    good = step_args(z, 0.7, 0.02, main, txt, img, Guidance())
    bad = step_args(z, 0.7, 0.02, main, txt[:4], img, Guidance())
    with pytest.raises(CallError, match=r"v_text \[4, 64\] does not match z \[16, 64\]") as err:
        comp.call("step", [Call(1, "", good), Call(2, "", bad)])
    assert err.value.request == 2


def test_the_walk_carries_bagels_text_to_image_defaults() -> None:
    source = ROOT / "models" / "bagel.walk"
    compiled = compile_program(str(source), source.read_text(encoding="utf-8"), str(ROOT / "placements" / "cpu.toml"))
    assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
    params = {p.name: p for p in compiled.plan.params}
    assert {n: params[n].default for n in ("steps", "timestep_shift", "cfg_text_scale", "cfg_img_scale",
                                           "cfg_interval_low", "cfg_interval_high", "cfg_renorm_type",
                                           "cfg_renorm_min")} == {
        "steps": 50, "timestep_shift": 3.0, "cfg_text_scale": 4.0, "cfg_img_scale": 1.0, "cfg_interval_low": 0.4,
        "cfg_interval_high": 1.0, "cfg_renorm_type": "global", "cfg_renorm_min": 0.0}
    assert params["cfg_renorm_type"].choices == ["global", "channel", "text_channel"]
    assert params["height"].low == params["width"].low == 32
    [step] = [e for c in compiled.plan.components if c.name == "combine" for e in c.entries if e.name == "step"]
    assert len(step.args) == 12  # z, t, dt, three velocities, six settings


# ---- the fused kernel ---------------------------------------------------------------------------

def test_the_kernel_launch_plan_follows_the_skip_rules() -> None:
    assert launch_plan(Guidance(text_scale=4.0, image_scale=2.0, renorm="global"), 0.7) == LaunchPlan(0, True, True)
    assert launch_plan(Guidance(text_scale=4.0, image_scale=1.0, renorm="channel"), 0.7) == LaunchPlan(1, False, False)
    assert launch_plan(Guidance(text_scale=4.0, image_scale=2.0, renorm="text_channel"), 0.7) == LaunchPlan(2, True, False)
    assert launch_plan(Guidance(text_scale=1.0, image_scale=2.0), 0.7) is None  # z − dt·v_main in torch
    assert launch_plan(Guidance(), 0.3) is None  # outside the interval


@pytest.mark.parametrize("low", [0.0, 0.9])
def test_the_global_ratio_from_row_sums_is_the_global_norm_ratio(low: float) -> None:
    _, main, txt, _ = branches()
    guided = txt + 4.0 * (main - txt)
    ratio = global_ratio((main * main).sum(-1), (guided * guided).sum(-1), low)
    assert torch.allclose(ratio, (main.norm() / (guided.norm() + 1e-8)).clamp(low, 1.0).reshape(1))


def test_the_fused_module_imports_no_triton_until_a_cuda_step_runs() -> None:
    code = ("import sys, wgc.models.bagel.guidance_triton as m, torch; "
            "from wgc.models.bagel.guidance import Guidance; "
            "z = torch.zeros(2, 4); m.fused_guided_step(z, z, z, z, 0.5, 0.1, Guidance(image_scale=2.0)); "
            "print('triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["global", "channel", "text_channel"])
@pytest.mark.parametrize(("s_txt", "s_img", "t"), [(4.0, 2.0, 0.7), (4.0, 1.0, 0.7), (1.0, 2.0, 0.7), (4.0, 2.0, 0.2)])
@pytest.mark.parametrize("low", [0.0, 0.9])
def test_fused_kernel_equals_the_torch_reference(mode: str, s_txt: float, s_img: float, t: float, low: float) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("triton")
    from wgc.models.bagel.guidance_triton import fused_guided_step

    g = Guidance(text_scale=s_txt, image_scale=s_img, renorm=mode, renorm_min=low)
    tensors = [x.cuda() for x in branches(n=4096, c=64)]
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        z, main, txt, img = (x.to(dtype) for x in tensors)
        fused = fused_guided_step(z, main, txt, img, t=t, dt=0.02, g=g)
        reference = guided_step(z, main, txt, img, t=t, dt=0.02, g=g)
        assert fused.dtype == dtype
        assert torch.allclose(fused.float(), reference.float(), atol=tol, rtol=tol), (dtype, mode)
