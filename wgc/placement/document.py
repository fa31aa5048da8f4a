"""A placement file and its `extends` bases read into one tree of `Node`s: each value with the
spans of its key and itself.

Values come from tomllib; positions from `locate`. Arrays become tuples of nodes, tables dicts
of nodes, so every later rule can point at the exact key or value it is about.

`extends = "base.toml"` builds a placement on another file instead of copying it. The base is
resolved relative to the file that names it, recursively. Tables merge key by key (the extending
file wins); any other value, arrays and arrays of tables included, is replaced whole. Every merged
value keeps the span of the file it came from. A cycle, or a chain deeper than `MAX_EXTENDS_DEPTH`,
is an error at the `extends` that closes it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from tomllib import TOMLDecodeError, loads

from wgc.diag.diagnostic import Diagnostic, Note
from wgc.lang.span import Span, point
from wgc.placement.locate import BARE_KEY, KeyPath, Located, locate
from wgc.placement.tables import MAX_EXTENDS_DEPTH

_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
Chain = tuple[tuple[Path, "Node"], ...]  # the files extending this one, each with its `extends`


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


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            shown = part if BARE_KEY.fullmatch(part) else f'"{part}"'
            out += f".{shown}" if out else shown
    return out


def read_document(path: Path, file: str, asked_at: Span | None = None, text: str | None = None
                  ) -> tuple[Node | None, list[Diagnostic]]:
    """Read and parse one file. `file` is the name spans carry; `asked_at` the `extends` that named it;
    `text` the file's text when the caller holds it (an editor's unsaved copy), else it is read."""
    start = point(file, 1, 1)
    try:
        text = path.read_text(encoding="utf-8") if text is None else text
    except FileNotFoundError:
        return None, [Diagnostic("P005", f"placement file `{file}` does not exist", asked_at or start)]
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        return None, [Diagnostic("P005", f"cannot read placement file `{file}`: {reason}", asked_at or start)]
    try:
        data = loads(text)
    except TOMLDecodeError as err:
        return None, [_syntax_error(str(err), text, file)]
    except RecursionError:
        return None, [Diagnostic("P001", "the TOML is nested too deeply", start)]
    return _wrap(data, (), locate(text, file), Located(start, start)), []


def _syntax_error(message: str, text: str, file: str) -> Diagnostic:
    m = _AT.search(message)
    if m:
        line, col = int(m.group(1)), int(m.group(2))
        message = message[: m.start()]
    else:  # "at end of document"
        line, col = text.count("\n") + 1, len(text) - (text.rfind("\n") + 1) + 1
        message = message.replace("(at end of document)", "at the end of the file").strip()
    return Diagnostic("P001", f"invalid TOML: {message[:1].lower()}{message[1:]}", point(file, line, col))


def _wrap(value: object, path: KeyPath, found: dict[KeyPath, Located], parent: Located) -> Node:
    """`value` as a node; a path the locator did not place takes its enclosing key's spans."""
    here = found.get(path, parent)
    if isinstance(value, dict):
        value = {k: _wrap(v, (*path, k), found, here) for k, v in value.items()}
    elif isinstance(value, list):
        value = tuple(_wrap(v, (*path, i), found, here) for i, v in enumerate(value))
    return Node(value, here.key, here.value, path)


def load_with_bases(path: Path, text: str | None = None, held: Mapping[str, str] | None = None
                    ) -> tuple[Node | None, tuple[str, ...], list[Diagnostic]]:
    """The merged tree of `path` and its bases, the files read or asked for (the base first), and
    errors. `text`: the top file's text when the caller holds it; `held`: the texts of other files
    the caller holds (an editor's open copies, saved or not), by `identity`; any other base is read
    from disk, relative to the file that names it."""
    diags: list[Diagnostic] = []
    sources: list[str] = []
    node = _load(path, str(path), None, (), diags, sources, held or {}, text)
    return node, tuple(sources), diags


def _load(path: Path, file: str, asked: Node | None, chain: Chain, diags: list[Diagnostic],
          sources: list[str], held: Mapping[str, str], text: str | None = None) -> Node | None:
    if text is None and held:
        text = held.get(identity(path))
    doc, errors = read_document(path, file, asked.span if asked else None, text)
    diags.extend(errors)
    if doc is None:
        sources.append(file)  # asked for, though unread: an editor re-checks when it appears
        return None
    ext = doc.get("extends")
    own = Node({k: v for k, v in doc.children().items() if k != "extends"}, doc.key, doc.span)
    problem = _check_extends(ext, path, chain) if ext is not None else None
    diags.extend([problem] if problem else [])
    base = None
    if ext is not None and problem is None:
        base_file = os.path.normpath(str(Path(file).parent / str(ext.value)))
        base = _load(path.parent / str(ext.value), base_file, ext, (*chain, (path, ext)), diags, sources, held)
    sources.append(file)
    return merge(base, own) if base is not None else own


def _check_extends(ext: Node, path: Path, chain: Chain) -> Diagnostic | None:
    if not isinstance(ext.value, str) or not ext.value:
        return Diagnostic("P003", "`extends` takes the path of a base file, as a string", ext.span)
    if identity(path.parent / ext.value) in [identity(p) for p, _ in chain] + [identity(path)]:
        return Diagnostic("P006", f"`extends` cycle: `{ext.value}` already extends this file", ext.span,
                          ("a base file must not extend, directly or through others, a file built on it",),
                          tuple(Note(f"`{p.name}` extends `{n.value}` here", n.span) for p, n in chain))
    if len(chain) >= MAX_EXTENDS_DEPTH:
        return Diagnostic("P006", f"`extends` chain deeper than {MAX_EXTENDS_DEPTH} files", ext.span)
    return None


def identity(path: Path) -> str:
    """A file's resolved path: how `extends` cycles and the held texts of `load_with_bases` compare files."""
    try:
        return str(path.resolve())
    except OSError:
        return os.path.abspath(path)


def merge(base: Node, over: Node) -> Node:
    """`over` on top of `base`: tables merge key by key, anything else is replaced."""
    if not (base.is_table and over.is_table):
        return over
    merged = dict(base.children())
    for key, value in over.children().items():
        merged[key] = merge(merged[key], value) if key in merged else value
    return Node(merged, over.key, over.span, over.path)
