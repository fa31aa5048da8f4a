"""V-JEPA 2-AC served: models/vjepa2_ac.walk on placements/cpu.toml, `wgc run PLAN --serve` with the real
tiny components, driven with httpx: a rollout (frames and actions in, embeddings out, as lists and as
base64), a plan request (a goal image in, the trajectory and its cost out), the same walks through
/v1/generate; bad inputs (a frame of another size, an image under a patch, an action of 6 numbers,
a history of the wrong length, a horizon over the bound, topk over samples) are 4xx naming the field,
with no traceback in the server's log."""

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
TOKENS, DIM = 16, 96  # the tiny preset: a 4 x 4 patch grid, 96 wide


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    plan = compile_plan(tmp_path_factory.mktemp("vjepa2_ac"), ROOT / "models" / "vjepa2_ac.walk")
    s = Server(plan, "--api-key", API_KEY, ready_timeout=120)
    yield s
    s.stop()


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json={"model": "vjepa2_ac", **body},
                      headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)


def png(w: int, h: int, seed: int) -> str:
    pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    PIL.fromarray(pixels).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def rows(n: int, seed: int, scale: float = 0.05) -> list[list[float]]:
    return (np.random.default_rng(seed).standard_normal((n, 7)) * scale).round(4).tolist()


def rollout_body(frames: int = 2, horizon: int = 3) -> dict[str, Any]:
    return {"frames": [png(64, 64, i) for i in range(frames)], "history_actions": rows(frames - 1, 1),
            "history_states": rows(frames - 1, 2), "actions": rows(horizon, 3), "states": rows(horizon, 4)}


def test_a_rollout_returns_one_embedding_frame_per_step(server: Server) -> None:
    r = post(server, "/v1/world_model/rollout", rollout_body())
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "world_model.rollout" and out["horizon"] == 3
    emb = np.array(out["embeddings"]["data"], dtype=np.float32)
    assert out["embeddings"]["shape"] == [3, TOKENS, DIM] and emb.shape == (3, TOKENS, DIM)
    assert np.allclose(emb.mean(-1), 0, atol=1e-4) and np.allclose(emb.std(-1), 1, atol=1e-2)  # layer-normed
    b64 = post(server, "/v1/world_model/rollout", {**rollout_body(), "encoding": "base64"}).json()["embeddings"]
    raw = np.frombuffer(base64.b64decode(b64["data"]), dtype=np.float32).reshape(b64["shape"])
    assert np.allclose(raw, emb, atol=1e-6)  # the same request, the same frames


