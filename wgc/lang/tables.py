"""The walk grammar's LALR tables as a JSON file beside the parser module.

lark's standalone generator prints its serialized tables (the dicts `Lark._load_from_dict` reads
back) as Python literals in the module it writes. Compiling that 190 KB literal was about 90 ms of
every cold `wgc check` run without cached bytecode; `json.loads` reads the same data in a few
milliseconds, and a JSON file is plain data (no code, no pickle) whatever wrote it.

JSON differs from lark's dicts in two ways, both put back here exactly:
- object keys are strings: lark keys the memo (rules and terminals by number), the parse table's
  states, each state's actions and the token numbering by int;
- arrays are lists: lark writes a state's action as a (kind, argument) pair and a rule's
  `empty_indices` as a tuple.
`encode` refuses data with int keys or tuples anywhere else, so a lark release that serializes its
tables differently stops `python -m wgc.lang.regenerate` instead of writing tables that decode wrong.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TABLES = Path(__file__).with_name("walk_parser.json")

# Where lark's serialized tables hold int keys and tuples (paths of dict keys; "*" is any key).
_INT_KEYED = {("memo",), ("data", "parser", "parser", "states"), ("data", "parser", "parser", "states", "*"),
              ("data", "parser", "parser", "tokens")}
_TUPLES = {("data", "parser", "parser", "states", "*", "*"), ("memo", "*", "options", "empty_indices")}


def encode(data: dict[str, Any], memo: dict[int, Any], grammar_sha256: str, lark_version: str) -> str:
    """The JSON text of lark's serialized tables, with the grammar they were built from."""
    _check_shape({"data": data, "memo": memo}, ())
    document = {"grammar_sha256": grammar_sha256, "lark": lark_version, "data": data, "memo": memo}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=True) + "\n"


def decode(text: str) -> tuple[dict[str, Any], dict[int, Any], str]:
    """(data, memo, grammar sha256) from `encode`'s text, with lark's int keys and tuples back."""
    document = json.loads(text)
    memo = {int(k): v for k, v in document["memo"].items()}
    for entry in memo.values():
        options = entry.get("options")
        if isinstance(options, dict) and "empty_indices" in options:
            options["empty_indices"] = tuple(options["empty_indices"])
    data = document["data"]
    table = data["parser"]["parser"]
    table["tokens"] = {int(k): v for k, v in table["tokens"].items()}
    table["states"] = {int(state): {int(token): tuple(action) for token, action in actions.items()}
                       for state, actions in table["states"].items()}
    return data, memo, document["grammar_sha256"]


def read_tables(path: Path = TABLES) -> tuple[dict[str, Any], dict[int, Any]]:
    """The tables `Lark_StandAlone` builds its parser from (walk_parser.py calls this at import)."""
    data, memo, _ = decode(path.read_text(encoding="utf-8"))
    return data, memo


def _check_shape(value: Any, path: tuple[str, ...]) -> None:
    """Raise ValueError where `value` holds an int key or a tuple that `decode` would not restore."""
    if isinstance(value, tuple) and not _matches(path, _TUPLES):
        raise ValueError(f"lark's tables hold a tuple at {'/'.join(path)}: wgc/lang/tables.py cannot restore it")
    if isinstance(value, dict):
        int_keys = _matches(path, _INT_KEYED)
        for key, item in value.items():
            if isinstance(key, int) != int_keys or not isinstance(key, (int, str)):
                raise ValueError(f"lark's tables hold key {key!r} at {'/'.join(path) or '/'}: "
                                 "wgc/lang/tables.py expects " + ("int" if int_keys else "str") + " keys there")
            _check_shape(item, (*path, str(key)))
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_shape(item, (*path, "[]"))


def _matches(path: tuple[str, ...], patterns: set[tuple[str, ...]]) -> bool:
    return any(len(p) == len(path) and all(a in ("*", b) for a, b in zip(p, path)) for p in patterns)
