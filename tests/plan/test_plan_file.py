"""plan.bin: round trip, byte-identical output, and a one-line refusal for every kind of bad file."""

from __future__ import annotations

import ast
import hashlib
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import msgspec
import pytest

import wgc
from wgc.plan.file import (
    CHECKSUM_SIZE,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    MAGIC,
    PRELUDE_SIZE,
    PlanFileError,
    PlanHeader,
    decode_plan,
    encode_plan,
    load_plan,
    verify_sources,
)
from wgc.plan.model import (
    CaptureSpec,
    Carry,
    ComponentSpec,
    EachArm,
    EachSpec,
    EBinary,
    EConst,
    ELit,
    Emit,
    EndLoop,
    EntrySpec,
    EParam,
    EPartKind,
    EReq,
    EResult,
    EVal,
    FlowSpec,
    Free,
    Loop,
    MemoryRow,
    Next,
    ParamSpec,
    Plan,
    RankSpec,
    Recv,
    Run,
    Send,
    Setting,
    Src,
    StreamSpec,
    Transition,
    WalkSchedule,
    WalkSpec,
    YieldOut,
)

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "model toy\n# the .walk text\n"
PLACEMENT = "[ranks]\n0 = 'cpu'\n1 = 'cpu'\n"
CONST_NAMES = {"hidden", "vocab", "layers", "heads", "head_dim", "eos", "bos", "pad"}


def _src(line: int) -> Src:
    return Src(line, 5, line, 30)


def sample_plan(reverse: bool = False) -> Plan:
    """Two ranks; a denoise loop with an expression bound; Send/Recv; a flow with transitions and an each."""
    names = sorted(CONST_NAMES, reverse=reverse)
    consts: dict[str, int | float | str | bool | None] = {n: len(n) for n in names}
    lm = ComponentSpec(
        name="lm",
        cls="toy.Lm",
        engine="kv",
        entries=[EntrySpec("step", ["tensor[N, 64; bf16]"], "tensor[N, 64; bf16]")],
        consts=consts,
        labels=["main", "cfg"],
        attrs={"layers": 2, "dtype": "bf16"},
        ranks=[0],
        tp=1,
        settings={"memory_fraction": 0.5, "buckets": [1, 2, 4]},
    )
    dec = ComponentSpec(
        "dec", "toy.Dec", "stateless", [EntrySpec("decode", ["tensor[N]"], None)], {}, [], {}, [1], 1, {}
    )
    bound = EBinary("*", EParam("steps"), EConst("lm", "layers"))
    rank0 = [
        Run("lm", "step", ["h"], [[EReq("inputs")]], [""], [1, 2, 4], 0, _src(3)),
        Loop(0, bound, False, "i", [Carry("h", EVal("h")), Carry("acc", None)], False, _src(4)),
        Run("lm", "step", ["h", "g"], [[EVal("h")], [EVal("h"), ELit(1.5)]], ["main", "cfg"], [], -1, _src(5)),
        EndLoop(0, None, [YieldOut("terminal", "h", "out"), YieldOut("accumulated", "g", "gs")], _src(6)),
        Send("out", 1, "gen/out", _src(7)),
        Free(["h", "gs"], _src(8)),
        Next(None, _src(9)),
    ]
    rank1 = [
        Recv("out", 0, "gen/out", _src(7)),
        Run("dec", "decode", [""], [[EVal("out")]], [""], [], -1, _src(10)),
        Emit("image", "out", _src(11)),
        Next("out", _src(12)),
    ]
    transitions = {
        "start": [Transition("gen", EBinary("==", EReq("task"), ELit("image"))), Transition("parts", None)],
        "gen": [Transition("done", EBinary(">", EResult("gen"), ELit(0)))],
        "parts": [Transition("done", None)],
    }
    if reverse:
        transitions = dict(reversed(transitions.items()))
    arms = [EachArm("image", ["gen"], EBinary("==", EPartKind(), ELit("image"))), EachArm("_", [], None)]
    return Plan(
        model="toy",
        source_name="models/toy.walk",
        placement_name="placements/cpu.toml",
        params=[ParamSpec("steps", "int", 4, 1, 50), ParamSpec("mode", "str", "a", choices=["a", "b"])],
        components=[lm, dec],
        streams=[
            StreamSpec("s", "tensor[64]", "tensor[N, 64]", "fixed", {"size": 4}, "flush", "drop", 8, [0], 1, None)
        ],
        flows=[FlowSpec("main", None, transitions, [EachSpec("parts", arms)])],
        walks=[WalkSpec("gen", ["prompt"], "tensor", None, [0, 1], 1)],
        ranks=[
            RankSpec(0, "cpu", "localhost", [WalkSchedule("gen", ["prompt"], rank0)]),
            RankSpec(1, "cpu", "localhost", [WalkSchedule("gen", [], rank1)]),
        ],
        captures=[CaptureSpec(0, 0, "lm", "step", "gen", [1, 2, 4])],
        memory=[MemoryRow(0, 2**30, 2**20, 2**19, 0, 4096), MemoryRow(1, 2**30, 2**10, 0, 0, 0)],
        settings=[Setting("kv.page_size", 16, "default"), Setting("buckets", [1, 2, 4], "placement")],
    )


