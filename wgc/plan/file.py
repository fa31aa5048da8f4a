"""plan.bin: writing a compiled Plan and reading it back, checked (the byte layout is in layout.py).

Deterministic: msgpack with sorted dict keys, no timestamps, names as the caller gave them; the
same Plan and sources give the same bytes. No pickle. Not a signature: anyone can recompute the
hashes; "tampered" means the parts disagree although the checksum holds (a body edited and the
checksum recomputed, the header's body hash left alone). A body whose hashes all hold is still
checked for internal references (check.py): a name or rank that does not exist is "invalid".
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec

from wgc import __version__
from wgc.plan.check import first_problem
from wgc.plan.layout import (
    CHECKSUM_SIZE,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    MAGIC,
    PRELUDE_SIZE,
    PlanFileError,
    PlanHeader,
    Prelude,
    pack_prelude,
    prelude_intact,
    read_prelude,
    sha256_hex,
)
from wgc.plan.model import Plan

__all__ = [
    "CHECKSUM_SIZE",
    "FORMAT_MAJOR",
    "FORMAT_MINOR",
    "MAGIC",
    "PRELUDE_SIZE",
    "PlanFileError",
    "PlanHeader",
    "decode_plan",
    "encode_plan",
    "load_plan",
    "verify_sources",
]


# ---- writing ------------------------------------------------------------------------------


def encode_plan(plan: Plan, source_text: str, placement_text: str) -> bytes:
    """The bytes of plan.bin for `plan`, compiled from these two texts."""
    encoder = msgspec.msgpack.Encoder(order="deterministic")
    body = encoder.encode(plan)
    header = PlanHeader(
        format_major=FORMAT_MAJOR,
        format_minor=FORMAT_MINOR,
        compiler_version=__version__,
        model=plan.model,
        source_name=plan.source_name,
        source_sha256=sha256_hex(source_text),
        placement_name=plan.placement_name,
        placement_sha256=sha256_hex(placement_text),
        body_length=len(body),
        body_sha256=sha256_hex(body),
    )
    head = encoder.encode(header)
    data = pack_prelude(len(head), len(body)) + head + body
    return data + hashlib.sha256(data).digest()


def verify_sources(header: PlanHeader, source_text: str, placement_text: str) -> list[str]:
    """One line per input that differs from what the plan was compiled from; empty when current."""
    stale = []
    if sha256_hex(source_text) != header.source_sha256:
        stale.append(f"{header.source_name} has changed since the plan was compiled")
    if sha256_hex(placement_text) != header.placement_sha256:
        stale.append(f"{header.placement_name} has changed since the plan was compiled")
    return stale


# ---- reading ------------------------------------------------------------------------------


def load_plan(path: str | os.PathLike[str]) -> tuple[PlanHeader, Plan]:
    """Read and check a plan file; every problem is a PlanFileError with a one-line message."""
    name = os.fspath(path)
    try:
        data = Path(name).read_bytes()
    except FileNotFoundError:
        raise PlanFileError("unreadable", f"cannot read {name}: no such file") from None
    except IsADirectoryError:
        raise PlanFileError("unreadable", f"cannot read {name}: it is a directory") from None
    except OSError as err:
        raise PlanFileError("unreadable", f"cannot read {name}: {err.strerror or err}") from None
    try:
        return decode_plan(data)
    except PlanFileError as err:
        raise err.at(name) from None


def decode_plan(data: bytes) -> tuple[PlanHeader, Plan]:
    """Check and decode the bytes of a plan file (see wgc/plan/layout.py)."""
    prelude = read_prelude(data)
    _check_integrity(data, prelude)
    header = _decode_header(data[PRELUDE_SIZE : prelude.header_end])
    body = data[prelude.header_end : prelude.body_end]
    _check_agreement(prelude, header, body)
    plan = _decode_body(body, prelude)
    for field in ("model", "source_name", "placement_name"):
        if getattr(plan, field) != getattr(header, field):
            raise PlanFileError("tampered", f"plan file was tampered with: the header and the body disagree on {field}")
    problem = first_problem(plan)
    if problem is not None:
        raise PlanFileError("invalid", f"plan body is invalid: {problem}")
    return header, plan


def _check_integrity(data: bytes, prelude: Prelude) -> None:
    """Checksum first: a file whose checksum holds is whole, whatever its lengths say."""
    size = len(data)
    if size >= PRELUDE_SIZE + CHECKSUM_SIZE and hashlib.sha256(data[:-CHECKSUM_SIZE]).digest() == data[-CHECKSUM_SIZE:]:
        if not prelude_intact(data, prelude):
            raise PlanFileError(
                "tampered", "plan file was tampered with: its prelude was edited and the checksum recomputed"
            )
        if size != prelude.total:
            raise PlanFileError(
                "tampered",
                f"plan file was tampered with: it is {size} bytes but its prelude says {prelude.total}"
                " (the contents were edited and the checksum recomputed)",
            )
        return
    if not prelude_intact(data, prelude):
        raise PlanFileError("corrupted", "plan file is corrupted: its prelude (lengths and version) is damaged")
    if size < prelude.total:
        part = "header" if size < prelude.header_end else "body" if size < prelude.body_end else "checksum"
        raise PlanFileError(
            "truncated", f"plan file is truncated: {size} of {prelude.total} bytes, it ends inside the {part}"
        )
    if size > prelude.total:
        raise PlanFileError("corrupted", f"plan file is corrupted: {size} bytes where its prelude says {prelude.total}")
    raise PlanFileError("corrupted", "plan file is corrupted: its checksum does not match its contents; recompile it")


def _decode_header(raw: bytes) -> PlanHeader:
    try:
        return msgspec.msgpack.decode(raw, type=PlanHeader)
    except (msgspec.DecodeError, RecursionError) as err:
        raise PlanFileError("invalid", f"plan header is invalid: {_reason(err)}") from None


def _check_agreement(prelude: Prelude, header: PlanHeader, body: bytes) -> None:
    if (header.format_major, header.format_minor) != (prelude.major, prelude.minor):
        raise PlanFileError(
            "tampered",
            f"plan file was tampered with: its header says format {header.format_major}.{header.format_minor},"
            f" its prelude {prelude.major}.{prelude.minor}",
        )
    if header.body_length != len(body) or header.body_sha256 != sha256_hex(body):
        raise PlanFileError(
            "tampered",
            "plan file was tampered with: the body does not match the header's body_sha256"
            " (the body was edited and the checksum recomputed)",
        )


def _decode_body(body: bytes, prelude: Prelude) -> Plan:
    try:
        return msgspec.msgpack.decode(body, type=Plan)
    except (msgspec.DecodeError, RecursionError) as err:
        hint = ""
        if prelude.minor > FORMAT_MINOR:
            hint = (
                f"; it was written for format {prelude.major}.{prelude.minor},"
                f" this wgc reads {FORMAT_MAJOR}.{FORMAT_MINOR}: upgrade wgc"
            )
        raise PlanFileError("invalid", f"plan body is invalid: {_reason(err)}{hint}") from None


def _reason(err: BaseException) -> str:
    return "nested too deeply" if isinstance(err, RecursionError) else str(err)
