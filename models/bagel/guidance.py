"""BAGEL's flow schedule and classifier-free guidance step, as a torch reference (CPU and GPU).

Facts from BAGEL's `generate_image` and `_forward_flow` (models-wave2.md §1.5):

    s      = linspace(1, 0, steps)                        float32, as BAGEL builds it
    t      = shift · s / (1 + (shift − 1) · s)            t_0 = 1 (noise) … t_{steps−1} = 0 (data)
    dt_i   = t_i − t_{i+1} > 0                            one Euler update per i < steps − 1

The velocity v points from data to noise (training target noise − clean), so the update is

    z'     = z − dt · v

Guidance is on only when interval[0] < t ≤ interval[1] and text_scale > 1; otherwise (and also
when text_scale ≤ 1 inside the interval: no image guidance either) v = v_main alone. With guidance:

    v_txt' = v_txt + s_txt · (v_main − v_txt)            text guidance
    v      = v_img + s_img · (x − v_img)                   image guidance, only when s_img > 1

    "global" / "channel":  x = v_txt', then  v ← v · clamp(‖v_main‖ / (‖v‖ + 1e-8), renorm_min, 1),
                           the norm over the whole call's [N, C] (global) or per token (channel)
    "text_channel":        x = v_txt' · clamp(‖v_main‖ / (‖v_txt'‖ + 1e-8), renorm_min, 1) per
                           token, and no renorm after image guidance

A branch a skip rule turns off is never read: it may be None. Arithmetic runs in float32 (BAGEL
runs it in the autocast dtype); the result has z's dtype. The fused Triton kernel
(guidance_triton.py) must equal `guided_step`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RENORMS = ("global", "channel", "text_channel")
EPS = 1e-8  # BAGEL's guard in the renorm ratio


@dataclass(frozen=True)
class Guidance:
    """One request's guidance settings; the defaults are BAGEL's text-to-image ones."""

    text_scale: float = 4.0
    image_scale: float = 1.0
    renorm: str = "global"  # one of RENORMS
    renorm_min: float = 0.0
    interval: tuple[float, float] = (0.4, 1.0)

    def __post_init__(self) -> None:
        if self.renorm not in RENORMS:
            raise ValueError(f"unknown renormalisation `{self.renorm}` ({', '.join(RENORMS)})")

    def active(self, t: float) -> bool:
        """Guidance applies at t: inside the interval and with text guidance on."""
        low, high = self.interval
        return low < t <= high and self.text_scale > 1.0

    def uses_image(self, t: float) -> bool:
        """The image branch is read at t."""
        return self.active(t) and self.image_scale > 1.0


def schedule(steps: int, shift: float) -> torch.Tensor:
    """BAGEL's shifted timesteps [steps], float32, from 1 down to 0."""
    s = torch.linspace(1, 0, steps, dtype=torch.float32)  # [steps]
    return shift * s / (1 + (shift - 1) * s)


def renorm_ratio(main: torch.Tensor, guided: torch.Tensor, per_token: bool, low: float) -> torch.Tensor:
    """clamp(‖main‖ / (‖guided‖ + eps), low, 1): [N, 1] per token, [] over the whole tensor."""
    if per_token:
        ratio = main.norm(dim=-1, keepdim=True) / (guided.norm(dim=-1, keepdim=True) + EPS)  # [N, 1]
    else:
        ratio = main.norm() / (guided.norm() + EPS)  # []
    return ratio.clamp(min=low, max=1.0)


def combine(v_main: torch.Tensor, v_txt: torch.Tensor | None, v_img: torch.Tensor | None, g: Guidance,
            t: float) -> torch.Tensor:
    """The velocity BAGEL steps with at t: [N, C] in float32. Unread branches may be None."""
    main = v_main.float()  # [N, C]
    if not g.active(t):
        return main
    txt = _needed(v_txt, "v_text", "text_scale > 1")
    text = txt + g.text_scale * (main - txt)  # [N, C]
    if g.renorm == "text_channel":
        text = text * renorm_ratio(main, text, per_token=True, low=g.renorm_min)
        return _image_guided(text, v_img, g, t)
    guided = _image_guided(text, v_img, g, t)  # [N, C]
    return guided * renorm_ratio(main, guided, per_token=g.renorm == "channel", low=g.renorm_min)


def guided_step(z: torch.Tensor, v_main: torch.Tensor, v_txt: torch.Tensor | None, v_img: torch.Tensor | None,
                t: float, dt: float, g: Guidance) -> torch.Tensor:
    """z − dt · v (BAGEL's sign: v points from data to noise, dt > 0). Returns z's dtype."""
    v = combine(v_main, v_txt, v_img, g, t)  # [N, C]
    return (z.float() - dt * v).to(z.dtype)


def _image_guided(x: torch.Tensor, v_img: torch.Tensor | None, g: Guidance, t: float) -> torch.Tensor:
    if not g.uses_image(t):
        return x
    img = _needed(v_img, "v_img", "img_scale > 1").float()
    return img + g.image_scale * (x - img)  # [N, C]


def _needed(v: torch.Tensor | None, name: str, why: str) -> torch.Tensor:
    if v is None:
        raise ValueError(f"{name} is needed ({why} inside the guidance interval) but was not given")
    return v.float()
