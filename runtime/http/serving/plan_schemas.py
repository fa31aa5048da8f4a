"""Request models derived from the plan: a field exists when the plan has a use for it.

`temperature` exists on a chat request only when the plan declares a `temperature` param, with
the param's bounds; `voice` lists the plan's voices; `params` (the extension namespace for every
model-specific knob) is typed param by param, with defaults, bounds and choices. A field the plan
has no use for is then an unknown field, answered 400 `unsupported_parameter` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
)
from wgc.runtime.coordinator.request import Accepts
from wgc.runtime.http.admission.limits import Limits
from wgc.runtime.http.serving.capabilities import Capabilities
from wgc.runtime.http.serving.schemas import (
    AUDIO_URL,
    IMAGE_URL,
    AudioPart,
    AudioUrlPart,
    ImagePart,
    Lenient,
    StreamOptions,
    Strict,
    TextPart,
)

from wgc.plan.model import ParamSpec, Plan

# OpenAI field -> the plan params it maps to, first match wins
CHAT_FIELDS = {"temperature": ("temperature",), "top_p": ("top_p",), "seed": ("seed",),
               "frequency_penalty": ("frequency_penalty",), "presence_penalty": ("presence_penalty",)}
TOKEN_LIMITS = ("max_tokens", "max_completion_tokens")
VOICE_PARAMS = ("voice", "speaker")
SIZE_PATTERN = r"^(auto|[1-9][0-9]{0,4}x[1-9][0-9]{0,4})$"  # a plan whose sizes are too many to list
_LISTED_SIZES = 1024  # at most this many values of a dimension are spelled out in `size`'s pattern


def _integral(value: Any) -> Any:
    """JSON Schema's integer includes 3.0; a string or a bool stays what it is (and fails)."""
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**63 else value


def json_int(**bounds: Any) -> Any:
    """An integer with bounds (the bounds before the validator, so they reach the JSON schema)."""
    return Annotated[StrictInt, Field(**bounds), BeforeValidator(_integral)]
TimeoutField = Annotated[StrictFloat | None, Field(None, ge=1, description="seconds (at least 1); at most the server's "
                                                                        "own timeout")]


@dataclass(frozen=True)
class PlanModels:
    params: type[BaseModel]
    chat: type[BaseModel]
    chat_audio: type[BaseModel]
    speech: type[BaseModel]
    images: type[BaseModel]
    generate: type[BaseModel]


def _literal(values: list[Any]) -> Any:
    return Literal[tuple(values)]  # type: ignore[valid-type]


def param_type(p: ParamSpec) -> Any:
    """The JSON type of a param value, with the plan's bounds and choices."""
    if p.choices is not None:
        return _literal(list(p.choices))
    bounds = {k: v for k, v in (("ge", p.low), ("le", p.high)) if v is not None}
    if p.type == "int":
        return json_int(**bounds)
    if p.type == "float":
        return Annotated[StrictFloat, Field(**bounds)]
    if p.type == "bool":
        return StrictBool
    return StrictStr


def optional_field(p: ParamSpec, ge: float | None = None, le: float | None = None) -> tuple[Any, Any]:
    """An optional field for the param `p`; OpenAI's own bounds narrowed by the plan's."""
    lo = max(x for x in (ge, p.low) if x is not None) if ge is not None or p.low is not None else None
    hi = min(x for x in (le, p.high) if x is not None) if le is not None or p.high is not None else None
    bounds = {k: v for k, v in (("ge", lo), ("le", hi)) if v is not None}
    base = json_int(**bounds) if p.type == "int" else Annotated[StrictFloat, Field(**bounds)]
    return base | None, Field(None, description=f"the plan's param `{p.name}`")


def _message(name: str, caps: Capabilities) -> type[BaseModel]:
    """A chat message whose content parts are the kinds this plan takes."""
    kinds: list[type] = [TextPart]
    if caps.slot.takes("image"):
        kinds.append(ImagePart)
    if caps.slot.takes("audio"):
        kinds += [AudioPart, AudioUrlPart]
    part = Annotated[Union[tuple(kinds)], Field(discriminator="type")] if len(kinds) > 1 else TextPart  # noqa: UP007
    return create_model(f"{name}Message", __base__=Lenient,
                        role=(Literal["system", "developer", "user", "assistant", "tool"], ...),
                        content=(str | list[part] | None, None), name=(str | None, None))


def bounded_n(max_choices: int) -> Any:
    """`n`: its bound is a server limit, documented here and enforced by the route (400 naming it)."""
    return Annotated[StrictInt, Field(ge=1, json_schema_extra={"maximum": max_choices}), BeforeValidator(_integral)]


def stop_field(limits: Limits) -> Any:
    """`stop`: a string or a list of them; their count and length are server limits, documented here and
    enforced by the route (400 naming the limit), not by validation."""
    one = Annotated[str, Field(json_schema_extra={"maxLength": limits.max_stop_chars})]
    return one | Annotated[list[one], Field(json_schema_extra={"maxItems": limits.max_stop})] | None  # type: ignore[valid-type]


