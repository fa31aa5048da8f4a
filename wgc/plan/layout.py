"""plan.bin's byte layout: the fixed prelude, the typed header, and the one error a bad file raises.

Layout (integers little-endian):

    offset    size  field
    0         8     MAGIC, b"WGCPLAN\\0"
    8         2     format major  (checked before anything after it is read: a major may change the rest)
    10        2     format minor  (a newer minor of the same major is read: minors only add)
    12        4     header length H
    16        8     body length B
    24        4     CRC-32 of bytes 0..24, so the lengths can be trusted when telling truncation from damage
    28        H     header: msgpack PlanHeader (a map: a later minor may add fields)
    28+H      B     body: msgpack Plan (wgc/plan/model.py)
    28+H+B    32    sha256 of everything before it

Reading and writing are in wgc/plan/file.py.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from typing import NamedTuple

import msgspec

MAGIC = b"WGCPLAN\0"
FORMAT_MAJOR = 1
FORMAT_MINOR = 1  # 1.1 added MemoryRow.mirror_bytes: additive, a 1.0 reader skips the field it does not know

_LENGTHS = struct.Struct("<8sHHIQ")  # magic, major, minor, header length, body length
_CRC = struct.Struct("<I")
_MAJOR = struct.Struct("<H")
_MAJOR_END = len(MAGIC) + _MAJOR.size
PRELUDE_SIZE = _LENGTHS.size + _CRC.size  # 28
CHECKSUM_SIZE = 32


class PlanHeader(msgspec.Struct, frozen=True):
    """What a plan was compiled from and by; readable without decoding the body."""

    format_major: int
    format_minor: int
    compiler_version: str
    model: str
    source_name: str  # as given on the command line, never resolved
    source_sha256: str  # hex, of the .walk text as UTF-8
    placement_name: str
    placement_sha256: str  # hex, of the placement text as UTF-8
    body_length: int
    body_sha256: str  # hex, of the body bytes


class PlanFileError(Exception):
    """A plan file that cannot be used. `kind` is a stable slug; str() is one line.

    kinds: unreadable, not-a-plan, truncated, corrupted, tampered, newer-format, older-format, invalid.
    """

    def __init__(self, kind: str, message: str, path: str | None = None) -> None:
        self.kind = kind
        self.message = " ".join(message.split())
        self.path = path
        super().__init__(f"{path}: {self.message}" if path else self.message)

    def at(self, path: str) -> PlanFileError:
        """The same error, naming the file it came from."""
        return PlanFileError(self.kind, self.message, path)


class Prelude(NamedTuple):
    major: int
    minor: int
    header_length: int
    body_length: int
    crc: int

    @property
    def header_end(self) -> int:
        return PRELUDE_SIZE + self.header_length

    @property
    def body_end(self) -> int:
        return self.header_end + self.body_length

    @property
    def total(self) -> int:
        return self.body_end + CHECKSUM_SIZE


def sha256_hex(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def pack_prelude(header_length: int, body_length: int) -> bytes:
    lengths = _LENGTHS.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, header_length, body_length)
    return lengths + _CRC.pack(zlib.crc32(lengths))


def prelude_intact(data: bytes, prelude: Prelude) -> bool:
    return zlib.crc32(data[: _LENGTHS.size]) == prelude.crc


def read_prelude(data: bytes) -> Prelude:
    """The prelude of `data`, after the magic and the major version; raises PlanFileError."""
    size = len(data)
    if size == 0:
        raise PlanFileError("not-a-plan", "not a plan file: it is empty")
    if data[: len(MAGIC)] != MAGIC[:size]:
        raise PlanFileError("not-a-plan", "not a plan file: it does not start with the wgc plan magic bytes")
    if size >= _MAJOR_END:  # read before anything else: another major may lay out the rest differently
        (major,) = _MAJOR.unpack_from(data, len(MAGIC))
        if major != FORMAT_MAJOR:
            _refuse_version(data, major)
    if size < PRELUDE_SIZE:
        raise PlanFileError(
            "truncated", f"plan file is truncated: {size} bytes, it ends inside the {PRELUDE_SIZE}-byte prelude"
        )
    _, major, minor, header_length, body_length = _LENGTHS.unpack_from(data)
    (crc,) = _CRC.unpack_from(data, _LENGTHS.size)
    return Prelude(major, minor, header_length, body_length, crc)


def _refuse_version(data: bytes, major: int) -> None:
    if len(data) >= PRELUDE_SIZE:
        (crc,) = _CRC.unpack_from(data, _LENGTHS.size)
        ours = bytearray(data[: _LENGTHS.size])
        _MAJOR.pack_into(ours, len(MAGIC), FORMAT_MAJOR)
        if crc == zlib.crc32(ours):  # our own format, its version bits flipped
            raise PlanFileError("corrupted", "plan file is corrupted: its format version field is damaged")
    if major > FORMAT_MAJOR:
        raise PlanFileError(
            "newer-format", f"plan format {major}.x is newer than this wgc ({FORMAT_MAJOR}.x); recompile or upgrade"
        )
    raise PlanFileError(
        "older-format", f"plan format {major}.x is older than this wgc ({FORMAT_MAJOR}.x); recompile the plan"
    )
