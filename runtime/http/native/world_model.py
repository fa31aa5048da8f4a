"""POST /v1/world_model/rollout and /v1/world_model/plan: a world model's routes, shaped as a robot
client uses one (V-JEPA 2-AC: models/vjepa2_ac.walk, docs/http.md *World model*).

rollout: the context clip's `frames` (images, oldest first, one size), the `history_actions` and
`history_states` that led from each frame to the next (one row fewer than frames), then one
`actions` and `states` row per step to predict; the answer is the predicted embeddings
[horizon, tokens, dim] (nested lists, or raw float32 bytes in base64 with `encoding: base64`).
plan: the same context, the robot's current `state` and a `goal` image; the planner's params
(samples, topk, cem_steps, metric, seed, ...) in `params`; the answer is the planned `actions`
[horizon][7] and their `cost` against the goal.

Everything a client can get wrong is refused before any work, 400 naming the field: a frame of
another size than the clip's first, an image under 16 px, an action or state that is not 7
numbers, a history of the wrong length, a horizon whose frame blocks (history + horizon) are over
the plan's `horizon` bound. A plan serves these routes when it has `rollout` and `plan` walks, takes
a video and emits tensors (serving/capabilities.py); the same walks answer /v1/generate.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictFloat, StrictInt, create_model
from starlette.requests import Request
from starlette.responses import Response
from wgc.runtime.api import OutputEvent
from wgc.runtime.http.admission.lease import Lease
from wgc.runtime.http.admission.limits import MediaBudget
from wgc.runtime.http.native.values import decoded, value_in, value_out
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.serving.plan_schemas import json_int
from wgc.runtime.http.serving.schemas import IMAGE_URL, Strict
from wgc.runtime.http.serving.service import Service
from wgc.runtime.http.serving.streaming import guarded, json_response

ACTION_DIM = 7  # dx, dy, dz, droll, dpitch, dyaw, gripper (a state: the pose x, y, z, roll, pitch, yaw, gripper)
MIN_SIDE = 16  # px: one patch
Number = StrictFloat | StrictInt
Vectors = Annotated[list[list[Number]], Field(description=f"rows of {ACTION_DIM} numbers")]
ImageUrl = Annotated[str, Field(json_schema_extra=IMAGE_URL)]
Image = Annotated[ImageUrl | dict[str, Any], Field(description="an image data: URL, or a uint8 tensor [H, W, 3]")]


def request_models(service: Service) -> tuple[type[BaseModel], type[BaseModel]]:
    """The two request models: the plan's params namespace, `horizon` with the plan's bounds."""
    name = "".join(part.capitalize() for part in service.plan.model.split("_"))
    horizon = service.caps.param("horizon")
    bounds = {k: v for k, v in (("ge", horizon.low if horizon else 1), ("le", horizon.high if horizon else None))
              if v is not None}
    common: dict[str, Any] = {
        "model": (str, Field(..., examples=[service.plan.model])),
        "frames": (list[Image], Field(..., min_length=1, description="the context clip, oldest frame first")),
        "history_actions": (Vectors | None, Field(None, description="the action after each frame but the last")),
        "history_states": (Vectors | None, Field(None, description="the state at each frame but the last")),
        "params": (service.models.params | None, Field(None, description="the plan's params")),
        "timeout": (Annotated[StrictFloat | StrictInt, Field(ge=1)] | None, None),
    }
    rollout = create_model(f"{name}RolloutRequest", __base__=Strict, **common,
                           actions=(Vectors, Field(..., min_length=1, description="one action per step")),
                           states=(Vectors, Field(..., min_length=1, description="one state per step")),
                           encoding=(Literal["list", "base64"], "list"))
    plan = create_model(f"{name}PlanRequest", __base__=Strict, **common,
                        goal=(Image, Field(..., description="the goal image")),
                        state=(list[Number], Field(..., description="the robot's current state (7 numbers)")),
                        horizon=(json_int(**bounds) | None, Field(None, description="steps to plan")))
    return rollout, plan


def _rows(rows: list[list[Any]] | None, count: int, field: str) -> list[list[float]]:
    rows = rows or []
    if len(rows) != count:
        raise ApiError("invalid_request", f"{field}: {len(rows)} rows, expected {count}", field)
    for i, row in enumerate(rows):
        if len(row) != ACTION_DIM:
            raise ApiError("invalid_request", f"{field}.{i}: {len(row)} numbers; each row is {ACTION_DIM} "
                           "(dx, dy, dz, droll, dpitch, dyaw, gripper)", f"{field}.{i}")
    return [[float(x) for x in row] for row in rows]


def _tensor(rows: list[list[float]]) -> Any:
    import torch

    return torch.tensor(rows, dtype=torch.float32).reshape(len(rows), ACTION_DIM)


def _image(value: Any, field: str, budget: MediaBudget) -> Any:
    img = decoded(value_in(value, "image", field, budget), budget)
    if not hasattr(img, "shape") or img.dim() != 3 or img.shape[-1] != 3:
        raise ApiError("invalid_request", f"{field}: an image is [H, W, 3]", field)
    if min(img.shape[0], img.shape[1]) < MIN_SIDE:
        raise ApiError("invalid_request", f"{field}: {img.shape[1]}x{img.shape[0]} px is under {MIN_SIDE} px "
                       "on a side", field)
    return img


def _clip(frames: list[Any], budget: MediaBudget) -> Any:
    import torch

    images = [_image(v, f"frames.{i}", budget) for i, v in enumerate(frames)]
    first = images[0].shape
    for i, img in enumerate(images[1:], 1):
        if img.shape != first:
            raise ApiError("invalid_request", f"frames.{i}: {img.shape[1]}x{img.shape[0]} px, but frames.0 is "
                           f"{first[1]}x{first[0]}: a clip's frames share one size", f"frames.{i}")
    return torch.stack(images)  # [F, H, W, 3] u8


def _blocks(service: Service, frames: int, horizon: int, field: str) -> None:
    """History frames plus the horizon within the plan's horizon bound (the frame blocks it covers)."""
    p = service.caps.param("horizon")
    bound = p.high if p is not None and p.high is not None else None
    if bound is not None and frames - 1 + horizon > bound:
        raise ApiError("invalid_request", f"{field}: {frames - 1} history frames and a horizon of {horizon} are "
                       f"{frames - 1 + horizon} frame blocks, over the model's bound of {bound} (param horizon)", field)


