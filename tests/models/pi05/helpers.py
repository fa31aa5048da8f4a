"""Specs from models/pi05.walk on cpu.toml, components on given weights, and a request driven through
the entries as the walk runs them (prefill, noise, 10 velocity steps, to_actions)."""

from __future__ import annotations

from functools import cache

import torch
from torch import Tensor
from wgc.models.pi05 import PaliGemmaWithExpert, SiglipEncoder, Stats
from wgc.models.pi05.config import Pi05Config
from wgc.models.pi05.weights import checkpoint_name
from wgc.runtime.components.base import Call

from tests.models.orpheus.helpers import ROOT
from wgc.compile import compile_program
from wgc.plan.model import ComponentSpec, Plan


@cache
def plan() -> Plan:
    source = ROOT / "models" / "pi05.walk"
    compiled = compile_program(str(source), source.read_text(), str(ROOT / "placements" / "cpu.toml"))
    assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
    return compiled.plan


def spec(name: str) -> ComponentSpec:
    return next(c for c in plan().components if c.name == name)


def components(config: Pi05Config, stats: Stats | None = None) -> tuple[SiglipEncoder, PaliGemmaWithExpert]:
    return (SiglipEncoder(spec("vit"), 0, "cpu", config=config),
            PaliGemmaWithExpert(spec("llm"), 0, "cpu", config=config, stats=stats))


def load_lerobot(vit: SiglipEncoder, llm: PaliGemmaWithExpert, state: dict[str, Tensor]) -> None:
    """Copy lerobot-named tensors into the components (the names weights.py maps)."""
    with torch.no_grad():
        for part, module in (("tower", vit.model), ("prefix", llm.prefix), ("expert", llm.expert),
                             ("heads", llm.heads)):
            name = checkpoint_name(part)
            for n, p in module.named_parameters():
                p.copy_(state[name(n)])


def images(cameras: int, size: int, seed: int = 0) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (cameras, size, size, 3), generator=gen, dtype=torch.uint8)  # [C, R, R, 3]


def pixels(imgs: Tensor) -> Tensor:
    """The reference's input: [C, 3, R, R] in [-1, 1], as the component makes it."""
    return imgs.permute(0, 3, 1, 2).float() / 255.0 * 2.0 - 1.0


def chunk(vit: SiglipEncoder, llm: PaliGemmaWithExpert, imgs: Tensor, task: str, state: Tensor, noise: Tensor,
          request: int = 1, steps: int = 10) -> Tensor:
    """The walk's flow on the components: prefill once, `steps` Euler steps; the final x (normalised)."""
    x = vit.encode([Call(request, "", (imgs,))])[0]
    llm.prefill([Call(request, "", (x, task, state))])
    a = noise
    for k in range(steps):
        v = llm.velocity([Call(request, "", (a, 1.0 - k / steps))])[0]
        a = a - v / steps
    return a