@pytest.fixture(scope="module")
def data() -> bytes:
    return encode_plan(sample_plan(), SOURCE, PLACEMENT)


def refused(data: bytes, kind: str) -> str:
    with pytest.raises(PlanFileError) as info:
        decode_plan(data)
    message = str(info.value)
    assert info.value.kind == kind, message
    assert "\n" not in message and message.strip() == message and message
    return message


def layout(data: bytes) -> tuple[int, int]:
    """(header end, body end) offsets."""
    header_length, body_length = struct.unpack_from("<IQ", data, 12)
    return PRELUDE_SIZE + header_length, PRELUDE_SIZE + header_length + body_length


def assemble(header: bytes, body: bytes, major: int = FORMAT_MAJOR, minor: int = FORMAT_MINOR) -> bytes:
    """A file with every length, CRC and checksum consistent: what a forger would write."""
    lengths = struct.pack("<8sHHIQ", MAGIC, major, minor, len(header), len(body))
    out = lengths + struct.pack("<I", zlib.crc32(lengths)) + header + body
    return out + hashlib.sha256(out).digest()


def split(data: bytes) -> tuple[PlanHeader, bytes, bytes]:
    header_end, body_end = layout(data)
    raw_header = data[PRELUDE_SIZE:header_end]
    return msgspec.msgpack.decode(raw_header, type=PlanHeader), raw_header, data[header_end:body_end]


def rechecksum(data: bytes) -> bytes:
    return data[:-CHECKSUM_SIZE] + hashlib.sha256(data[:-CHECKSUM_SIZE]).digest()


# ---- round trip and header ----------------------------------------------------------------------


def test_round_trip(data: bytes) -> None:
    header, plan = decode_plan(data)
    assert plan == sample_plan()
    assert header.format_major == FORMAT_MAJOR and header.format_minor == FORMAT_MINOR
    assert header.compiler_version == wgc.__version__
    assert header.model == "toy"
    assert (header.source_name, header.placement_name) == ("models/toy.walk", "placements/cpu.toml")
    assert header.source_sha256 == hashlib.sha256(SOURCE.encode()).hexdigest()
    assert header.placement_sha256 == hashlib.sha256(PLACEMENT.encode()).hexdigest()
    assert data.startswith(MAGIC)
    assert hashlib.sha256(data[:-CHECKSUM_SIZE]).digest() == data[-CHECKSUM_SIZE:]