def build(caps: Capabilities, max_choices: int, limits: Limits | None = None, plan: Plan | None = None,
          voices: tuple[str, ...] | None = None) -> PlanModels:
    """The request models; with the plan, /v1/generate's also names the outputs, part kinds and named
    inputs it takes (the runtime's own rules, coordinator/request.py). `voices` (outputs.voices): the
    voices a request may name, documented; the routes refuse any other with a 400 listing them."""
    limits = limits or Limits()
    name = "".join(part.capitalize() for part in caps.model.split("_"))
    fields = {p.name: (param_type(p) | None, Field(None, description=_describe(p))) for p in caps.params.values()}
    params = create_model(f"{name}Params", __base__=Strict, **fields)  # type: ignore[call-overload]
    voice = caps.param(*VOICE_PARAMS)
    voice_type = Annotated[StrictStr, _documented({"enum": list(voices)})] if voice and voices is not None else \
        StrictStr if voice else Literal["default"]
    chat_audio = create_model(f"{name}ChatAudio", __base__=Strict, voice=(voice_type, ...),
                              format=(Literal["wav", "pcm16"], "wav"))
    common: dict[str, Any] = {
        "model": (str, Field(..., examples=[caps.model], description=f"`{caps.model}`, the model served here")),
        "params": (params | None, Field(None, description="model-specific params (the extension namespace)")),
        "timeout": (TimeoutField, None),
    }
    return PlanModels(
        params=params,
        chat=create_model(f"{name}ChatRequest", __base__=Strict,
                          **_chat(name, caps, max_choices, chat_audio, limits), **common),
        chat_audio=chat_audio,
        speech=create_model(f"{name}SpeechRequest", __base__=Strict, **_speech(caps, voice_type), **common),
        images=create_model(f"{name}ImageRequest", __base__=Strict, **_images(caps, max_choices), **common),
        generate=_generate(name, caps, params, plan),
    )


def _chat(name: str, caps: Capabilities, max_choices: int, chat_audio: type[BaseModel],
          limits: Limits) -> dict[str, Any]:
    chat: dict[str, Any] = {
        "messages": (list[_message(name, caps)], Field(..., min_length=1)),
        "stream": (StrictBool, False),
        "stream_options": (StreamOptions | None, None),
        "n": (bounded_n(max_choices), 1),
        "stop": (stop_field(limits), None),
        "user": (str | None, None),
    }
    limit = caps.param("max_tokens")
    if limit is not None:
        chat.update({f: optional_field(limit, ge=1) for f in TOKEN_LIMITS})
    openai_bounds = {"temperature": (0, 2), "top_p": (0, 1), "frequency_penalty": (-2, 2),
                     "presence_penalty": (-2, 2), "seed": (None, None)}
    for field, names in CHAT_FIELDS.items():
        p = caps.param(*names)
        if p is not None and p.type in ("int", "float"):
            chat[field] = optional_field(p, *openai_bounds[field])
    if caps.unsupported("speech") is None:
        chat["modalities"] = (list[Literal["text", "audio"]] | None, None)
        chat["audio"] = (chat_audio | None, None)
    return chat


def _speech(caps: Capabilities, voice_type: Any) -> dict[str, Any]:
    speech: dict[str, Any] = {
        "input": (str, Field(..., min_length=1, max_length=65536)),
        "voice": (voice_type, ...),
        "response_format": (Literal["wav", "pcm"], "wav"),
        "stream_format": (Literal["audio", "sse"], "audio"),
        "stream": (StrictBool, Field(True, description="false: the whole file at once, with its length")),
    }
    for field in ("speed", "instructions"):
        p = caps.param(field)
        if p is not None:
            speech[field] = (param_type(p) | None, None)
    return speech


def size_pattern(caps: Capabilities) -> str:
    """`size` exactly as the route accepts it: auto, or WxH within the width and height params' bounds
    and a multiple of the image emitter's `const size_multiple` (only auto without those params)."""
    w, h = caps.param("width"), caps.param("height")
    if w is None or h is None:
        return "^auto$"  # any other size is refused by the route (400 naming why)
    step = next((v for spec in caps.emitters.get("image", ()) for k, v in spec.consts.items()
                 if k == "size_multiple" and isinstance(v, int) and not isinstance(v, bool) and v > 0), 1)
    dims = []
    for p in (w, h):
        lo, hi = max(1, int(p.low or 1)), min(99999, int(p.high or 99999))
        values = range(lo + (-lo % step), hi + 1, step)
        dims.append("(" + "|".join(map(str, values)) + ")" if len(values) <= _LISTED_SIZES else None)
    if None in dims:
        return SIZE_PATTERN
    return f"^(auto|{dims[0]}x{dims[1]})$"


