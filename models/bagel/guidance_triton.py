"""The guidance step fused into one Triton kernel per row (channel renorm) or two launches (global).

Imported only on CUDA: `fused_guided_step` falls back to the torch reference (guidance.py) for
anything the kernel does not cover, so callers never need to know which one ran.
"""

from __future__ import annotations

import torch
from wgc.models.bagel.guidance import Guidance, guided_step


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def combine_rows(main_ptr, txt_ptr, img_ptr, out_ptr, sq_main_ptr, sq_out_ptr, C,
                     s_txt, s_img, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < C
        base = row * C
        main = tl.load(main_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        txt = tl.load(txt_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        img = tl.load(img_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        guided = txt + s_txt * (main - txt)
        guided = img + s_img * (guided - img)
        tl.store(out_ptr + base + cols, guided, mask=mask)
        tl.store(sq_main_ptr + row, tl.sum(main * main, axis=0))
        tl.store(sq_out_ptr + row, tl.sum(guided * guided, axis=0))

    @triton.jit
    def update_rows(z_ptr, v_ptr, scale_ptr, out_ptr, C, dt, per_row: tl.constexpr,
                    BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < C
        base = row * C
        z = tl.load(z_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + base + cols, mask=mask, other=0.0)
        scale = tl.load(scale_ptr + row) if per_row else tl.load(scale_ptr)
        tl.store(out_ptr + base + cols, (z + dt * v * scale).to(out_ptr.dtype.element_ty), mask=mask)

    return triton, combine_rows, update_rows


def fused_guided_step(z: torch.Tensor, v_main: torch.Tensor, v_txt: torch.Tensor, v_img: torch.Tensor,
                      t: float, dt: float, g: Guidance) -> torch.Tensor:
    if not (z.is_cuda and g.active(t) and g.renorm in ("global", "channel") and z.dim() == 2):
        return guided_step(z, v_main, v_txt, v_img, t, dt, g)
    triton, combine_rows, update_rows = _kernels()
    n, c = z.shape
    block = triton.next_power_of_2(c)
    guided = torch.empty((n, c), device=z.device, dtype=torch.float32)  # [N, C]
    sq_main = torch.empty(n, device=z.device, dtype=torch.float32)  # [N]
    sq_out = torch.empty(n, device=z.device, dtype=torch.float32)  # [N]
    main, txt, img = (x.contiguous() for x in (v_main, v_txt, v_img))
    combine_rows[(n,)](main, txt, img, guided, sq_main, sq_out, c, g.text_scale,
                       g.image_scale, BLOCK=block)
    if g.renorm == "global":
        scale = (sq_main.sum().sqrt() / (sq_out.sum().sqrt() + 1e-8)).clamp(g.renorm_min, 1.0).reshape(1)  # [1]
    else:
        scale = (sq_main.sqrt() / (sq_out.sqrt() + 1e-8)).clamp(g.renorm_min, 1.0)  # [N]
    out = torch.empty_like(z)
    update_rows[(n,)](z.contiguous(), guided, scale, out, c, dt, per_row=g.renorm == "channel", BLOCK=block)
    return out
