"""POST /v1/images/generations and /v1/images/edits: PNG images as base64 (`b64_json`).

`size` "WxH" sets the plan's `width` and `height` params; a size outside their bounds, not a
multiple of the image emitter's `const size_multiple` (BAGEL: 16), or any size but "auto" on a plan
without them, is refused (400 `unsupported_value`), never silently changed. Each of the n images is
one runtime request (with a `seed` param, image i uses seed + i; a negative seed, BAGEL's default,
lets each request derive its own). Edits take the image(s) as multipart files, as the OpenAI API
does, and put them before the prompt (BAGEL's order: the image, then the instruction about it); a
component's `const edit_NAME` is the default of param NAME in an edit (BAGEL's editing guidance),
which the request's own params override.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from wgc.runtime.api import OutputEvent
from wgc.runtime.http.admission.lease import Lease
from wgc.runtime.http.admission.limits import Limits, MediaBudget, check_chars, check_count
from wgc.runtime.http.media.decode import Encoded
from wgc.runtime.http.media.png import encode_png, to_pixels
from wgc.runtime.http.openai.chat_input import choice_seeds
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.serving.service import Service
from wgc.runtime.http.serving.streaming import guarded, json_response, merged
from wgc.runtime.http.serving.validation import validation_error
from wgc.runtime.http.text.prompt import Piece, count_prompt, to_request
from wgc.runtime.http.text.template import check_text

EDIT_FIELDS = ("model", "prompt", "n", "size", "response_format", "output_format", "user", "seed", "timeout")
NUMERIC = ("n", "seed", "timeout")


def image_size(service: Service, size: str | None) -> dict[str, int]:
    """The width and height params for `size` ("auto" or None: the plan's defaults)."""
    w, h = service.caps.param("width"), service.caps.param("height")
    if size in (None, "auto"):
        return {}
    if w is None or h is None:
        raise ApiError("unsupported_value", f"model `{service.plan.model}` has no width and height params: "
                       "size must be auto", "size")
    width, height = (int(x) for x in size.split("x"))
    step = size_multiple(service)
    for p, v in ((w, width), (h, height)):
        if (p.low is not None and v < p.low) or (p.high is not None and v > p.high):
            raise ApiError("unsupported_value", f"size {size}: {p.name} must be in {p.low}..{p.high}", "size")
        if v % step:
            raise ApiError("unsupported_value", f"size {size}: {p.name} must be a multiple of {step}", "size")
    return {w.name: width, h.name: height}


def size_multiple(service: Service) -> int:
    """The image emitter's `const size_multiple`, else 1."""
    for spec in service.caps.emitters.get("image", ()):
        value = spec.consts.get("size_multiple")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 1


def edit_defaults(service: Service) -> dict[str, Any]:
    """Param defaults for an edit: each component's `const edit_NAME`, for a param NAME of the plan."""
    return {name[5:]: value for spec in service.plan.components for name, value in spec.consts.items()
            if name.startswith("edit_") and name[5:] in service.caps.params}


def choices(service: Service, params: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Each image's params: seed + i (chat_input.choice_seeds), or, for a negative seed (BAGEL's
    "derive one"), the same params n times: each request then derives its own."""
    if isinstance(params.get("seed"), int) and params["seed"] < 0:
        return [dict(params) for _ in range(n)]
    return [service.params(p) for p in choice_seeds(service.caps, params, n)]


async def generations(service: Service, request: Request, body: Any, images: list[Any] | None = None) -> Response:
    route = "edits" if images is not None else "images"
    service.check(route, body.model)
    given = edit_defaults(service) if images is not None else {}
    given.update(body.params.model_dump(exclude_none=True) if body.params is not None else {})
    given.update(image_size(service, body.size))
    if getattr(body, "seed", None) is not None:
        given["seed"] = body.seed
    params = service.params(given)
    check_chars(len(body.prompt), service.max_prompt_chars, "prompt")
    service.check_n(body.n)
    per_choice = choices(service, params, body.n)
    pieces = [*(Piece("image", i) for i in images or []), Piece("text", check_text(body.prompt, "prompt"))]
    deadline = service.deadline(body.timeout)
    fields = await service.offload.run(_prepare, service, pieces)
    size = (int(params.get("width", 256)), int(params.get("height", 256)))

    async def whole() -> Response:
        out: list[list[bytes]] = [[] for _ in per_choice]
        shapes: list[tuple[int, int]] = []
        lease = Lease(service)
        try:
            runnings = await lease.open(body.n, deadline, [{"params": p, **fields} for p in per_choice])
            async for i, event in merged(runnings):
                if isinstance(event, OutputEvent) and event.modality == "image":
                    png, shape = await service.offload.run(_png, event.payload, size)
                    out[i].append(png)
                    shapes.append(shape)
        finally:
            lease.release()
        data = [{"b64_json": base64.b64encode(png).decode(), "revised_prompt": None} for pngs in out for png in pngs]
        return json_response({"created": int(time.time()), "data": data, "output_format": "png",
                              "size": "{}x{}".format(*(shapes[0] if shapes else size))})

    return await guarded(request, whole())


def _prepare(service: Service, pieces: list[Piece]) -> dict[str, Any]:
    """The blocking part (off the event loop): the prompt's token count and its check, tokenised inputs."""
    count_prompt(service.tokenizer, service.context, [p.payload for p in pieces if p.kind == "text"], {}, False,
                 "prompt")
    return {**to_request(service.caps, service.tokenizer, pieces, "prompt"), "outputs": ["image"]}


def _png(payload: Any, size: tuple[int, int]) -> tuple[bytes, tuple[int, int]]:
    """The PNG and its (width, height)."""
    try:
        pixels = to_pixels(payload, size)
        return encode_png(pixels), (pixels.shape[1], pixels.shape[0])
    except ValueError as err:
        raise ApiError("internal_error", f"the model's image output cannot be encoded: {err}") from None


async def edits(service: Service, request: Request) -> Response:
    """The multipart form read by hand: files bounded in size, fields validated by the images model."""
    why = service.caps.unsupported("edits")
    if why is not None:
        raise ApiError("route_not_supported", why)
    limits = service.limits
    try:
        form = await request.form(max_files=limits.max_images + 1, max_fields=64)  # one more, to name the limit
    except (ValueError, KeyError, AssertionError) as err:  # python-multipart's parse errors
        raise ApiError("invalid_json", f"the body is not a valid multipart form: {err}") from None
    files = [f for key in ("image", "image[]") for f in form.getlist(key) if isinstance(f, UploadFile)]
    if not files:
        raise ApiError("invalid_request", "an edit needs at least one `image` file", "image")
    check_count(len(files), limits.max_images, "max_images", "images", "image")
    fields: dict[str, Any] = {}
    params: dict[str, Any] = {}
    for key, value in form.multi_items():
        if key in ("image", "image[]"):
            continue
        if not isinstance(value, str):
            raise ApiError("unsupported_parameter", f"`{key}` must be a plain field, not a file", key)
        name = key[7:-1] if key.startswith("params[") and key.endswith("]") else None
        if name is not None and name in service.caps.params:
            params[name] = _typed(service.caps.params[name].type, value)
        elif key in EDIT_FIELDS:
            fields[key] = _typed("float" if key == "timeout" else "int", value) if key in NUMERIC else value
        else:
            raise ApiError("unsupported_parameter", f"`{key}` is not supported here (fields: image, "
                           f"{', '.join(EDIT_FIELDS)}, params[NAME] for the plan's params)", key)
    if params:
        fields["params"] = params
    try:
        body = service.models.images.model_validate(fields)
    except ValidationError as err:
        raise validation_error(service.plan, err.errors()) from None
    uploads = []
    for i, f in enumerate(files):
        data = await f.read(limits.max_media_bytes + 1)
        if len(data) > limits.max_media_bytes:
            raise ApiError("media_too_large", f"image[{i}]: more than {limits.max_media_bytes:,} bytes (the server's "
                           "limit `max_media_bytes`)", "image")
        uploads.append(Encoded("image", f.content_type or "", data, f"image[{i}]"))
    return await generations(service, request, body, await service.offload.run(_decoded, limits, uploads))


def _decoded(limits: Limits, uploads: list[Encoded]) -> list[Any]:
    """The uploaded images, admitted together from their headers, then decoded."""
    budget = MediaBudget(limits)
    admitted = [budget.admit(u) for u in uploads]
    return [budget.decode(e) for e in admitted]


def _typed(kind: str, text: str) -> Any:
    """A form field's text as the JSON value the schema describes (a bad one stays a string, and the
    model's validation names it)."""
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        return text
    if kind == "bool" and text in ("true", "false"):
        return text == "true"
    return text