def _images(caps: Capabilities, max_choices: int) -> dict[str, Any]:
    images: dict[str, Any] = {
        "prompt": (str, Field(..., min_length=1)),
        "n": (bounded_n(max_choices), 1),
        # validated loosely, so the route's 400 can name the bounds; documented exactly
        "size": (Annotated[str, Field(pattern=SIZE_PATTERN, json_schema_extra={"pattern": size_pattern(caps)})]
                 | None, None),
        "response_format": (Literal["b64_json"] | None, None),
        "output_format": (Literal["png"] | None, None),
        "user": (str | None, None),
    }
    seed = caps.param("seed")
    if seed is not None and seed.type == "int":
        images["seed"] = optional_field(seed)
    return images


class GeneratePart(Strict):
    kind: StrictStr = Field(..., description="text, image, audio, video, ... as the plan's each-arms name them")
    data: Any = Field(None, description="text; a data: URL for image or audio; a tensor "
                                        "{dtype, shape, b64} or {dtype, values}; or any JSON value")


def _documented(schema: dict[str, Any]) -> Any:
    """A JSON-schema rule the runtime enforces itself (its 400 names the allowed values), shown in the
    OpenAPI document but not validated twice."""
    return Field(json_schema_extra=schema)


_REQUIRED_DATA = ("text", "tokens", "image", "audio")


def value_schema(kind: str) -> dict[str, Any]:
    """A part's or named input's value as the native route reads it (values.value_in): text a string,
    tokens a string or ids, an image or audio a data: URL (a tensor also passes); anything else any JSON."""
    return {"text": {"type": "string"},
            "tokens": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]},
            "image": {"type": "string", **IMAGE_URL}, "audio": {"type": "string", **AUDIO_URL}}.get(kind, {})


def _part_model(name: str, kinds: list[str]) -> type[BaseModel]:
    """A part: one shape per kind the plan's each-arms take (documented; values.value_in enforces it)."""
    def schema(out: dict[str, Any]) -> None:
        out.clear()
        out["oneOf"] = [{"type": "object", "title": f"{k} part", "additionalProperties": False,
                         "required": ["kind", "data"] if k in _REQUIRED_DATA else ["kind"],
                         "properties": {"kind": {"const": k}, "data": value_schema(k)}} for k in kinds]

    config = ConfigDict(extra="forbid", json_schema_extra=schema)
    return type(f"{name}GeneratePart", (GeneratePart,), {"model_config": config, "__module__": __name__})


def _required_inputs(plan: Plan) -> list[str]:
    """The named inputs every request needs: those of the walk a plan of one flow always starts with."""
    if len(plan.flows) != 1:
        return []
    starts = plan.flows[0].transitions.get("start", [])
    walk = next((w for w in plan.walks if len(starts) == 1 and starts[0].when is None and w.name == starts[0].target),
                None)
    return list(walk.inputs) if walk is not None else []


def _generate(name: str, caps: Capabilities, params: type[BaseModel], plan: Plan | None) -> type[BaseModel]:
    accepts = Accepts.of(plan) if plan is not None else None
    default_out = ["text"] if "text" in caps.emits else sorted(caps.emits)
    emits = list(accepts.emits) if accepts else sorted(caps.emits)
    kinds = list(accepts.part_kinds) if accepts else None
    types = {n: ty.split("[", 1)[0] for n, ty in caps.slot.inputs}
    part = _part_model(name, kinds) if kinds else GeneratePart
    parts_rule = {} if kinds is None or kinds else {"maxItems": 0}
    required = _required_inputs(plan) if plan is not None else []
    inputs_rule = {} if accepts is None else {"additionalProperties": False, "required": required, "properties": {
        n: value_schema(types.get(n, "")) for n in accepts.inputs}}
    return create_model(
        f"{name}GenerateRequest", __base__=Strict,
        model=(str | None, None),
        task=(StrictStr, ""),
        params=(params | None, None),
        parts=(list[part], Field(default_factory=list, json_schema_extra=parts_rule)),
        inputs=(dict[str, Any], Field(... if required else {}, description="named walk inputs (values as in parts)",
                                      json_schema_extra=inputs_rule)),
        outputs=(list[Annotated[StrictStr, _documented({"enum": emits})]],
                 Field(default_factory=lambda: list(default_out), min_length=1)),
        input_modalities=(list[StrictStr] | None, None),
        think=(StrictBool, False),
        stream=(StrictBool, Field(True, description="true: NDJSON events as they happen; false: one JSON")),
        tensor_encoding=(Literal["list", "base64"], "list"),
        timeout=(TimeoutField, None),
    )


def _describe(p: ParamSpec) -> str:
    bounds = f" in {p.low}..{p.high}" if p.low is not None and p.high is not None else ""
    choices = f" one of {p.choices}" if p.choices is not None else ""
    return f"{p.type} = {p.default!r}{bounds}{choices}"