def test_load_plan_round_trip(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "toy.plan"
    path.write_bytes(data)
    assert load_plan(path) == decode_plan(data)
    assert load_plan(str(path))[1] == sample_plan()


def test_verify_sources(data: bytes) -> None:
    header, _ = decode_plan(data)
    assert verify_sources(header, SOURCE, PLACEMENT) == []
    assert verify_sources(header, SOURCE + "\n", PLACEMENT) == [
        "models/toy.walk has changed since the plan was compiled"
    ]
    stale = verify_sources(header, "x", "y")
    assert len(stale) == 2 and "placements/cpu.toml" in stale[1]


# ---- determinism --------------------------------------------------------------------------------


def test_encoding_twice_gives_identical_bytes(data: bytes) -> None:
    assert encode_plan(sample_plan(), SOURCE, PLACEMENT) == data
    assert encode_plan(sample_plan(), SOURCE, PLACEMENT) == encode_plan(sample_plan(), SOURCE, PLACEMENT)


def test_dict_insertion_order_does_not_change_the_bytes(data: bytes) -> None:
    reordered = sample_plan(reverse=True)
    assert list(reordered.components[0].consts) != list(sample_plan().components[0].consts)
    assert reordered == sample_plan()
    assert encode_plan(reordered, SOURCE, PLACEMENT) == data


_CHILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("t", sys.argv[1])
t = importlib.util.module_from_spec(spec)
spec.loader.exec_module(t)
plan = t.sample_plan()
plan.components[0].consts.clear()
plan.components[0].consts.update({n: len(n) for n in t.CONST_NAMES})  # set order: depends on the hash seed
sys.stdout.write(t.encode_plan(plan, t.SOURCE, t.PLACEMENT).hex())
"""


@pytest.mark.parametrize("seed", ["0", "1", "12345"])
def test_identical_bytes_across_hash_seeds(data: bytes, seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, __file__], env=env, capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert bytes.fromhex(out.stdout) == data


def test_no_pickle_in_the_plan_modules() -> None:
    for path in (ROOT / "wgc" / "plan").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(
                n.split(".")[0] in {"pickle", "_pickle", "cloudpickle", "dill", "marshal", "shelve"} for n in names
            ), path


_NO_PICKLE_CHILD = """
import sys
import wgc.plan.file as f
header, plan = f.decode_plan(sys.stdin.buffer.read())
f.encode_plan(plan, "a", "b")
print(",".join(sorted(m for m in sys.modules if "pickle" in m)))
"""


def test_reading_and_writing_loads_no_pickle_module(data: bytes) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _NO_PICKLE_CHILD], input=data, env=env, capture_output=True, check=True)
    assert out.stdout.strip() == b""


# ---- refusals -----------------------------------------------------------------------------------


def test_empty_file() -> None:
    assert refused(b"", "not-a-plan") == "not a plan file: it is empty"


@pytest.mark.parametrize(
    "garbage", [b"\x00" * 100, b"PK\x03\x04" + bytes(range(200)), SOURCE.encode(), b"WGCPLAX\0" + b"\0" * 80]
)
def test_garbage(garbage: bytes) -> None:
    assert "not a plan file" in refused(garbage, "not-a-plan")


def _cut_points(data: bytes) -> list[int]:
    header_end, body_end = layout(data)
    size = len(data)
    return sorted({1, 4, 7, 8, 10, 12, 20, 27, 28, 29, header_end - 1, header_end, header_end + 1,
                   (header_end + body_end) // 2, body_end - 1, body_end, body_end + 1, size - 16, size - 1})  # fmt: skip


def test_truncated_at_every_offset_class(data: bytes) -> None:
    header_end, body_end = layout(data)
    for cut in _cut_points(data):
        message = refused(data[:cut], "truncated")
        assert f"{cut} " in message, message
        if cut >= PRELUDE_SIZE:
            part = "header" if cut < header_end else "body" if cut < body_end else "checksum"
            assert f"of {len(data)} bytes" in message and message.endswith(f"inside the {part}"), message
        else:
            assert "prelude" in message


def test_truncated_anywhere(data: bytes) -> None:
    for cut in range(1, len(data)):
        refused(data[:cut], "truncated")


def test_bit_flip_anywhere_after_the_magic_is_corrupted(data: bytes) -> None:
    for offset in range(len(MAGIC), len(data)):
        for bit in (0, 7) if offset < PRELUDE_SIZE else (offset % 8,):
            flipped = bytearray(data)
            flipped[offset] ^= 1 << bit
            refused(bytes(flipped), "corrupted")


@pytest.mark.parametrize("region", ["minor", "header", "body", "checksum"])
def test_bit_flip_message(data: bytes, region: str) -> None:
    header_end, body_end = layout(data)
    offset = {"minor": 10, "header": PRELUDE_SIZE + 3, "body": (header_end + body_end) // 2, "checksum": len(data) - 3}
    flipped = bytearray(data)
    flipped[offset[region]] ^= 0x10
    assert refused(bytes(flipped), "corrupted").startswith("plan file is corrupted")


def test_bit_flip_in_the_major_version_is_corrupted_not_a_new_format(data: bytes) -> None:
    flipped = bytearray(data)
    flipped[9] ^= 0x80  # major 1 -> 32769
    assert "version field is damaged" in refused(bytes(flipped), "corrupted")


def test_bit_flip_in_the_magic_is_not_a_plan(data: bytes) -> None:
    flipped = bytearray(data)
    flipped[2] ^= 0x01
    refused(bytes(flipped), "not-a-plan")


def test_extra_bytes_are_corrupted(data: bytes) -> None:
    assert f"where its prelude says {len(data)}" in refused(data + b"\0", "corrupted")


def test_tampered_body_same_length(data: bytes) -> None:
    _, body_end = layout(data)
    edited = bytearray(data)
    at = data.index(b"localhost", 0, body_end)
    edited[at : at + 9] = b"evil-host"
    assert "body_sha256" in refused(rechecksum(bytes(edited)), "tampered")


def test_tampered_body_reencoded_with_checksum_recomputed(data: bytes) -> None:
    _, raw_header, body = split(data)
    plan = sample_plan()
    plan.ranks[1].schedules[0].instructions.append(Next(None, _src(99)))
    new_body = msgspec.msgpack.encode(plan)
    assert new_body != body
    assert "body_sha256" in refused(assemble(raw_header, new_body), "tampered")
    # lengths in the prelude left stale, only the trailing checksum recomputed
    header_end, body_end = layout(data)
    forged = data[:header_end] + new_body
    assert "prelude says" in refused(forged + hashlib.sha256(forged).digest(), "tampered")


def test_tampered_prelude_with_checksum_recomputed(data: bytes) -> None:
    edited = bytearray(data)
    edited[10] ^= 0x01  # the minor version, its CRC left alone
    assert "its prelude was edited" in refused(rechecksum(bytes(edited)), "tampered")


def test_tampered_header_version(data: bytes) -> None:
    header, _, body = split(data)
    raw = msgspec.msgpack.encode(msgspec.structs.replace(header, format_minor=FORMAT_MINOR + 7))
    assert "its header says format" in refused(assemble(raw, body), "tampered")


def test_tampered_header_names(data: bytes) -> None:
    header, _, body = split(data)
    raw = msgspec.msgpack.encode(msgspec.structs.replace(header, source_name="other.walk"))
    assert "source_name" in refused(assemble(raw, body), "tampered")


def test_consistent_rewrite_loads_it_is_not_a_signature(data: bytes) -> None:
    header, _, _ = split(data)
    plan = msgspec.structs.replace(sample_plan(), settings=[])
    body = msgspec.msgpack.encode(plan)
    new = msgspec.structs.replace(header, body_length=len(body), body_sha256=hashlib.sha256(body).hexdigest())
    assert decode_plan(assemble(msgspec.msgpack.encode(new), body))[1] == plan


def test_newer_major(data: bytes) -> None:
    header, raw_header, body = split(data)
    newer = FORMAT_MAJOR + 2
    expected = f"plan format {newer}.x is newer than this wgc ({FORMAT_MAJOR}.x); recompile or upgrade"
    assert refused(assemble(raw_header, body, major=newer), "newer-format") == expected
    # a newer major may lay out everything after the version differently
    assert refused(MAGIC + struct.pack("<HH", newer, 0) + b"\xff" * 5, "newer-format") == expected
    assert refused(MAGIC + struct.pack("<HH", newer, 0), "newer-format") == expected


def test_older_major(data: bytes) -> None:
    _, raw_header, body = split(data)
    message = refused(assemble(raw_header, body, major=FORMAT_MAJOR - 1), "older-format")
    assert message == f"plan format {FORMAT_MAJOR - 1}.x is older than this wgc ({FORMAT_MAJOR}.x); recompile the plan"


def test_newer_minor_is_read(data: bytes) -> None:
    header, _, body = split(data)
    raw = msgspec.msgpack.encode(msgspec.structs.replace(header, format_minor=FORMAT_MINOR + 1))
    new_header, plan = decode_plan(assemble(raw, body, minor=FORMAT_MINOR + 1))
    assert plan == sample_plan() and new_header.format_minor == FORMAT_MINOR + 1


def test_newer_minor_with_an_unknown_instruction_says_upgrade(data: bytes) -> None:
    header, _, body = split(data)
    tree = msgspec.msgpack.decode(body)
    tree["ranks"][0]["schedules"][0]["instructions"].append({"type": "teleport", "src": [1, 1, 1, 2]})
    body = msgspec.msgpack.encode(tree)
    minor = FORMAT_MINOR + 1
    raw = msgspec.msgpack.encode(
        msgspec.structs.replace(
            header, format_minor=minor, body_length=len(body), body_sha256=hashlib.sha256(body).hexdigest()
        )
    )
    message = refused(assemble(raw, body, minor=minor), "invalid")
    assert message.startswith("plan body is invalid:") and message.endswith("upgrade wgc")


def test_header_that_does_not_decode(data: bytes) -> None:
    _, _, body = split(data)
    assert refused(assemble(b"\xc1garbage", body), "invalid").startswith("plan header is invalid:")
    wrong = msgspec.msgpack.encode({"format_major": "one"})
    assert refused(assemble(wrong, body), "invalid").startswith("plan header is invalid:")


def _with_body(header: PlanHeader, body: bytes) -> bytes:
    raw = msgspec.msgpack.encode(
        msgspec.structs.replace(header, body_length=len(body), body_sha256=hashlib.sha256(body).hexdigest())
    )
    return assemble(raw, body)


def test_body_that_does_not_decode(data: bytes) -> None:
    header, _, _ = split(data)
    for body in (msgspec.msgpack.encode({"model": 3}), b"\xc1", b""):
        assert refused(_with_body(header, body), "invalid").startswith("plan body is invalid:")


def test_body_nested_too_deeply(data: bytes) -> None:
    header, _, body = split(data)
    tree = msgspec.msgpack.decode(body)
    tree["ranks"][0]["schedules"][0]["instructions"][1]["bound"] = "@@deep@@"
    deep = msgspec.msgpack.encode(ELit(1))
    unary = msgspec.msgpack.encode({"type": "unary", "op": "-", "operand": 0})[:-1]  # operand's value follows
    deep = unary * 100_000 + deep
    body = msgspec.msgpack.encode(tree).replace(msgspec.msgpack.encode("@@deep@@"), deep)
    assert refused(_with_body(header, body), "invalid") == "plan body is invalid: nested too deeply"


# ---- load_plan ------------------------------------------------------------------------------------


def test_load_plan_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.plan"
    with pytest.raises(PlanFileError) as info:
        load_plan(path)
    assert info.value.kind == "unreadable"
    assert str(info.value) == f"cannot read {path}: no such file"


def test_load_plan_directory(tmp_path: Path) -> None:
    with pytest.raises(PlanFileError, match="it is a directory$"):
        load_plan(tmp_path)


def test_load_plan_names_the_file(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "cut.plan"
    header_end, _ = layout(data)
    path.write_bytes(data[: header_end + 10])
    with pytest.raises(PlanFileError) as info:
        load_plan(path)
    assert info.value.kind == "truncated" and info.value.path == str(path)
    expected = f"{path}: plan file is truncated: {header_end + 10} of {len(data)} bytes, it ends inside the body"
    assert str(info.value) == expected
