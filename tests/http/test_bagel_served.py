"""BAGEL served: models/bagel.walk compiled for placements/cpu.toml and cpu3.toml, `wgc run PLAN --serve`
with the real tiny components, driven with the official `openai` client.

Text-to-image (size, n, seed; b64_json PNGs decoded from the VAE), an edit (multipart image and
prompt, BAGEL's editing guidance by default), an understanding answer in chat, think mode as a
param, the native /v1/generate; the same seed gives the same PNG bytes on both placements; bad
inputs are 4xx naming their field.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest
from wgc.models.bagel.guidance import Guidance, schedule

from tests.http.server import API_KEY, ROOT, Server, compile_plan

PIL = pytest.importorskip("PIL.Image")
QUICK = {"steps": 4}
EDIT = {"cfg_img_scale": 2.0, "cfg_interval_low": 0.0, "cfg_renorm_type": "text_channel"}  # BAGEL's edit settings


def serve(tmp_path_factory: pytest.TempPathFactory, placement: str) -> Iterator[Server]:
    plan = compile_plan(tmp_path_factory.mktemp(placement.removesuffix(".toml")), ROOT / "models" / "bagel.walk",
                        placement)
    server = Server(plan, "--api-key", API_KEY, ready_timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fused(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(tmp_path_factory, "cpu.toml")


@pytest.fixture(scope="module")
def spread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(tmp_path_factory, "cpu3.toml")


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, timeout=120, max_retries=0)


def png_file(width: int, height: int, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    PIL.new("RGB", (width, height), colour).save(buf, "PNG")
    return buf.getvalue()


def decoded(b64: str) -> tuple[bytes, object]:
    data = base64.b64decode(b64)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    return data, PIL.open(io.BytesIO(data))


def generate(server: Server, seed: int, size: str = "64x96", **params: object) -> bytes:
    r = client(server).images.generate(model="bagel", prompt="a lighthouse at dusk", size=size,
                                       response_format="b64_json",
                                       extra_body={"seed": seed, "params": {**QUICK, **params}})
    return decoded(r.data[0].b64_json)[0]


def test_text_to_image_honours_size_n_and_seed(fused: Server) -> None:
    r = client(fused).images.generate(model="bagel", prompt="a red cat", size="64x96", n=2,
                                      extra_body={"seed": 3, "params": QUICK})
    assert r.size == "64x96" and len(r.data) == 2
    images = [decoded(d.b64_json) for d in r.data]
    assert all(img.size == (64, 96) and img.mode == "RGB" for _, img in images)  # width 64, height 96
    assert images[0][0] != images[1][0]  # seeds 3 and 4
    again = client(fused).images.generate(model="bagel", prompt="a red cat", size="64x96",
                                          extra_body={"seed": 4, "params": QUICK})
    # choice 1 is seed 4; one level apart at most where vae_dec decoded the two choices as one batch
    alone, choice = (np.asarray(decoded(b64)[1], dtype=np.int16) for b64 in (again.data[0].b64_json, r.data[1].b64_json))
    assert np.abs(alone - choice).max() <= 1


def test_a_seed_gives_the_same_png_on_every_placement(fused: Server, spread: Server) -> None:
    pairs = [(generate(fused, seed, **params), generate(spread, seed, **params))
             for seed, params in ((7, {}), (7, {"cfg_img_scale": 2.0, "cfg_renorm_type": "channel"}))]
    assert all(a == b for a, b in pairs)
    assert pairs[0][0] != pairs[1][0]  # the image branch and the renorm are read: the three ranks all took part


def edit(server: Server, **params: object) -> bytes:
    r = client(server).images.edit(model="bagel", image=("in.png", png_file(50, 40), "image/png"),
                                   prompt="make it blue", size="64x64",
                                   extra_body={"seed": 5, "params": {**QUICK, **params}})
    data, img = decoded(r.data[0].b64_json)
    assert img.size == (64, 64)
    return data


def test_an_edit_uses_bagels_editing_guidance_unless_the_request_overrides_it(fused: Server, spread: Server) -> None:
    default = edit(fused)
    assert default == edit(fused, **EDIT)  # the walk's edit_* consts are an edit's defaults
    assert default != edit(fused, cfg_img_scale=1.0, cfg_interval_low=0.4, cfg_renorm_type="global")
    assert default == edit(spread)


def test_chat_answers_about_an_image_in_text_and_thinks_on_request(fused: Server, spread: Server) -> None:
    url = "data:image/png;base64," + base64.b64encode(png_file(40, 48, (10, 200, 10))).decode()
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                             {"type": "text", "text": "What colour is this?"}]}]
    answers = []
    for server in (fused, spread):
        r = client(server).chat.completions.create(model="bagel", messages=messages, max_tokens=8)
        (choice,) = r.choices
        assert isinstance(choice.message.content, str) and choice.finish_reason in ("stop", "length")
        assert r.usage.prompt_tokens == len("What colour is this?") and 1 <= r.usage.completion_tokens <= 8
        answers.append(choice.message.content)
    assert answers[0] == answers[1]  # greedy: the same answer wherever the branches run
    thought = client(fused).chat.completions.create(model="bagel", messages=messages, max_tokens=8,
                                                    extra_body={"params": {"think": True}})
    assert thought.choices[0].message.content != answers[0]  # the think system prompt came first


def test_the_native_route_generates_an_image_and_thinks_first(fused: Server) -> None:
    r = httpx.post(f"{fused.url}/v1/generate", timeout=120, headers={"authorization": f"Bearer {API_KEY}"},
                   json={"model": "bagel", "parts": [{"kind": "text", "data": "a cat"}], "outputs": ["image"],
                         "params": {"steps": 3, "height": 32, "width": 48, "seed": 1, "think": True,
                                    "max_tokens": 5},
                         "stream": False, "tensor_encoding": "base64"})
    assert r.status_code == 200, r.text
    events = r.json()["events"]
    kinds = [e.get("modality") for e in events if e["type"] == "output"]
    assert kinds[-1] == "image" and 1 <= kinds.count("text") <= 5  # the plan, then the image
    image = next(e for e in events if e.get("modality") == "image")
    assert image["shape"] == [32, 48, 3] and image["dtype"] == "uint8"
    assert events[-1]["type"] == "done"


@pytest.mark.parametrize(("body", "field"), [
    ({"prompt": ["not", "text"], "size": "64x64"}, "prompt"),
    ({"prompt": "x", "size": "60x64"}, "size"),  # not a multiple of 16
    ({"prompt": "x", "size": "2048x64"}, "size"),  # past the walk's bounds
    ({"prompt": "x", "size": "big"}, "size"),
])
def test_bad_generation_inputs_name_their_field(fused: Server, body: dict, field: str) -> None:
    r = httpx.post(f"{fused.url}/v1/images/generations", headers={"authorization": f"Bearer {API_KEY}"},
                   json={"model": "bagel", **body, "params": QUICK}, timeout=60)
    assert 400 <= r.status_code < 500 and r.json()["error"]["param"] == field, r.text


def test_an_image_that_is_not_an_image_is_400_naming_it(fused: Server) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(fused).images.edit(model="bagel", image=("in.png", b"not a png", "image/png"), prompt="x",
                                  size="64x64")
    assert err.value.code == "invalid_media" and err.value.param == "image[0]"
    with pytest.raises(openai.BadRequestError) as err:
        client(fused).chat.completions.create(model="bagel", max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGEgcG5n"}}]}])
    assert err.value.code == "invalid_media" and err.value.param == "messages[0].content[0]"


def _velocity_counts(server: Server) -> tuple[int, int]:
    """(llm.velocities, llm.velocities_skipped) over the ranks: /health asks each rank its counters now."""
    ranks = httpx.get(f"{server.url}/health").json()["ranks"]
    return tuple(sum(r["counters"].get(f"llm.{key}", 0) for r in ranks)  # type: ignore[return-value]
                 for key in ("velocities", "velocities_skipped"))


def test_an_edit_computes_the_image_branch_and_text_to_image_skips_it(fused: Server) -> None:
    """/v1/images/edits applies the walk's edit_* defaults, so its cfg_img velocities are computed; a
    text-to-image request at the params' defaults computes none (its branch is never read)."""
    t2i = Guidance()
    edits = Guidance(image_scale=EDIT["cfg_img_scale"], interval=(EDIT["cfg_interval_low"], 1.0))
    ts = schedule(QUICK["steps"], 3.0).tolist()[:-1]  # the t of each Euler update at the default shift
    assert sum(map(t2i.uses_image, ts)) == 0 < sum(map(edits.uses_image, ts))  # the two cases differ
    for run, g in ((lambda: generate(fused, 9), t2i), (lambda: edit(fused), edits)):
        before = _velocity_counts(fused)
        run()
        after = _velocity_counts(fused)
        computed = len(ts) + sum(map(g.active, ts)) + sum(map(g.uses_image, ts))
        assert (after[0] - before[0], after[1] - before[1]) == (computed, 3 * len(ts) - computed)
