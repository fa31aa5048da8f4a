"""`combine` of models/bagel.walk: BAGEL's flow schedule and guided Euler update; no weights.

    timestep(i, steps, shift) -> scalar        t_i of guidance.schedule (float32 values, as BAGEL)
    reads_text(t, text_scale, interval_low, interval_high) -> scalar               1 if step reads v_text, else 0
    reads_image(t, text_scale, img_scale, interval_low, interval_high) -> scalar   1 if step reads v_img, else 0
    step(z, t, dt, v_main, v_text, v_img, text_scale, img_scale,
         interval_low, interval_high, renorm, renorm_min) -> tensor      z − dt · v (guidance.py)

The two `reads_*` flags are Guidance.active / uses_image (the rules are written once, in guidance.py):
the walk passes them to the cfg branches' `llm.velocity(z, t, needed)`, which computes nothing for a
branch `step` will not read (the checker types a flag as a scalar, so it is 1 or 0, not a bool).

Every entry is batched over calls, and each call is its own request's step: its own tensors and
scalars, and a "global" renorm over that call's latents only (BAGEL's norm spans one image; one
norm over several requests' latents would couple them). On CUDA the step runs the fused Triton
kernels (guidance_triton.py), elsewhere the torch reference; the two are equal.

A call with arguments it cannot use (an index outside the schedule, an unknown renorm, mismatched
shapes, a missing branch that its scales need) fails alone, with a CallError naming its request.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import torch
from wgc.models.bagel.guidance import RENORMS, Guidance, schedule
from wgc.models.bagel.guidance_triton import fused_guided_step
from wgc.runtime.components.base import Call, CallError, Component


class GuidanceCombine(Component):
    """Stateless, no weights: the schedule and the guidance step of every request."""

    def describe(self) -> str:
        return "no weights (schedule and guidance arithmetic)"

    def timestep(self, calls: list[Call]) -> list[float]:
        tables: dict[tuple[int, float], list[float]] = {}  # one schedule per (steps, shift) in the batch
        out = []
        for call in calls:
            i, steps, shift = call.args
            if int(steps) != steps or steps < 2 or int(i) != i or not 0 <= i < steps:
                raise CallError(call.request, f"timestep {i} of {steps} steps: needs 0 <= i < steps and steps >= 2")
            if not shift > 0:
                raise CallError(call.request, f"timestep shift {shift}: must be positive")
            key = (int(steps), float(shift))
            if key not in tables:
                tables[key] = schedule(*key).tolist()
            out.append(tables[key][int(i)])
        return out

    def reads_text(self, calls: list[Call]) -> list[int]:
        """1 where `step` reads v_text at the call's t (Guidance.active), else 0."""
        out = []
        for call in calls:
            t, text_scale, low, high = _numbers(call, "reads_text", "t, text_scale, interval_low, interval_high")
            out.append(int(Guidance(text_scale, interval=(low, high)).active(t)))
        return out

    def reads_image(self, calls: list[Call]) -> list[int]:
        """1 where `step` reads v_img at the call's t (Guidance.uses_image), else 0."""
        out = []
        for call in calls:
            t, text_scale, img_scale, low, high = _numbers(
                call, "reads_image", "t, text_scale, img_scale, interval_low, interval_high")
            out.append(int(Guidance(text_scale, img_scale, interval=(low, high)).uses_image(t)))
        return out

    def step(self, calls: list[Call]) -> list[torch.Tensor]:
        return [self._step(call) for call in calls]

    def _step(self, call: Call) -> torch.Tensor:
        z, t, dt, v_main, v_text, v_img, text_scale, img_scale, low, high, renorm, renorm_min = call.args
        if renorm not in RENORMS:
            raise CallError(call.request, f"cfg renorm `{renorm}`: not one of {', '.join(RENORMS)}")
        g = Guidance(float(text_scale), float(img_scale), renorm, float(renorm_min), (float(low), float(high)))
        t = float(t)
        needed = {"v_main": v_main, **({"v_text": v_text} if g.active(t) else {}),
                  **({"v_img": v_img} if g.uses_image(t) else {})}
        for name, v in needed.items():
            if not isinstance(v, torch.Tensor) or v.shape != z.shape:
                raise CallError(call.request, f"combine.step: {name} {_shape(v)} does not match z {_shape(z)}")
        on = self._on
        return fused_guided_step(on(z), on(v_main), on(needed.get("v_text")), on(needed.get("v_img")),
                                 t, float(dt), g)

    def _on(self, v: torch.Tensor | None) -> torch.Tensor | None:
        return None if v is None else v.to(self.device)


def _numbers(call: Call, entry: str, names: str) -> list[float]:
    """The call's arguments as floats, one per name, or its CallError."""
    if len(call.args) != names.count(",") + 1 or not all(isinstance(v, Real) for v in call.args):
        raise CallError(call.request, f"combine.{entry}({names}): needs numbers, got {call.args!r}")
    return [float(v) for v in call.args]


def _shape(v: Any) -> str:
    return f"[{', '.join(map(str, v.shape))}]" if isinstance(v, torch.Tensor) else f"({type(v).__name__})"
