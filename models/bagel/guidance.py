"""BAGEL's classifier-free guidance step, as a torch reference (CPU and GPU).

One flow-matching update from the three guidance branches (models.md):

    v_txt' = v_txt + s_txt · (v_main − v_txt)            text guidance
    v      = v_img + s_img · (v_txt' − v_img)            image guidance (when s_img != 1)
    v      = v · clamp(‖v_main‖ / ‖v‖, renorm_min, 1)     renormalisation: "global" or "channel"
    z'     = z + dt · v                                   Euler update

Guidance applies only for t inside `interval` (BAGEL: 0.4 < t ≤ 1.0); outside it the step uses
v_main alone. The fused Triton kernel (guidance_triton.py) must equal this function.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Guidance:
    text_scale: float = 4.0
    image_scale: float = 1.0
    renorm: str = "global"  # "global" | "channel" | "none"
    renorm_min: float = 0.0
    interval: tuple[float, float] = (0.4, 1.0)

    def active(self, t: float) -> bool:
        low, high = self.interval
        return low < t <= high


def combine(v_main: torch.Tensor, v_txt: torch.Tensor, v_img: torch.Tensor, g: Guidance) -> torch.Tensor:
    """The guided velocity. All inputs [N, C]; returns [N, C] in float32 accumulation."""
    main, txt, img = v_main.float(), v_txt.float(), v_img.float()
    guided = txt + g.text_scale * (main - txt)  # [N, C]
    if g.image_scale != 1.0:
        guided = img + g.image_scale * (guided - img)  # [N, C]
    if g.renorm == "global":
        scale = main.norm() / (guided.norm() + 1e-8)  # []
    elif g.renorm == "channel":
        scale = main.norm(dim=-1, keepdim=True) / (guided.norm(dim=-1, keepdim=True) + 1e-8)  # [N, 1]
    elif g.renorm == "none":
        return guided
    else:
        raise ValueError(f"unknown renormalisation `{g.renorm}` (global, channel, none)")
    return guided * scale.clamp(min=g.renorm_min, max=1.0)


def guided_step(z: torch.Tensor, v_main: torch.Tensor, v_txt: torch.Tensor, v_img: torch.Tensor,
                t: float, dt: float, g: Guidance) -> torch.Tensor:
    """z + dt · v, with v guided when t is inside the guidance interval. Returns z's dtype."""
    v = combine(v_main, v_txt, v_img, g) if g.active(t) else v_main.float()  # [N, C]
    return (z.float() + dt * v).to(z.dtype)
