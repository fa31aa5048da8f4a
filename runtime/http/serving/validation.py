"""Validation errors (pydantic's) as ApiErrors: the first one, with the field it concerns; and text
that is not Unicode (a lone surrogate, which JSON's \\ud800 escape can carry) found before any
tokenizer or encoder meets it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from wgc.runtime.http.serving.errors import ApiError

from wgc.plan.model import Plan


def validation_error(plan: Plan, errors: Any) -> ApiError:
    """The first validation error as an ApiError (of a union, the branch that came furthest: a content
    list's part, not "content is not a string"): malformed JSON 400, a field the plan has no use for
    400 `unsupported_parameter`, anything else 422."""
    first = _deepest(errors) if errors else {"type": "", "loc": (), "msg": "invalid body"}
    loc = _field(first.get("loc", ()))
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


_BRANCHES = ("str", "int", "float", "bool", "none", "list", "dict")


def _branch(x: Any) -> bool:
    return str(x) in _BRANCHES or "[" in str(x)


def _deepest(errors: Any) -> dict[str, Any]:
    """The first error; where it is a union's branch (`content.str`), the branch of that union that came
    furthest (`content.list[...].0.input_audio.format`)."""
    first = dict(errors[0])
    at = tuple(first.get("loc", ()))
    if not at or not _branch(at[-1]):
        return first
    same = [dict(e) for e in errors if tuple(e.get("loc", ()))[:len(at) - 1] == at[:-1]]
    return max(same, key=lambda e: len(e.get("loc", ())))


def _field(loc: Any) -> list[str]:
    """The field a pydantic location names, without `body` and the union branches it went through
    (`str`, `list[...]`, a tagged union's tag before the field of the same name)."""
    out: list[str] = []
    for x in (str(x) for x in loc if x != "body"):
        if _branch(x):
            continue
        if out and out[-1] == x:
            continue  # a tag, then its field: input_audio.input_audio
        out.append(x)
    return out


def text_error(body: Any) -> ApiError | None:
    """The first string in `body` (a validated model, its lists, dicts and their keys) that holds a
    lone surrogate, as a 400 naming its field; None when all text is valid. Iterative (nesting as deep
    as the JSON parser allows costs no recursion); numbers are skipped without a path being built."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            err = None if value.isascii() else _surrogate(where or "body", value)
            if err is not None:
                return err
            continue
        if isinstance(value, BaseModel):
            items: Any = ((f".{k}", getattr(value, k)) for k in type(value).model_fields)
        elif isinstance(value, list | tuple):
            items = ((f"[{i}]", v) for i, v in enumerate(value) if isinstance(v, _NESTED))
        elif isinstance(value, dict):
            items = (pair for k, v in value.items() for pair in ((" (a key)", k), (f".{k}", v)))
        else:
            continue
        stack.extend(reversed([((where + key).lstrip("."), v) for key, v in items]))
    return None


_NESTED = (str, list, tuple, dict, BaseModel)


def _surrogate(where: str, text: str) -> ApiError | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        shown = _printable(where)
        return ApiError("invalid_request", f"{shown}: a lone surrogate U+{ord(text[err.start]):04X} at character "
                        f"{err.start} is not text (send UTF-8, or a \\u escape pair)", shown)
    return None


def _printable(where: str) -> str:
    """A field path fit for a message: a dict key may itself hold a surrogate."""
    return where.encode("utf-8", "backslashreplace").decode("ascii", "replace")[:200]