def test_a_plan_returns_the_trajectory_and_its_cost(server: Server) -> None:
    body = {"frames": [png(64, 64, 7)], "goal": png(80, 64, 8), "state": [0.1, 0, 0.2, 0, 0, 0, 0.5], "horizon": 2,
            "params": {"samples": 12, "topk": 4, "cem_steps": 3, "seed": 3}}
    r = post(server, "/v1/world_model/plan", body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "world_model.plan" and out["horizon"] == 2 and out["metric"] == "l1"
    actions = np.array(out["actions"])
    assert actions.shape == (2, 7) and np.abs(actions[:, :3]).max() <= 0.05 and not actions[:, 3:6].any()
    assert isinstance(out["cost"], float) and out["cost"] > 0
    assert post(server, "/v1/world_model/plan", body).json()["actions"] == out["actions"]  # a fixed seed


def native_rollout_inputs() -> dict[str, Any]:
    """A one-frame clip and two steps of actions and states as /v1/generate's tensors."""
    clip = np.random.default_rng(0).integers(0, 256, (1, 64, 64, 3), dtype=np.uint8)
    return {"clip": {"dtype": "u8", "shape": [1, 64, 64, 3], "b64": base64.b64encode(clip.tobytes()).decode()},
            "history_actions": {"dtype": "f32", "shape": [0, 7], "b64": ""},
            "history_states": {"dtype": "f32", "shape": [0, 7], "b64": ""},
            "actions": {"dtype": "f32", "values": rows(2, 5)}, "states": {"dtype": "f32", "values": rows(2, 6)}}


def test_the_same_walks_answer_native_generate(server: Server) -> None:
    r = post(server, "/v1/generate", {"task": "rollout", "params": {"horizon": 2}, "inputs": native_rollout_inputs(),
                                      "outputs": ["tensor"], "stream": False})
    assert r.status_code == 200, r.text
    (output,) = [e for e in r.json()["events"] if e["type"] == "output"]
    assert np.array(output["data"]).shape == (2, TOKENS, DIM)


@pytest.mark.parametrize(("name", "value", "found"), [
    ("actions", 5, "a number"), ("states", [[0.0] * 7, [0.0] * 7], "an array"), ("clip", "frames.mp4", "a string"),
    ("history_actions", {"shape": [0, 7], "b64": ""}, "an object without a dtype"), ("actions", None, "null"),
])
def test_native_tensor_inputs_that_are_not_tensors_are_400_naming_the_input(server: Server, name: str, value: Any,
                                                                            found: str) -> None:
    inputs = {**native_rollout_inputs(), name: value}
    r = post(server, "/v1/generate", {"task": "rollout", "params": {"horizon": 2}, "inputs": inputs,
                                      "stream": False})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == f"inputs.{name}" and error["message"].endswith(f"found {found}"), error
    assert "Traceback" not in server.errors()


@pytest.mark.parametrize(("path", "change", "field"), [
    ("rollout", {"frames": [png(64, 64, 0), png(48, 64, 1)]}, "frames.1"),
    ("rollout", {"frames": [png(8, 64, 0), png(8, 64, 1)]}, "frames.0"),
    ("rollout", {"actions": [[0.0] * 7, [0.0] * 6, [0.0] * 7]}, "actions.1"),
    ("rollout", {"states": rows(2, 0)}, "states"),
    ("rollout", {"history_actions": None}, "history_actions"),
    ("rollout", {"actions": rows(32, 0), "states": rows(32, 1)}, "actions"),  # 1 history frame + 32 > 32 blocks
    ("plan", {"horizon": 33}, "horizon"),
    ("plan", {"horizon": 31, "frames": [png(64, 64, i) for i in range(3)], "history_actions": rows(2, 0),
              "history_states": rows(2, 1)}, "horizon"),
    ("plan", {"state": [0.0] * 6}, "state"),
    ("plan", {"goal": png(10, 10, 0)}, "goal"),
    ("plan", {"params": {"samples": 4, "topk": 5}}, "params.topk"),
])
def test_bad_inputs_are_4xx_naming_the_field(server: Server, path: str, change: dict[str, Any], field: str) -> None:
    base = rollout_body() if path == "rollout" else {"frames": [png(64, 64, 0)], "goal": png(64, 64, 1),
                                                      "state": [0.0] * 7, "params": {"cem_steps": 1}}
    r = post(server, f"/v1/world_model/{path}", {**base, **change})
    assert 400 <= r.status_code < 500, r.text
    error = r.json()["error"]
    assert error["param"] == field, error
    assert "Traceback" not in server.errors()


def test_fake_components_answer_both_routes(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`--fake` answers with mock numbers of the declared types: the routes pass them on, never a 500."""
    plan = compile_plan(tmp_path_factory.mktemp("vjepa2_ac_fake"), ROOT / "models" / "vjepa2_ac.walk")
    fake = Server(plan, "--fake", "--api-key", API_KEY)
    try:
        assert post(fake, "/v1/world_model/rollout", rollout_body()).status_code == 200
        r = post(fake, "/v1/world_model/plan", {"frames": [png(64, 64, 0)], "goal": png(64, 64, 1), "state": [0.0] * 7})
        assert r.status_code == 200, r.text
        spec = httpx.get(f"{fake.url}/openapi.json").json()
        assert {"/v1/world_model/rollout", "/v1/world_model/plan"} <= set(spec["paths"])
    finally:
        fake.stop()
    assert "Traceback" not in fake.errors()


@pytest.mark.parametrize(("path", "change", "status", "field"), [
    ("rollout", {"frames": []}, 422, "frames"),
    ("rollout", {"frames": ["data:image/png;base64,AAAA"]}, 400, "frames.0"),
    ("rollout", {"frames": ["http://127.0.0.1/x.png"]}, 400, "frames.0"),
    ("rollout", {"frames": [{"dtype": "u8", "shape": [64, 64], "b64": base64.b64encode(bytes(4096)).decode()}],
                 "history_actions": [], "history_states": []}, 400, "frames.0"),
    ("rollout", {"frames": [png(64, 64, i) for i in range(9)], "history_actions": rows(8, 0),
                 "history_states": rows(8, 1)}, 400, "frames.8"),  # the ninth image: over max_images (8)
    ("rollout", {"actions": "abc"}, 422, "actions"),
    ("rollout", {"actions": []}, 422, "actions"),
    ("rollout", {"states": [[1, 2, 3, 4, 5, 6, "x"]] * 3}, 422, "states.0.6"),
    ("rollout", {"encoding": "npy"}, 422, "encoding"),
    ("plan", {"goal": None}, 422, "goal"),
    ("plan", {"params": {"metric": "l3"}}, 422, "params.metric"),
    ("plan", {"params": {"temperature": 1.0}}, 400, "params.temperature"),
    ("plan", {"horizon": True}, 422, "horizon"),
    ("plan", {"model": "bagel"}, 404, "model"),
])
def test_hostile_bodies_are_4xx_naming_the_field(server: Server, path: str, change: dict[str, Any], status: int,
                                                 field: str) -> None:
    base = rollout_body() if path == "rollout" else {"frames": [png(64, 64, 0)], "goal": png(64, 64, 1),
                                                      "state": [0.0] * 7, "params": {"cem_steps": 1}}
    r = post(server, f"/v1/world_model/{path}", {**base, **change})
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == field, r.text
    assert "Traceback" not in server.errors()
