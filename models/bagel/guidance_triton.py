"""The guidance step (guidance.py) fused into Triton kernels: one launch for the per-token renorms,
two for the global one (its norm spans every row of the call).

`fused_guided_step` equals `guidance.guided_step` for every mode. It runs the kernels only on CUDA
with Triton installed and guidance on at t; anything else (CPU, no Triton, a step outside the
interval or with text_scale ≤ 1, which is `z − dt · v_main`) takes the torch reference, so callers
never need to know which one ran. Triton is imported on the first kernel launch, never before.

The decisions made on the host (`launch_plan`, `global_ratio`) are plain torch and tested on CPU.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import torch
from wgc.models.bagel.guidance import EPS, Guidance, guided_step

RENORM_CODES = {"global": 0, "channel": 1, "text_channel": 2}  # the kernels' RENORM constexpr


class LaunchPlan(NamedTuple):
    renorm: int  # RENORM_CODES value
    use_img: bool  # the image branch is read (img_scale > 1)
    two_pass: bool  # global: rows first, then one ratio for the whole call


def launch_plan(g: Guidance, t: float) -> LaunchPlan | None:
    """What the kernels do at t, or None when there is no guidance (the step is z − dt · v_main)."""
    if not g.active(t):
        return None
    code = RENORM_CODES[g.renorm]
    return LaunchPlan(code, g.uses_image(t), two_pass=code == 0)


def global_ratio(sq_main: torch.Tensor, sq_guided: torch.Tensor, renorm_min: float) -> torch.Tensor:
    """The global renorm from per-row sums of squares [N]: clamp(‖main‖ / (‖guided‖ + eps), min, 1), [1]."""
    return (sq_main.sum().sqrt() / (sq_guided.sum().sqrt() + EPS)).clamp(renorm_min, 1.0).reshape(1)


@functools.cache
def _kernels() -> tuple[Any, Any, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def guide_rows(z_ptr, main_ptr, txt_ptr, img_ptr, guided_ptr, out_ptr, sq_main_ptr, sq_out_ptr, C,
                   s_txt, s_img, renorm_min, dt, USE_IMG: tl.constexpr, RENORM: tl.constexpr,
                   BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < C
        base = row.to(tl.int64) * C
        main = tl.load(main_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        txt = tl.load(txt_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        sq_main = tl.sum(main * main, axis=0)
        guided = txt + s_txt * (main - txt)
        if RENORM == 2:  # text_channel: renorm the text-guided velocity per token, before image guidance
            ratio = tl.sqrt(sq_main) / (tl.sqrt(tl.sum(guided * guided, axis=0)) + 1e-8)
            guided = guided * tl.minimum(tl.maximum(ratio, renorm_min), 1.0)
        if USE_IMG:
            img = tl.load(img_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            guided = img + s_img * (guided - img)
        if RENORM == 1:  # channel: renorm per token after image guidance
            ratio = tl.sqrt(sq_main) / (tl.sqrt(tl.sum(guided * guided, axis=0)) + 1e-8)
            guided = guided * tl.minimum(tl.maximum(ratio, renorm_min), 1.0)
        if RENORM == 0:  # global: the ratio needs every row; the update is the second launch
            tl.store(guided_ptr + base + cols, guided, mask=mask)
            tl.store(sq_main_ptr + row, sq_main)
            tl.store(sq_out_ptr + row, tl.sum(guided * guided, axis=0))
        else:
            z = tl.load(z_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + base + cols, (z - dt * guided).to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def update_rows(z_ptr, v_ptr, ratio_ptr, out_ptr, C, dt, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < C
        base = row.to(tl.int64) * C
        z = tl.load(z_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + base + cols, mask=mask, other=0.0)
        ratio = tl.load(ratio_ptr)
        tl.store(out_ptr + base + cols, (z - dt * v * ratio).to(out_ptr.dtype.element_ty), mask=mask)

    return triton, guide_rows, update_rows


def fused_guided_step(z: torch.Tensor, v_main: torch.Tensor, v_txt: torch.Tensor | None,
                      v_img: torch.Tensor | None, t: float, dt: float, g: Guidance) -> torch.Tensor:
    """z − dt · v as guidance.guided_step computes it; unread branches may be None."""
    plan = launch_plan(g, t)
    if plan is None or not (z.is_cuda and z.dim() == 2) or v_txt is None or (plan.use_img and v_img is None):
        return guided_step(z, v_main, v_txt, v_img, t, dt, g)
    try:
        triton, guide_rows, update_rows = _kernels()
    except ImportError:
        return guided_step(z, v_main, v_txt, v_img, t, dt, g)
    n, c = z.shape
    block = triton.next_power_of_2(c)
    zc, main, txt = z.contiguous(), v_main.contiguous(), v_txt.contiguous()
    img = v_img.contiguous() if plan.use_img else main  # never read without USE_IMG
    out = torch.empty_like(zc)  # [N, C]
    if plan.two_pass:
        guided = torch.empty((n, c), device=z.device, dtype=torch.float32)  # [N, C]
        sq_main = torch.empty(n, device=z.device, dtype=torch.float32)  # [N]
        sq_out = torch.empty(n, device=z.device, dtype=torch.float32)  # [N]
    else:
        guided = sq_main = sq_out = out  # unused pointers
    guide_rows[(n,)](zc, main, txt, img, guided, out, sq_main, sq_out, c, float(g.text_scale),
                     float(g.image_scale), float(g.renorm_min), float(dt), USE_IMG=plan.use_img,
                     RENORM=plan.renorm, BLOCK=block)
    if plan.two_pass:
        ratio = global_ratio(sq_main, sq_out, g.renorm_min)  # [1]
        update_rows[(n,)](zc, guided, ratio, out, c, float(dt), BLOCK=block)
    return out
