"""BAGEL's guidance step: the torch reference against the formula, and the fused kernel against it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from wgc.models.bagel.guidance import Guidance, combine, guided_step


def branches(n: int = 16, c: int = 64, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, c, generator=g) for _ in range(4))


def test_combination_follows_the_formula_before_renormalisation() -> None:
    _, main, txt, img = branches()
    g = Guidance(text_scale=4.0, image_scale=2.0, renorm="none")
    expected = img + 2.0 * (txt + 4.0 * (main - txt) - img)
    assert torch.allclose(combine(main, txt, img, g), expected, atol=1e-5)


def test_image_scale_one_is_text_guidance_only() -> None:
    _, main, txt, img = branches()
    g = Guidance(text_scale=3.0, image_scale=1.0, renorm="none")
    assert torch.allclose(combine(main, txt, img, g), txt + 3.0 * (main - txt), atol=1e-5)


@pytest.mark.parametrize("mode", ["global", "channel"])
def test_renormalisation_never_grows_past_the_unguided_norm(mode: str) -> None:
    _, main, txt, img = branches()
    v = combine(main, txt, img, Guidance(text_scale=4.0, image_scale=2.0, renorm=mode))
    if mode == "global":
        assert v.norm() <= main.norm() * (1 + 1e-5)
    else:
        assert bool((v.norm(dim=-1) <= main.norm(dim=-1) * (1 + 1e-5)).all())
    raw = combine(main, txt, img, Guidance(text_scale=4.0, image_scale=2.0, renorm="none"))
    # Renormalisation scales (the whole tensor, or each row), it never turns a row.
    cosine = torch.nn.functional.cosine_similarity(v, raw, dim=-1)  # [N]
    assert bool((cosine > 0.9999).all())


def test_outside_the_interval_the_step_uses_the_main_branch_alone() -> None:
    z, main, txt, img = branches()
    g = Guidance(interval=(0.4, 1.0))
    assert torch.allclose(guided_step(z, main, txt, img, t=0.2, dt=-0.02, g=g), z - 0.02 * main)
    inside = guided_step(z, main, txt, img, t=0.8, dt=-0.02, g=g)
    assert not torch.allclose(inside, z - 0.02 * main)


def test_unknown_renormalisation_is_rejected() -> None:
    _, main, txt, img = branches()
    with pytest.raises(ValueError, match="renormalisation"):
        combine(main, txt, img, Guidance(renorm="spectral"))


def test_the_fused_module_imports_no_triton_until_a_cuda_step_runs() -> None:
    code = ("import sys, wgc.models.bagel.guidance_triton as m, torch; "
            "from wgc.models.bagel.guidance import Guidance; "
            "z = torch.zeros(2, 4); m.fused_guided_step(z, z, z, z, 0.5, -0.1, Guidance()); "
            "print('triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["global", "channel"])
def test_fused_kernel_equals_the_torch_reference(mode: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("triton")
    from wgc.models.bagel.guidance_triton import fused_guided_step

    z, main, txt, img = (x.cuda().to(torch.bfloat16) for x in branches(n=4096, c=64))
    g = Guidance(text_scale=4.0, image_scale=2.0, renorm=mode)
    fused = fused_guided_step(z, main, txt, img, t=0.7, dt=-0.02, g=g)
    reference = guided_step(z, main, txt, img, t=0.7, dt=-0.02, g=g)
    assert torch.allclose(fused.float(), reference.float(), atol=2e-2, rtol=2e-2)
