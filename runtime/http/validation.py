"""Validation errors (pydantic's) as ApiErrors: the first one, with the field it concerns."""

from __future__ import annotations

from typing import Any

from wgc.runtime.http.errors import ApiError

from wgc.plan.model import Plan


def validation_error(plan: Plan, errors: Any) -> ApiError:
    """The first validation error as an ApiError: malformed JSON 400, a field the plan has no use for
    400 `unsupported_parameter`, anything else 422."""
    first = dict(errors[0]) if errors else {"type": "", "loc": (), "msg": "invalid body"}
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    where = ".".join(loc) or "body"
    if first.get("type") == "json_invalid":
        return ApiError("invalid_json", f"the body is not valid JSON: {first.get('ctx', {}).get('error', '')}")
    if not loc and first.get("type") in ("model_attributes_type", "dict_type", "missing"):
        return ApiError("invalid_json", "the body must be a JSON object, sent as Content-Type: application/json")
    if first.get("type") == "extra_forbidden":
        if len(loc) >= 2 and loc[0] == "params":
            known = ", ".join(p.name for p in plan.params) or "none"
            return ApiError("unsupported_parameter", f"unknown param `{loc[-1]}` (model `{plan.model}` "
                            f"has: {known})", where)
        return ApiError("unsupported_parameter", f"`{where}` is not supported by model `{plan.model}`: "
                        "its plan has no use for it", where)
    return ApiError("validation_error", f"{where}: {first.get('msg', 'invalid')}", where)
