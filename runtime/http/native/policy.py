"""POST /v1/policy/actions: a robot policy's route, shaped as a control loop calls one (π0.5:
models/pi05.walk, docs/http.md *Policy*): the cameras' images, the robot's state and the task in;
one action chunk [chunk, D] out, as nested lists or raw float32 bytes in base64.

Robot clients call it at control rates, so it adds little to the walk: images are decoded off the
event loop, the request goes straight to the runtime (no tokenizer, no template on the way) and the
answer is one JSON object. What a client can get wrong is refused before any work, 400 naming the
field: an image that is not the model's square size (resizing with padding is the client's),
cameras of two sizes, a state entry that is not finite; the document itself states the camera count
and the state's length (422 outside them). The sizes come
from the action emitter's module hook `policy_shape(spec)` (models/pi05/frontend.py: the weights
the workers load); with fake components, or a module without the hook, only the shapes are checked.

A plan serves the route when it emits actions and its start walks take `images`, `prompt` and
`state` (serving/capabilities.py); the same walks answer /v1/generate with those named inputs.
"""

from __future__ import annotations

import math
import weakref
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictFloat, StrictInt, WithJsonSchema, create_model
from starlette.requests import Request
from starlette.responses import Response
from wgc.runtime.api import OutputEvent
from wgc.runtime.http.admission.lease import Lease
from wgc.runtime.http.admission.limits import MediaBudget
from wgc.runtime.http.native.values import decoded, value_in, value_out
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.serving.hooks import component_hook
from wgc.runtime.http.serving.plan_schemas import json_int
from wgc.runtime.http.serving.schemas import IMAGE_URL, Strict
from wgc.runtime.http.serving.service import Service
from wgc.runtime.http.serving.streaming import guarded, json_response

INPUTS = ("images", "prompt", "state")  # the start walk's named inputs the route fills
Number = StrictFloat | StrictInt
# documented as a data: URL (what the document can state); a uint8 tensor [H, W, 3] passes too
Image = Annotated[str | dict[str, Any], WithJsonSchema({"type": "string", **IMAGE_URL}),
                  Field(description="an image data: URL (or a uint8 tensor {dtype, shape, b64} [H, W, 3])")]
_shapes: weakref.WeakKeyDictionary[Service, dict[str, Any]] = weakref.WeakKeyDictionary()


def request_model(service: Service) -> type[BaseModel]:
    """The request model; the camera count and the state's length from the hook when known, so that
    the document states them (an image's size it cannot: that stays the route's 400)."""
    name = "".join(part.capitalize() for part in service.plan.model.split("_"))
    seed = service.caps.param("seed")
    bounds = {k: v for k, v in (("ge", seed.low if seed else None), ("le", seed.high if seed else None))
              if v is not None}
    known = shape(service)
    state_len = {"min_length": known["state_dim"], "max_length": known["state_dim"]} if "state_dim" in known else {}
    cameras = {"max_length": known["cameras"]} if "cameras" in known else {}
    return create_model(
        f"{name}PolicyRequest", __base__=Strict,
        model=(str, Field(..., examples=[service.plan.model])),
        images=(list[Image], Field(..., min_length=1, **cameras,
                                   description="one image per camera, in the model's camera order")),
        state=(list[Number], Field(..., **state_len, description="the robot's state, raw (the model normalises it)")),
        task=(str, Field(..., description="the task, in words")),
        seed=(json_int(**bounds) | None, Field(None, description="the starting noise's seed (-1: from the request)")),
        encoding=(Literal["list", "base64"], "list"),
        timeout=(StrictFloat | None, Field(None, ge=1, description="seconds (at least 1); at most the server's own")),
    )


def shape(service: Service) -> dict[str, Any]:
    """{image_size, cameras, state_dim, chunk, action_dim} from the emitter's hook; {} when unknown."""
    known = _shapes.get(service)
    if known is None:
        known = {}
        for spec in service.caps.emitters.get("action", ()):
            hook = component_hook(spec, "policy_shape", service.options.fake)
            if hook is not None:
                known = dict(hook(spec))
                break
        _shapes[service] = known
    return known


def _image(value: Any, field: str, size: int | None, budget: MediaBudget) -> Any:
    img = decoded(value_in(value, "image", field, budget), budget)
    if not hasattr(img, "shape") or img.dim() != 3 or img.shape[-1] != 3:
        raise ApiError("invalid_request", f"{field}: an image is [H, W, 3]", field)
    if str(img.dtype) != "torch.uint8":
        raise ApiError("invalid_request", f"{field}: an image tensor is uint8 (0..255), found {img.dtype}", field)
    if size is not None and (img.shape[0], img.shape[1]) != (size, size):
        raise ApiError("invalid_request", f"{field}: {img.shape[1]}x{img.shape[0]} px, but the model takes "
                       f"{size}x{size} (resize with padding first)", field)
    return img


def _request(service: Service, body: Any) -> dict[str, Any]:
    """The walk's request (off the event loop: images are decoded here)."""
    import torch

    known = shape(service)
    cameras = known.get("cameras")
    if cameras is not None and len(body.images) > cameras:
        raise ApiError("invalid_request", f"images: {len(body.images)} cameras, more than the model's {cameras}",
                       "images")
    budget = MediaBudget(service.limits)
    images = [_image(v, f"images.{i}", known.get("image_size"), budget) for i, v in enumerate(body.images)]
    first = images[0].shape
    for i, img in enumerate(images[1:], 1):
        if img.shape != first:
            raise ApiError("invalid_request", f"images.{i}: {img.shape[1]}x{img.shape[0]} px, but images.0 is "
                           f"{first[1]}x{first[0]}: the cameras share one size", f"images.{i}")
    want = known.get("state_dim")
    if want is not None and len(body.state) != want:
        raise ApiError("invalid_request", f"state: {len(body.state)} numbers, but the model's state is {want}",
                       "state")
    for i, x in enumerate(body.state):
        if not math.isfinite(x):
            raise ApiError("invalid_request", f"state.{i}: {x} is not a finite number", f"state.{i}")
    params = service.params({} if body.seed is None else {"seed": body.seed})
    inputs = {"images": torch.stack(images), "prompt": body.task,
              "state": torch.tensor([float(x) for x in body.state], dtype=torch.float32)}
    return {"params": params, "inputs": inputs, "outputs": ["action"]}


async def actions(service: Service, request: Request, body: Any) -> Response:
    service.check("policy", body.model)
    fields = await service.offload.run(_request, service, body)
    deadline = service.deadline(body.timeout)

    async def run() -> list[Any]:
        lease = Lease(service)
        try:
            (running,) = await lease.open(1, deadline, [fields])
            return [e.payload async for e in running.events() if isinstance(e, OutputEvent) and e.modality == "action"]
        finally:
            lease.release()

    out = await guarded(request, run())
    import torch

    chunk = torch.as_tensor(out[0]).float() if out else torch.zeros(0)  # [chunk, D]; a fake's mock passes as it is
    return json_response({"object": "policy.actions", "model": service.plan.model,
                          "actions": {"shape": list(chunk.shape), "dtype": "float32", **value_out(chunk, body.encoding)}})
