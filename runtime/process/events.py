"""What a request's caller receives: its outputs as they come, then exactly one end event.

Timing is in seconds since the request was submitted, measured where the
coordinator receives each message: `t_since_submit` never decreases along a
request's events, and `t_first` is the request's time to first output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_PY_DTYPES = {bool: "bool", int: "int64", float: "float64", str: "str", bytes: "bytes"}


@dataclass(frozen=True)
class OutputEvent:
    request: int
    modality: str  # text, image, audio, video, ...
    payload: Any  # a tensor, or a plain value (int, float, str, list)
    shape: tuple[int, ...]
    dtype: str
    walk: str  # the walk that emitted it
    rank: int  # the rank that emitted it
    seq: int  # its number among this request's outputs from that rank
    t_since_submit: float
    t_first: float  # t_since_submit of the request's first output


@dataclass(frozen=True)
class DoneEvent:
    request: int
    outputs: int  # how many OutputEvents came before
    t_since_submit: float
    t_first: float | None  # None when the request had no output
    cut: tuple[str, ...] = ()  # walks whose `loop until` stopped at its `max` bound (finish_reason "length")


@dataclass(frozen=True)
class ErrorEvent:
    request: int
    error: str  # one line: what failed, and on which rank
    t_since_submit: float


@dataclass(frozen=True)
class CancelledEvent:
    request: int
    t_since_submit: float


RequestEvent = OutputEvent | DoneEvent | ErrorEvent | CancelledEvent
FINAL = (DoneEvent, ErrorEvent, CancelledEvent)


def describe(value: Any) -> tuple[tuple[int, ...], str]:
    """(shape, dtype) of an output: exact for tensors and arrays, by structure for plain values."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return tuple(int(n) for n in value.shape), str(value.dtype).removeprefix("torch.")
    if isinstance(value, (list, tuple)):
        if not value:
            return (0,), "none"
        inner, dtype = describe(value[0])
        return (len(value), *inner), dtype
    if value is None:
        return (), "none"
    return (), _PY_DTYPES.get(type(value), type(value).__name__)