def _context(service: Service, body: Any) -> dict[str, Any]:
    """The clip and its history as walk inputs (off the event loop: images are decoded here)."""
    budget = MediaBudget(service.limits)
    history = len(body.frames) - 1
    return {"clip": _clip(body.frames, budget),
            "history_actions": _tensor(_rows(body.history_actions, history, "history_actions")),
            "history_states": _tensor(_rows(body.history_states, history, "history_states"))}


def _rollout_request(service: Service, body: Any) -> dict[str, Any]:
    horizon = len(body.actions)
    _blocks(service, len(body.frames), horizon, "actions")
    actions, states = _rows(body.actions, horizon, "actions"), _rows(body.states, horizon, "states")
    given = body.params.model_dump(exclude_none=True) if body.params is not None else {}
    params = service.params({**given, "horizon": horizon})
    inputs = {**_context(service, body), "actions": _tensor(actions), "states": _tensor(states)}
    return {"params": params, "task": "rollout", "inputs": inputs, "outputs": ["tensor"]}


def _plan_request(service: Service, body: Any) -> dict[str, Any]:
    given = body.params.model_dump(exclude_none=True) if body.params is not None else {}
    if body.horizon is not None:
        given["horizon"] = body.horizon
    params = service.params(given)
    if "horizon" in params:
        _blocks(service, len(body.frames), int(params["horizon"]), "horizon")
    if "topk" in params and "samples" in params and params["topk"] > params["samples"]:
        raise ApiError("invalid_request", f"params.topk: {params['topk']} is more than the {params['samples']} "
                       "samples it keeps the best of", "params.topk")
    if len(body.state) != ACTION_DIM:
        raise ApiError("invalid_request", f"state: {len(body.state)} numbers; a state is {ACTION_DIM} (x, y, z, "
                       "roll, pitch, yaw, gripper)", "state")
    budget = MediaBudget(service.limits)
    inputs = {**_context(service, body), "state": _tensor([[float(x) for x in body.state]])[0],
              "goal": _image(body.goal, "goal", budget)}
    return {"params": params, "task": "plan", "inputs": inputs, "outputs": ["tensor"]}


async def _outputs(service: Service, request: Request, body: Any, fields: dict[str, Any]) -> list[Any]:
    deadline = service.deadline(body.timeout)

    async def run() -> list[Any]:
        lease = Lease(service)
        try:
            (running,) = await lease.open(1, deadline, [fields])
            return [e.payload async for e in running.events() if isinstance(e, OutputEvent) and e.modality == "tensor"]
        finally:
            lease.release()

    return await guarded(request, run())


async def rollout(service: Service, request: Request, body: Any) -> Response:
    service.check("world_model", body.model)
    fields = await service.offload.run(_rollout_request, service, body)
    out = await _outputs(service, request, body, fields)
    import torch

    frames = out[0] if out else []  # the accumulated frames: one [tokens, dim] a step
    embeddings = torch.stack([torch.as_tensor(f).float() for f in frames]) if isinstance(frames, list) and frames \
        else torch.as_tensor(frames).float()
    return json_response({"object": "world_model.rollout", "model": service.plan.model,
                          "horizon": int(fields["params"]["horizon"]),
                          "embeddings": {"shape": list(embeddings.shape), "dtype": "float32",
                                         **value_out(embeddings, body.encoding)}})


async def plan(service: Service, request: Request, body: Any) -> Response:
    service.check("world_model", body.model)
    fields = await service.offload.run(_plan_request, service, body)
    out = await _outputs(service, request, body, fields)
    import torch

    # the walk emits [1, horizon, 7] and [1]; other shapes (fake components' mock numbers) pass as they are
    actions = torch.as_tensor(out[0]).float() if out else torch.zeros(0, ACTION_DIM)
    actions = actions[0] if actions.dim() == 3 else actions
    costs = torch.as_tensor(out[1]).float().reshape(-1) if len(out) > 1 else torch.zeros(0)
    return json_response({"object": "world_model.plan", "model": service.plan.model,
                          "horizon": int(actions.shape[0]) if actions.dim() else 1,
                          "metric": fields["params"].get("metric"), "actions": actions.tolist(),
                          "cost": float(costs[0]) if costs.numel() else None})
