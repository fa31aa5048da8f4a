"""BAGEL end to end in process: models/bagel.walk compiled for placements/cpu.toml (the three guidance
branches fused on one rank) and cpu3.toml (one branch per rank), run on the tiny components.

Text-to-image, an edit, an understanding answer and think mode each finish with every KV page
released; a fixed seed gives the same PNG bytes on both placements; concurrent text-to-image
requests share their velocity forwards step by step (one joining mid-way), and each request's
latents are bit-identical to its latents generated alone (docs/models/bagel.md, End to end).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
import torch
from wgc.models.bagel import LanguageModel, VaeDecoder
from wgc.models.bagel.config import IM_END
from wgc.runtime.components.base import Call, Component, load_class
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.http.media.png import encode_png
from wgc.runtime.process.local import LocalCluster
from wgc.runtime.protocol.messages import Part

from tests.models.orpheus.helpers import ROOT
from wgc.compile import compile_program
from wgc.plan.model import ComponentSpec, Plan

EDIT = {"cfg_img_scale": 2.0, "cfg_interval_low": 0.0, "cfg_renorm_type": "text_channel"}  # BAGEL's edit settings


@cache
def plan(placement: str) -> Plan:
    source = ROOT / "models" / "bagel.walk"
    compiled = compile_program(str(source), source.read_text(), str(ROOT / "placements" / placement))
    assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
    return compiled.plan


class RecordingLM(LanguageModel):
    """The tiny LLM, recording the requests of each velocity call; `on_velocity` runs after each."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.velocity_calls: list[list[int]] = []
        self.on_velocity: Callable[[], None] | None = None

    def velocity(self, calls: list[Call]) -> list[Any]:
        out = super().velocity(calls)
        self.velocity_calls.append([c.request for c in calls])
        if self.on_velocity is not None:
            self.on_velocity()
        return out


