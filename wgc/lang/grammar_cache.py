"""Load grammar/walk.lark once per process, through a per-user on-disk cache.

Building the LALR tables takes ~0.3 s; loading them from the cache ~0.05 s,
which keeps a cold `wgc check` well under the 300 ms goal. lark's own cache
uses pickle, which wgc never reads, so the tables are stored as msgpack keyed
by the sha256 of the grammar and the lark version. A cache file that fails to
load or verify is ignored and rewritten; it can never change what is parsed
beyond what the grammar itself says, because the key is checked on load.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import lark
import msgspec
from lark import Lark
from lark.grammar import Rule
from lark.lexer import TerminalDef

from wgc import settings

_BIG_INT = 1  # msgpack ext type of an integer past 64 bits (regex widths can be): its decimal digits
# No propagate_positions: parser.py's builder runs inside the parser and takes spans from reduce_spans.
_OPTIONS: dict[str, Any] = {"propagate_positions": False, "maybe_placeholders": True}


def grammar_text() -> str:
    return resources.files("wgc.grammar").joinpath("walk.lark").read_text(encoding="utf-8")


def _encode(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    if isinstance(obj, int) and not isinstance(obj, bool) and obj >= 2**63:
        return msgspec.msgpack.Ext(_BIG_INT, str(obj).encode())
    return obj


def _decode_ext(code: int, data: memoryview) -> int:
    if code != _BIG_INT:
        raise ValueError(f"unknown msgpack extension {code}")
    return int(bytes(data).decode("ascii"))  # ValueError on anything but digits


# Big integers come back through the decoder's extension hook, in C: no Python walk over the
# tables (a recursive walk was a tenth of a cold `wgc check`).
_TABLES = msgspec.msgpack.Decoder(ext_hook=_decode_ext)


def _cache_path(key: str) -> Path:
    return settings.cache_dir() / f"walk-grammar-{key[:20]}.msgpack"


def _read_cache(path: Path, key: str) -> dict[str, Any] | None:
    """The cached tables, or None when the file is missing, damaged, stale or edited."""
    try:
        blob = msgspec.msgpack.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    if not isinstance(blob, dict) or blob.get("key") != key:
        return None
    tables = blob.get("tables")
    if not isinstance(tables, bytes) or blob.get("digest") != _digest(tables):
        return None  # the tables changed on disk: they might describe another language
    try:
        decoded = _TABLES.decode(tables)
    except (ValueError, TypeError, msgspec.DecodeError):
        return None
    return decoded if isinstance(decoded, dict) else None


def _digest(tables: bytes) -> str:
    return hashlib.sha256(tables).hexdigest()


def _write_cache(path: Path, key: str, tables: dict[str, Any]) -> None:
    """Write atomically; a cache we cannot write only costs start-up time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".walk-grammar-")
        with os.fdopen(fd, "wb") as f:
            encoded = msgspec.msgpack.encode(_encode(tables))
            f.write(msgspec.msgpack.encode({"key": key, "digest": _digest(encoded), "tables": encoded}))
        os.replace(tmp, path)
    except OSError:
        pass


def build_parser(transformer: object | None, lexer_callbacks: dict[str, Any]) -> Lark:
    text = grammar_text()
    # The options are part of the serialised parser, so they are part of the key too.
    key = hashlib.sha256(f"{lark.__version__}\0{sorted(_OPTIONS.items())}\0{text}".encode()).hexdigest()
    path = _cache_path(key)
    tables = _read_cache(path, key)
    if tables is not None:
        try:
            return Lark._load_from_dict(
                tables["data"], tables["memo"], transformer=transformer, lexer_callbacks=lexer_callbacks
            )
        except Exception:  # noqa: BLE001 - a stale or damaged cache is rebuilt, never fatal
            pass
    fresh = Lark(text, parser="lalr", lexer="contextual", **_OPTIONS)
    data, memo = fresh.memo_serialize([TerminalDef, Rule])
    _write_cache(path, key, {"data": data, "memo": memo})
    return Lark._load_from_dict(data, memo, transformer=transformer, lexer_callbacks=lexer_callbacks)


@functools.cache
def terminal_descriptions() -> dict[str, str]:
    """Terminal name → how a syntax error should show it (`}` rather than RBRACE)."""
    fresh_names = {
        "NAME": "a name",
        "INT": "an integer",
        "FLOAT": "a number",
        "SIZE": "a size such as 7B",
        "STRING": "a string",
        "COMPARE": "a comparison",
        "MUL_OP": "`*`, `/` or `%`",
        "$END": "end of file",
    }
    parser = _description_parser()
    out = dict(fresh_names)
    for term in parser.terminals:
        if term.name not in out and term.pattern.type == "str":
            out[term.name] = f"`{term.pattern.value}`"
    return out


@functools.cache
def _description_parser() -> Lark:
    return build_parser(None, {})
