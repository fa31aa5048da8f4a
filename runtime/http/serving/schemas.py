"""The OpenAI-shaped bodies, as pydantic models: what every plan shares.

Request models forbid unknown fields (a field the server would ignore is an error, never a
silent no-op); message objects ignore extra keys so a client can send back an assistant message
it received. The fields a plan decides (bounds of max_tokens, voices, params) are added per plan
by plan_schemas.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---- errors ------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


# ---- chat ----------------------------------------------------------------------------------


class TextPart(Lenient):
    type: Literal["text"]
    text: str


# Media as the routes read them. `format` names what the string holds (a PNG, JPEG or WebP image, or
# a WAV file, base64-encoded), which no JSON schema can check: tools that generate requests from the
# document can register a generator for each (tests/http/schemathesis_hooks.py).
IMAGE_URL = {"format": "image-data-url", "pattern": "^data:"}
AUDIO_URL = {"format": "audio-data-url", "pattern": "^data:"}
WAV_BASE64 = {"format": "wav-base64"}


class ImageUrl(Lenient):
    url: str = Field(description="a data: URL (data:image/png;base64,...); the server fetches nothing",
                     json_schema_extra=IMAGE_URL)
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(Lenient):
    type: Literal["image_url"]
    image_url: ImageUrl


class InputAudio(Lenient):
    data: str = Field(description="a WAV file, base64-encoded", json_schema_extra=WAV_BASE64)
    format: Literal["wav"]


class AudioPart(Lenient):
    type: Literal["input_audio"]
    input_audio: InputAudio


class AudioUrl(Lenient):
    url: str = Field(description="a data: URL (data:audio/wav;base64,...)", json_schema_extra=AUDIO_URL)


class AudioUrlPart(Lenient):
    type: Literal["audio_url"]
    audio_url: AudioUrl


class StreamOptions(Strict):
    include_usage: StrictBool = False


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatAudio(BaseModel):
    id: str
    data: str = Field(description="base64 audio: a WAV file, or 16-bit PCM when streaming")
    expires_at: int
    transcript: str


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    audio: ChatAudio | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


# ---- speech and images ---------------------------------------------------------------------


class ImageData(BaseModel):
    b64_json: str
    revised_prompt: str | None = None


class ImagesResponse(BaseModel):
    created: int
    data: list[ImageData]
    output_format: Literal["png"] = "png"
    size: str


# ---- models, health ------------------------------------------------------------------------


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "wgc"
    routes: dict[str, bool] = Field(description="which routes this model's plan serves")
    params: list[dict[str, Any]] = Field(description="the plan's request params: name, type, default, bounds")
    emits: list[str] = Field(description="output modalities the plan's walks emit")
    fake: bool = Field(description="true when the components are fakes (mock outputs, no weights)")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class CaptureStatus(BaseModel):
    component: str
    entry: str
    walk: str
    state: Literal["captured", "partial", "eager"] = Field(description="partial: some buckets failed to capture")
    buckets: list[int] = Field(description="the plan's CUDA-graph batch buckets for this entry")
    captured: list[int] = Field(description="buckets whose graph replays, largest first")
    failed: dict[str, str] = Field(description="bucket → why its capture failed")
    eager: str = Field(description="why the entry runs eagerly; empty when a bucket is captured")
    seconds: float = Field(description="how long the capture took at start-up")


class RankStatus(BaseModel):
    rank: int
    pid: int
    state: Literal["up", "down", "unresponsive"]
    reason: str
    counters: dict[str, int]
    captures: list[CaptureStatus] = Field(default=[], description="the rank's CUDA graphs, captured at start-up")


class CapacityStatus(BaseModel):
    running: int = Field(description="admission slots: requests (choices) running at once")
    queued: int = Field(description="requests that may wait for a slot before 429")
    source: Literal["option", "kv_pool", "max_batch"] = Field(
        description="option: --max-running/--max-queued; kv_pool: the requests whose expected KV fits the "
                    "smallest pool the ranks report; max_batch: the plan's smallest max_batch")
    detail: str = Field(description="the arithmetic behind the numbers")


class HealthStatus(BaseModel):
    status: Literal["ok", "busy"] = Field(description="busy: a rank did not answer the probe in time (it is "
                                                       "alive, its counters are missing)")
    model: str
    requests_in_flight: int
    capacity: CapacityStatus
    ranks: list[RankStatus]
