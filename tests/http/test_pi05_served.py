"""π0.5 served: models/pi05.walk on placements/cpu.toml, `wgc run PLAN --serve` with the real tiny
components (56 px cameras, a state of 8, actions [50, 7]), driven with httpx: the policy route
(camera images, state and task in; one action chunk out, as lists and as base64), the same walks
through /v1/generate with named inputs; bad inputs (an image of the wrong size, a state of the
wrong length, more cameras than the model takes, cameras of two sizes) are 4xx naming the field,
with no traceback in the server's log; fake components answer the route with their mock numbers."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.http.server import API_KEY, ROOT, Server, compile_plan

PIL = pytest.importorskip("PIL.Image")
SIZE, STATE, CHUNK, ACTIONS = 56, 8, 50, 7  # the tiny preset (models/pi05/frontend.py reads them)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    plan = compile_plan(tmp_path_factory.mktemp("pi05"), ROOT / "models" / "pi05.walk")
    s = Server(plan, "--api-key", API_KEY, ready_timeout=120)
    yield s
    s.stop()


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json={"model": "pi05", **body},
                      headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)


def pixels(side: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)


def png(side: int, seed: int) -> str:
    buf = io.BytesIO()
    PIL.fromarray(pixels(side, seed)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def body(**change: Any) -> dict[str, Any]:
    return {"images": [png(SIZE, 0), png(SIZE, 1)], "state": [0.1 * i for i in range(STATE)],
            "task": "pick up the red cube", "seed": 7, **change}


def test_the_policy_route_returns_one_action_chunk(server: Server) -> None:
    r = post(server, "/v1/policy/actions", body())
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "policy.actions" and out["actions"]["shape"] == [CHUNK, ACTIONS]
    actions = np.array(out["actions"]["data"], dtype=np.float32)
    assert actions.shape == (CHUNK, ACTIONS) and np.isfinite(actions).all() and actions.std() > 0
    again = post(server, "/v1/policy/actions", body(encoding="base64")).json()["actions"]
    raw = np.frombuffer(base64.b64decode(again["data"]), dtype=np.float32).reshape(again["shape"])
    assert np.array_equal(raw, actions)  # a fixed seed: the same chunk
    other = np.array(post(server, "/v1/policy/actions", body(task="open the drawer")).json()["actions"]["data"])
    assert not np.allclose(other, actions)  # the task reaches the prefix


def test_the_same_walks_answer_native_generate(server: Server) -> None:
    cams = np.stack([pixels(SIZE, 0), pixels(SIZE, 1)])
    inputs = {"images": {"dtype": "u8", "shape": list(cams.shape), "b64": base64.b64encode(cams.tobytes()).decode()},
              "prompt": "pick up the red cube", "state": {"dtype": "f32", "values": [0.1 * i for i in range(STATE)]}}
    r = post(server, "/v1/generate", {"params": {"seed": 7}, "inputs": inputs, "outputs": ["action"], "stream": False})
    assert r.status_code == 200, r.text
    (output,) = [e for e in r.json()["events"] if e["type"] == "output"]
    route = post(server, "/v1/policy/actions", body()).json()["actions"]["data"]
    assert output["modality"] == "action" and np.allclose(output["data"], route, atol=1e-6)


@pytest.mark.parametrize(("change", "status", "field"), [
    ({"images": [png(64, 0)]}, 400, "images.0"),  # not the model's 56 px
    ({"images": [png(SIZE, 0), png(SIZE - 14, 1)]}, 400, "images.1"),
    ({"images": [png(SIZE, i) for i in range(4)]}, 422, "images"),  # the model takes 3 cameras (documented)
    ({"images": []}, 422, "images"),
    ({"images": ["data:image/png;base64,AAAA"]}, 400, "images.0"),
    ({"images": [{"dtype": "f32", "shape": [SIZE, SIZE, 3], "values": np.zeros((SIZE, SIZE, 3)).tolist()}]},
     400, "images.0"),
    ({"state": [0.0] * 5}, 422, "state"),  # the model's 8 (documented)
    ({"timeout": 0.5}, 422, "timeout"),
    ({"state": [0.0] * 7 + ["x"]}, 422, "state.7"),
    ({"task": None}, 422, "task"),
    ({"seed": -2}, 422, "seed"),
    ({"encoding": "npy"}, 422, "encoding"),
    ({"model": "bagel"}, 404, "model"),
])
def test_bad_inputs_are_4xx_naming_the_field(server: Server, change: dict[str, Any], status: int, field: str) -> None:
    r = post(server, "/v1/policy/actions", body(**change))
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == field, r.text
    assert "Traceback" not in server.errors()


def test_fake_components_answer_the_route(tmp_path_factory: pytest.TempPathFactory) -> None:
    plan = compile_plan(tmp_path_factory.mktemp("pi05_fake"), ROOT / "models" / "pi05.walk")
    fake = Server(plan, "--fake", "--api-key", API_KEY)
    try:
        r = post(fake, "/v1/policy/actions", body(images=[png(64, 0)]))  # no hook with fakes: any square size
        assert r.status_code == 200, r.text
        assert "/v1/policy/actions" in httpx.get(f"{fake.url}/openapi.json").json()["paths"]
    finally:
        fake.stop()
    assert "Traceback" not in fake.errors()
