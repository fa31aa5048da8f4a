"""The grammar cache: LALR tables stored per user as msgpack, keyed by the grammar and lark's version;
a damaged, tampered or unwritable cache costs start-up time, never a wrong parse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

# ---- the grammar cache ---------------------------------------------------------------------------

_PROBE = r"""
import json, sys
import lark
built = []
_init = lark.Lark.__init__
def _spy(self, *args, **kwargs):
    built.append(1)
    return _init(self, *args, **kwargs)
lark.Lark.__init__ = _spy
from wgc.lang.parser import parse
result = parse(sys.stdin.read(), "probe.walk")
print(json.dumps({"built": len(built), "ok": result.program is not None,
                  "diagnostics": [d.message for d in result.diagnostics]}))
"""
PROBE_SOURCE = "model Probe\nwalk Go(x: token) { y = Llm.f(x) }\nflow { start -> Go -> done }\n"


def probe(cache_dir: Path) -> dict:
    """Parse in a fresh interpreter with WGC_CACHE_DIR=cache_dir; report whether the grammar was built."""
    env = {**os.environ, "WGC_CACHE_DIR": str(cache_dir)}
    done = subprocess.run([sys.executable, "-c", _PROBE], input=PROBE_SOURCE, capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def cache_file(cache_dir: Path) -> Path:
    (path,) = sorted(cache_dir.glob("walk-grammar-*.msgpack"))
    return path


@pytest.fixture
def warm_cache(tmp_path: Path) -> Path:
    """A cache dir holding a cache file written by a first, cold process."""
    cold = probe(tmp_path)
    assert cold == {"built": 1, "ok": True, "diagnostics": []}
    assert cache_file(tmp_path).stat().st_size > 0
    return tmp_path


def test_second_process_loads_the_cache(warm_cache: Path) -> None:
    before = cache_file(warm_cache).read_bytes()
    assert probe(warm_cache) == {"built": 0, "ok": True, "diagnostics": []}
    assert cache_file(warm_cache).read_bytes() == before


def _assert_rebuilt(cache_dir: Path, damaged: bytes) -> None:
    result = probe(cache_dir)
    assert result == {"built": 1, "ok": True, "diagnostics": []}
    fresh = cache_file(cache_dir).read_bytes()
    assert fresh != damaged
    blob = msgspec.msgpack.decode(fresh)
    assert isinstance(blob, dict) and {"key", "tables"} <= set(blob)
    assert probe(cache_dir)["built"] == 0  # and the rewritten file is good


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda good: b"not msgpack at all \x00\xff", id="garbage"),
        pytest.param(lambda good: good[: len(good) // 2], id="truncated"),
        pytest.param(lambda good: b"", id="empty"),
        pytest.param(lambda good: msgspec.msgpack.encode([1, 2, 3]), id="not-a-dict"),
        pytest.param(
            lambda good: msgspec.msgpack.encode({"key": msgspec.msgpack.decode(good)["key"], "tables": {"x": 1}}),
            id="right-key-wrong-tables",
        ),
    ],
)
def test_damaged_cache_is_ignored_and_rewritten(warm_cache: Path, damage) -> None:
    path = cache_file(warm_cache)
    damaged = damage(path.read_bytes())
    path.write_bytes(damaged)
    _assert_rebuilt(warm_cache, damaged)


def test_tampered_tables_with_the_right_key_are_rejected(warm_cache: Path) -> None:
    # The key is the grammar's hash, not the tables': a cache whose tables changed (a bit flip on
    # disk, another tool) must still be rejected rather than parse a different language.
    path = cache_file(warm_cache)
    blob = msgspec.msgpack.decode(path.read_bytes())
    tables = msgspec.msgpack.decode(blob["tables"])
    name_terminal = next(v for v in tables["memo"].values() if isinstance(v, dict) and v.get("name") == "NAME")
    name_terminal["pattern"]["value"] = "[a-z_][a-z0-9_]*"  # lower case only: `Probe` would not lex
    blob["tables"] = msgspec.msgpack.encode(tables)  # the digest is left as it was
    damaged = msgspec.msgpack.encode(blob)
    path.write_bytes(damaged)
    _assert_rebuilt(warm_cache, damaged)


@pytest.mark.parametrize("payload", [b"not a number", b"", "\u0663".encode()], ids=["words", "empty", "arabic-digit"])
def test_malformed_big_integer_in_cache_does_not_crash(warm_cache: Path, payload: bytes) -> None:
    """A big-integer extension that is not decimal digits, in tables whose digest matches."""
    import hashlib

    path = cache_file(warm_cache)
    blob = msgspec.msgpack.decode(path.read_bytes())
    tables = msgspec.msgpack.decode(blob["tables"], ext_hook=lambda code, data: msgspec.msgpack.Ext(code, data))
    tables["memo"]["bad"] = msgspec.msgpack.Ext(1, payload)
    blob["tables"] = msgspec.msgpack.encode(tables)
    blob["digest"] = hashlib.sha256(blob["tables"]).hexdigest()
    damaged = msgspec.msgpack.encode(blob)
    path.write_bytes(damaged)
    _assert_rebuilt(warm_cache, damaged)


def test_unwritable_cache_dir_only_costs_time(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert probe(blocker) == {"built": 1, "ok": True, "diagnostics": []}
