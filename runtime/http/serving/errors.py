"""Errors of the HTTP frontend: one exception, the OpenAI error shape, and a fixed table of codes.

Every error answer is `{"error": {"message", "type", "param", "code"}}` with a `code` from CODES;
the status follows from the code, so a code always means the same status. Clients match on
`code`, never on the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# code -> (HTTP status, OpenAI error type, meaning)
CODES: dict[str, tuple[int, str, str]] = {
    "invalid_json": (400, "invalid_request_error", "the body is not valid JSON (or not a valid form)"),
    "invalid_request": (400, "invalid_request_error", "the plan cannot serve the request as given"),
    "unsupported_parameter": (400, "invalid_request_error", "a field this model's plan has no use for"),
    "unsupported_value": (400, "invalid_request_error", "a value this route or model does not support"),
    "invalid_media": (400, "invalid_request_error", "a data URL, base64 payload or media file that cannot be read"),
    "template_error": (400, "invalid_request_error", "the chat template failed on these messages"),
    "limit_exceeded": (400, "invalid_request_error", "more parts, images, stop strings, choices or prompt text "
                       "than the server's limits allow (the message names the limit)"),
    "context_length_exceeded": (400, "invalid_request_error", "the prompt, or the prompt and max_tokens, exceed "
                                "the model's positions or the KV pool"),
    "invalid_api_key": (401, "authentication_error", "a missing or wrong Bearer API key"),
    "route_not_supported": (404, "not_found_error", "this model's plan cannot serve this route"),
    "model_not_found": (404, "not_found_error", "no model of that name is served here"),
    "not_found": (404, "not_found_error", "no such path"),
    "method_not_allowed": (405, "invalid_request_error", "the path exists, the method does not"),
    "request_too_large": (413, "invalid_request_error", "the body is larger than the server accepts"),
    "media_too_large": (413, "invalid_request_error", "an image or audio input is larger than the server accepts"),
    "validation_error": (422, "invalid_request_error", "the body does not match the route's schema"),
    "request_failed": (422, "invalid_request_error", "a component failed on this request's inputs"),
    "over_capacity": (429, "rate_limit_error", "every slot and queue place is taken: retry after Retry-After"),
    "internal_error": (500, "server_error", "a bug in wgc: please report it"),
    "not_ready": (503, "service_unavailable_error", "the ranks are still loading"),
    "rank_down": (503, "service_unavailable_error", "a rank is down: the runtime must be restarted"),
    "shutting_down": (503, "service_unavailable_error", "the server is stopping"),
    "request_timeout": (504, "timeout_error", "the request ran past its timeout and was cancelled"),
}


MAX_MESSAGE = 1000  # characters of a message: one that echoes a client's value is cut there
MAX_PARAM = 200


def clipped(text: str, limit: int = 64) -> str:
    """A client's value as a message shows it: at most `limit` characters, then an ellipsis."""
    return text if len(text) <= limit else text[:limit] + "…"


class ApiError(Exception):
    """An error answer: its code (a key of CODES), a one-line message, the field it concerns. Both are
    cut to a bounded length, so no client value comes back in full, however large."""

    def __init__(self, code: str, message: str, param: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        if code not in CODES:
            raise ValueError(f"unknown error code {code!r}")
        message = clipped(message, MAX_MESSAGE)
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = None if param is None else clipped(param, MAX_PARAM)
        self.headers = dict(headers or {})

    @property
    def status(self) -> int:
        return CODES[self.code][0]

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, self.param)


def error_body(code: str, message: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": CODES[code][1], "param": param, "code": code}}


def status_code(code: str) -> int:
    return CODES[code][0]
