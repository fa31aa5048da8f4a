"""Values of the native route, both ways: JSON in as walk inputs and parts, outputs out as JSON.

In: a tensor is `{"dtype": "f32", "shape": [2, 3], "b64": "<raw little-endian bytes>"}` or
`{"dtype": "f32", "values": [[...], [...]]}`; a `data:` URL is decoded for an image or audio part
or input (a WAV becomes {"samples", "rate"} at its own rate, which audio may also be given as, the
samples a tensor); text stays a string (a `tokens` input is tokenized); an input typed `tensor` or
`video` must be a tensor (a 400 naming it otherwise); any other JSON value passes as it is. Out: a
tensor becomes its nested values (`list`) or its raw bytes in base64 (`base64`), with its shape and
dtype beside it.
"""

from __future__ import annotations

import base64
from typing import Any

from wgc.runtime.http.admission.limits import MediaBudget
from wgc.runtime.http.media.decode import Encoded, MediaLimits, decode_base64, encoded, parse_data_url
from wgc.runtime.http.serving.errors import ApiError

DTYPES = {"f32": "float32", "float32": "float32", "f64": "float64", "float64": "float64", "f16": "float16",
          "float16": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16", "i64": "int64", "int64": "int64",
          "i32": "int32", "int32": "int32", "i16": "int16", "int16": "int16", "i8": "int8", "int8": "int8",
          "u8": "uint8", "uint8": "uint8", "bool": "bool"}
MEDIA = ("image", "audio")
TENSOR_KINDS = ("tensor", "video")  # walk input types that only a tensor can be (a clip is u8 [T, H, W, 3])
_JSON_KINDS = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
               dict: "an object without a dtype", type(None): "null"}
MAX_RATE = 768_000  # Hz, the highest sample rate an audio clip may state


def _tensor(obj: dict[str, Any], param: str, limits: MediaLimits) -> Any:
    import torch

    name = DTYPES.get(str(obj.get("dtype")))
    if name is None:
        raise ApiError("invalid_request", f"{param}: dtype must be one of {', '.join(sorted(set(DTYPES)))}", param)
    dtype = getattr(torch, name)
    if set(obj) == {"dtype", "values"}:
        try:
            return torch.tensor(obj["values"], dtype=dtype)
        except (TypeError, ValueError, RuntimeError, OverflowError) as err:
            raise ApiError("invalid_request", f"{param}: values do not form a {name} tensor ({err})", param) from None
    if set(obj) != {"dtype", "shape", "b64"}:
        raise ApiError("invalid_request", f"{param}: a tensor is {{dtype, shape, b64}} or {{dtype, values}}", param)
    shape = obj["shape"]
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**31
                                              for n in shape) or len(shape) > 8:
        raise ApiError("invalid_request", f"{param}: shape must be a list of at most 8 sizes", param)
    if not isinstance(obj["b64"], str):
        raise ApiError("invalid_request", f"{param}: b64 must be a base64 string", param)
    raw = decode_base64(obj["b64"], param, limits)
    count = 1
    for n in shape:
        count *= n
    if count * dtype.itemsize != len(raw):
        raise ApiError("invalid_request", f"{param}: {len(raw)} bytes do not hold {shape} of {name}", param)
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)


def value_in(value: Any, kind: str, param: str, budget: MediaBudget) -> Any:
    """A JSON value as the walk receives it, for an input or part of `kind` (its base type). A medium
    comes back admitted but not decoded (an Encoded: `decoded` turns it into a tensor), so that all a
    request's media are measured before any is decoded."""
    if isinstance(value, dict) and "dtype" in value:
        return _tensor(value, param, budget.limits.media)
    if kind == "audio" and isinstance(value, dict) and set(value) == {"samples", "rate"}:
        return _clip(value, param, budget)
    if kind in MEDIA and isinstance(value, str):
        mime, data = parse_data_url(value, param, budget.limits.media)
        return budget.admit(encoded(kind, mime, data, param))
    if kind == "text" and not isinstance(value, str):
        raise ApiError("invalid_request", f"{param}: a text part's data must be a string", param)
    if kind in MEDIA and not isinstance(value, str):
        extra = " or {samples, rate}" if kind == "audio" else ""
        raise ApiError("invalid_request", f"{param}: {kind} data is a data: URL or a tensor{extra}", param)
    if kind in TENSOR_KINDS:  # a JSON number, list or string would reach a component that wants a tensor
        raise ApiError("invalid_request", f"{param}: a {kind} input is a tensor, {{dtype, shape, b64}} or "
                       f"{{dtype, values}}; found {_json_kind(value)}", param)
    if kind == "tokens" and not (isinstance(value, list) and all(type(i) is int for i in value)):
        raise ApiError("invalid_request", f"{param}: tokens are a string or a list of token ids", param)
    return value


def _json_kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _clip(value: dict[str, Any], param: str, budget: MediaBudget) -> dict[str, Any]:
    """Audio as {"samples": a tensor, "rate": Hz}, the form a decoded WAV takes (media.audio_clip)."""
    rate = value["rate"]
    if type(rate) is not int or not 0 < rate <= MAX_RATE:
        raise ApiError("invalid_request", f"{param}.rate: a sample rate is a whole number of Hz in 1..{MAX_RATE}",
                       f"{param}.rate")
    if not isinstance(value["samples"], dict) or "dtype" not in value["samples"]:
        raise ApiError("invalid_request", f"{param}.samples: a tensor {{dtype, shape, b64}} or {{dtype, values}}",
                       f"{param}.samples")
    return {"samples": _tensor(value["samples"], f"{param}.samples", budget.limits.media), "rate": rate}


def decoded(value: Any, budget: MediaBudget) -> Any:
    return budget.decode(value) if isinstance(value, Encoded) else value


def value_out(payload: Any, encoding: str) -> dict[str, Any]:
    """`data` (and `encoding`) of an output."""
    if hasattr(payload, "detach"):
        t = payload.detach().to("cpu").contiguous()
        if encoding == "base64":
            import torch

            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            return {"data": base64.b64encode(raw).decode(), "encoding": "base64"}
        return {"data": t.float().tolist() if t.dtype.is_floating_point and t.itemsize < 4 else t.tolist(),
                "encoding": "list"}
    return {"data": payload, "encoding": "json"}
