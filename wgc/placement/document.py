"""A TOML file read into a tree of `Node`s: each value with the spans of its key and itself.

Values come from tomllib; positions from `locate`. Arrays become tuples of nodes, tables dicts
of nodes, so every later rule can point at the exact key or value it is about.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from tomllib import TOMLDecodeError, loads

from wgc.diag.diagnostic import Diagnostic
from wgc.lang.span import Span, point
from wgc.placement.locate import KeyPath, Located, locate

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


@dataclass(frozen=True)
class Node:
    """One TOML value: a scalar, a tuple of nodes (array) or a dict of nodes (table)."""

    value: object
    key: Span
    span: Span
    path: KeyPath = ()

    @property
    def name(self) -> str:
        """How the docs and messages write this value's place: `[components.llm.engine]`."""
        return f"[{dotted(self.path)}]" if self.path else "the top level"

    @property
    def is_table(self) -> bool:
        return isinstance(self.value, dict)

    @property
    def is_array(self) -> bool:
        return isinstance(self.value, tuple)

    def children(self) -> dict[str, Node]:
        """A table's entries (empty for anything else)."""
        return self.value if isinstance(self.value, dict) else {}

    def elements(self) -> tuple[Node, ...]:
        """An array's elements (empty for anything else)."""
        return self.value if isinstance(self.value, tuple) else ()

    def get(self, name: str) -> Node | None:
        return self.children().get(name)

    def items(self) -> list[tuple[str, Node]]:
        return list(self.children().items())


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            shown = part if _BARE.fullmatch(part) else f'"{part}"'
            out += f".{shown}" if out else shown
    return out


def file_start(file: str) -> Span:
    return point(file, 1, 1)


def read_document(path: Path, file: str, asked_at: Span | None = None) -> tuple[Node | None, list[Diagnostic]]:
    """Read and parse one file. `file` is the name spans carry; `asked_at` the `extends` that named it."""
    where = asked_at or file_start(file)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, [Diagnostic("P005", f"placement file `{file}` does not exist", where)]
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        return None, [Diagnostic("P005", f"cannot read placement file `{file}`: {reason}", where)]
    return parse_document(text, file)


def parse_document(text: str, file: str) -> tuple[Node | None, list[Diagnostic]]:
    try:
        data = loads(text)
    except TOMLDecodeError as err:
        return None, [_syntax_error(str(err), text, file)]
    except RecursionError:
        return None, [Diagnostic("P001", "the TOML is nested too deeply", file_start(file))]
    found = locate(text, file)
    root = Located(file_start(file), file_start(file))
    return _wrap(data, (), found, root), []


def _syntax_error(message: str, text: str, file: str) -> Diagnostic:
    m = _AT.search(message)
    if m:
        line, col = int(m.group(1)), int(m.group(2))
        message = message[: m.start()]
    else:  # "at end of document"
        line = text.count("\n") + 1
        col = len(text) - (text.rfind("\n") + 1) + 1
        message = message.replace("(at end of document)", "at the end of the file").strip()
    first = message[:1].lower() + message[1:]
    return Diagnostic("P001", f"invalid TOML: {first}", point(file, line, col))


def _wrap(value: object, path: KeyPath, found: dict[KeyPath, Located], parent: Located) -> Node:
    here = found.get(path, parent)
    if isinstance(value, dict):
        children = {k: _wrap(v, (*path, k), found, here) for k, v in value.items()}
        return Node(children, here.key, here.value, path)
    if isinstance(value, list):
        items = tuple(_wrap(v, (*path, i), found, here) for i, v in enumerate(value))
        return Node(items, here.key, here.value, path)
    return Node(value, here.key, here.value, path)
