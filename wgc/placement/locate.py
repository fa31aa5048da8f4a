"""Where every key and value of a TOML text is: a map from key path to source spans.

tomllib (the standard library's TOML 1.0 parser) gives exact values and strict syntax errors
with a line and column, but no positions for what it accepts. Positions come from tree-sitter's
TOML grammar, which parses the same text into a syntax tree with the place of every key and
value. Only the places are taken from it: the values still come from tomllib, so the locator can
never change what a file means, only where a diagnostic points. A path it cannot place falls
back to its nearest enclosing key.

Paths are tuples of table keys (str) and array indices (int): `("cluster", "hosts", 1, "ranks")`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from tomllib import TOMLDecodeError, loads

import tree_sitter
import tree_sitter_toml

from wgc.lang.span import Span

KeyPath = tuple[str | int, ...]
Syntax = tree_sitter.Node

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_KEYS = ("bare_key", "quoted_key", "dotted_key")


@dataclass(frozen=True)
class Located:
    key: Span  # the key's own name (the last part of a dotted key); an array element: the element
    value: Span  # the value; a table from a header: the whole `[header]`


class _Stuck(Exception):
    """The tree has an error here: what follows is not placed."""


@functools.cache
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_toml.language()))


class _Walk:
    """One pass over the syntax tree in document order, recording each key path's place."""

    def __init__(self, source: bytes, file: str) -> None:
        self.lines = source.split(b"\n")
        self.file = file
        self.found: dict[KeyPath, Located] = {}
        self.aot: dict[KeyPath, int] = {}  # array-of-tables path → elements so far

    def span(self, start: Syntax, end: Syntax | None = None) -> Span:
        (line, col), (end_line, end_col) = start.start_point, (end or start).end_point
        return Span(self.file, line + 1, self._column(line, col), end_line + 1, self._column(end_line, end_col))

    def _column(self, row: int, byte: int) -> int:
        """A 1-based column in characters from tree-sitter's column in bytes."""
        return len(self.lines[row][:byte].decode("utf-8", "replace")) + 1

    def record(self, path: KeyPath, key: Span, value: Span, *, implicit: bool = False) -> None:
        if not (implicit and path in self.found):
            self.found[path] = Located(key, value)

    def document(self, root: Syntax) -> None:
        for node in root.children:  # one at a time: what precedes an error is kept
            if node.type == "comment":
                continue
            if node.type == "pair":
                self.pair(node, ())
            elif node.type in ("table", "table_array_element"):
                path = self.header(node)
                for pair in _named(node)[1:]:
                    self.pair(pair, path)
            else:
                raise _Stuck

    def header(self, table: Syntax) -> KeyPath:
        many = table.type == "table_array_element"
        parts = _parts(_named(table)[0])
        path: KeyPath = ()
        for n, part in enumerate(parts):
            path = (*path, _name(part))
            last = n == len(parts) - 1
            if last and many:  # a new element of an array of tables: the path goes on at its index
                index = self.aot.get(path, 0)
                self.aot[path] = index + 1
                self.record(path, self.span(part), self.span(parts[0], part), implicit=True)
                path = (*path, index)
            elif path in self.aot:  # `[a.b]` after `[[a]]`: b is in a's latest element
                path = (*path, self.aot[path] - 1)
            if not last:
                self.record(path, self.span(part), self.span(part), implicit=True)
        opening, _, closing = table.children[:3]  # `[`, the key, `]` (or `[[`, `]]`)
        self.record(path, self.span(parts[-1]), self.span(opening, closing))
        return path

    def pair(self, pair: Syntax, table: KeyPath) -> None:
        named = _named(pair)
        if pair.type != "pair" or len(named) != 2:
            raise _Stuck
        parts, value = _parts(named[0]), named[1]
        path = table
        for part in parts[:-1]:
            path = (*path, _name(part))
            self.record(path, self.span(part), self.span(part), implicit=True)
        path = (*path, _name(parts[-1]))
        self.value(value, path)
        self.record(path, self.span(parts[-1]), self.span(value))

    def value(self, value: Syntax, path: KeyPath) -> None:
        if value.type == "array":
            for n, element in enumerate(_named(value)):
                self.value(element, (*path, n))
                self.record((*path, n), self.span(element), self.span(element))
        elif value.type == "inline_table":
            for pair in _named(value):
                self.pair(pair, path)


def _named(node: Syntax) -> list[Syntax]:
    """A node's named children but comments; an error or a missing token ends the walk."""
    out = []
    for child in node.children:
        if child.is_error or child.is_missing:
            raise _Stuck
        if child.is_named and child.type != "comment":
            out.append(child)
    return out


def _parts(key: Syntax) -> list[Syntax]:
    """A key's parts, outermost first: `a.b."c"` → a, b, "c"."""
    if key.type not in _KEYS:
        raise _Stuck
    return [p for child in _named(key) for p in _parts(child)] if key.type == "dotted_key" else [key]


def _name(part: Syntax) -> str:
    text = (part.text or b"").decode("utf-8")
    return loads(f"k = {text}")["k"] if part.type == "quoted_key" else text


def locate(text: str, file: str) -> dict[KeyPath, Located]:
    """The position of every key path in `text` (TOML tomllib accepted). Never raises."""
    source = text.encode("utf-8", "surrogatepass")
    walk = _Walk(source, file)
    try:
        walk.document(_parser().parse(source).root_node)
    except (_Stuck, RecursionError, TOMLDecodeError, UnicodeDecodeError):
        pass  # keep what was found: the lookup falls back to enclosing keys
    return walk.found