class RecordingDecoder(VaeDecoder):
    """The tiny VAE decoder, keeping each request's final latents."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.latents: dict[int, torch.Tensor] = {}

    def decode(self, calls: list[Call]) -> list[torch.Tensor]:
        self.latents.update({c.request: c.args[0].clone() for c in calls})
        return super().decode(calls)


def cluster(placement: str, rounds: int | None = None) -> tuple[LocalCluster, list[Component]]:
    made: list[Component] = []

    def factory(spec: ComponentSpec, rank: int) -> Component:
        cls = {"llm": RecordingLM, "vae_dec": RecordingDecoder}.get(spec.name)
        made.append(cls(spec, rank, "cpu", preset="tiny") if cls else load_class(spec.cls).tiny(spec, rank, "cpu"))
        return made[-1]

    return LocalCluster(plan(placement), factory, fake_inputs=False, rounds=rounds), made


@pytest.fixture(scope="module", params=["cpu.toml", "cpu3.toml"])
def placed(request: pytest.FixtureRequest) -> tuple[LocalCluster, list[Component]]:
    return cluster(request.param)


def image(h: int, w: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (h, w, 3), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def t2i(prompt: str, seed: int, h: int = 64, w: int = 64, steps: int = 6, **params: Any) -> RequestSpec:
    return RequestSpec(params={"steps": steps, "height": h, "width": w, "seed": seed, **params},
                       parts=[Part("text", prompt)], input_modalities=["text"], output_modalities=["image"])


def edit(img: torch.Tensor, prompt: str, seed: int) -> RequestSpec:
    return RequestSpec(params={"steps": 4, "height": 64, "width": 64, "seed": seed, **EDIT},
                       parts=[Part("image", img), Part("text", prompt)], input_modalities=["image", "text"],
                       output_modalities=["image"])


def understand(img: torch.Tensor, question: str, **params: Any) -> RequestSpec:
    return RequestSpec(params={"max_tokens": 12, **params}, parts=[Part("image", img), Part("text", question)],
                       input_modalities=["image", "text"], output_modalities=["text"])


def one(c: LocalCluster, spec: RequestSpec) -> dict[str, list[Any]]:
    (out,) = c.run([spec]).values()
    return out


def released(made: list[Component]) -> None:
    for llm in (m for m in made if isinstance(m, LanguageModel)):
        counters = llm.counters()
        assert counters["kv_pages_used"] == 0 and counters["requests"] == 0, counters


def test_text_to_image_edit_understanding_and_think_run_and_release_every_page(placed) -> None:
    c, made = placed
    out = one(c, t2i("a red cat", seed=1, w=96))
    assert [tuple(i.shape) for i in out["image"]] == [(64, 96, 3)] and out["image"][0].dtype == torch.uint8
    assert "text" not in out
    out = one(c, edit(image(80, 100, 2), "make it blue", seed=2))
    assert [tuple(i.shape) for i in out["image"]] == [(64, 64, 3)]
    vit = next(m for m in made if type(m).__name__ == "VitEncoder")
    assert vit.counters()["images"] == 1  # the edit's image went through the VAE and then the ViT
    out = one(c, understand(image(48, 40, 3), "what is in the picture?"))
    tokens = out["text"]
    assert 1 <= len(tokens) <= 12 and "image" not in out
    assert len(tokens) == 12 or tokens[-1] == IM_END
    out = one(c, t2i("a dog", seed=4, h=32, w=32, steps=3, think=True, max_tokens=6))  # the plan, then the image
    assert len(out["text"]) <= 6 and [tuple(i.shape) for i in out["image"]] == [(32, 32, 3)]
    think = one(c, understand(image(48, 40, 3), "what is in the picture?", think=True))
    assert think["text"] != tokens  # the think system prompt came first
    released(made)


@cache
def pngs(placement: str) -> list[bytes]:
    c, made = cluster(placement)
    specs = [t2i("a lighthouse at dusk", seed=11, w=96, steps=8, cfg_img_scale=2.0),  # all three branches read
             t2i("a lighthouse at dusk", seed=11, w=96, steps=8, cfg_renorm_type="channel", cfg_img_scale=2.0),
             edit(image(64, 80, 5), "add a moon", seed=12)]
    images = [one(c, s)["image"][0] for s in specs]
    released(made)
    return [encode_png(img.numpy()) for img in images]


def test_a_seed_gives_the_same_png_on_every_placement() -> None:
    fused, spread = pngs("cpu.toml"), pngs("cpu3.toml")
    assert fused == spread
    assert len(set(fused)) == 3  # the renorm and the edit matter: the images are not all the same


def test_a_negative_seed_derives_one_from_the_request() -> None:
    c, _ = cluster("cpu.toml")
    first, second = (one(c, t2i("a cat", seed=-1, steps=3))["image"][0] for _ in range(2))
    assert not torch.equal(first, second)


def latents_alone(specs: list[RequestSpec]) -> list[torch.Tensor]:
    c, made = cluster("cpu.toml", rounds=1)
    dec = next(m for m in made if isinstance(m, RecordingDecoder))
    ids = [next(iter(c.run([s]))) for s in specs]
    return [dec.latents[i] for i in ids]


def test_concurrent_requests_batch_their_velocity_steps_and_each_gets_its_own_latents() -> None:
    specs = [t2i("a cat", seed=1), t2i("a red dog on the grass", seed=2), t2i("x", seed=3, w=96)]
    alone = latents_alone(specs)
    c, made = cluster("cpu.toml", rounds=1)
    llm = next(m for m in made if isinstance(m, RecordingLM))
    dec = next(m for m in made if isinstance(m, RecordingDecoder))
    out = c.run(specs)
    ids = sorted(out)
    # a step's velocity calls of all three requests and their three labels in one forward, up to
    # cpu.toml's max_batch of 8 (so each step takes two: 8 + 1); the global renorm stays per request
    assert [len(calls) for calls in llm.velocity_calls] == [8, 1] * 5
    assert max(len(set(calls)) for calls in llm.velocity_calls) == 3
    stats = c.executors[0].counters()
    assert stats["llm.velocity.items"] / stats["llm.velocity.calls"] > 3  # more than one request's labels
    for i, z in zip(ids, alone):
        assert torch.equal(dec.latents[i], z)
    released(made)


def test_a_request_joins_the_steps_of_one_already_running() -> None:
    first, later = t2i("a cat", seed=1, steps=10), t2i("a boat", seed=2, steps=4)
    alone = latents_alone([first, later])
    c, made = cluster("cpu.toml", rounds=1)
    llm = next(m for m in made if isinstance(m, RecordingLM))
    dec = next(m for m in made if isinstance(m, RecordingDecoder))
    joined: list[int] = []

    def arrive() -> None:
        if len(llm.velocity_calls) == 3 and not joined:
            joined.append(c.submit(later))

    llm.on_velocity = arrive
    a = c.submit(first)
    c.pump()
    (b,) = joined
    assert {e.request for e in c.take_events() if e.kind == "done"} == {a, b}
    shared = [i for i, calls in enumerate(llm.velocity_calls) if {a, b} <= set(calls)]
    assert len(shared) == 3 and shared[0] > 3  # b's three steps ran inside a's, from a's fourth on
    assert torch.equal(dec.latents[a], alone[0]) and torch.equal(dec.latents[b], alone[1])
    released(made)
