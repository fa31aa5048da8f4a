"""Where every key and value of a TOML text is: a map from key path to source spans.

Why a locator beside tomllib, and not tomlkit: tomllib (the standard library's TOML 1.0
parser) gives exact values and strict syntax errors with a line and column, but no positions
for what it accepts; tomlkit keeps formatting but exposes no positions either (they would have
to be recomputed from its private rendering), and it would be one more dependency. The
locator parses text tomllib has accepted with lark (grammar/toml.lark, a position on every tree
node) and walks the tree; the values still come from tomllib, so the locator can never change
what a file means, only where a diagnostic points. A path it cannot place falls back to its
nearest enclosing key.

Paths are tuples of table keys (str) and array indices (int): `("cluster", "hosts", 1, "ranks")`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib.resources import files
from tomllib import TOMLDecodeError, loads
from typing import TYPE_CHECKING

from wgc.lang.span import Span

if TYPE_CHECKING:
    from lark import Lark, Token, Tree

KeyPath = tuple[str | int, ...]

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# What ends a text that breaks off (tomllib rejected it), in the order tried: the end, a closing
# bracket, then whatever completes a key or value. lark names the grammar's quoted tokens itself.
_CLOSERS = ("$END", "RSQB", "RBRACE", "_AOT_CLOSE", "EQUAL", "SCALAR", "BARE_KEY")


@dataclass(frozen=True)
class Located:
    key: Span  # the key's own name (the last part of a dotted key); an array element: the element
    value: Span  # the value; a table from a header: the whole `[header]`


@functools.cache
def _parser() -> Lark:
    """Built on the first placement read: lark and its tables cost nothing to a run that reads none."""
    from lark import Lark

    grammar = files("wgc.grammar").joinpath("toml.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def _parse(text: str) -> Tree:
    """The tree of `text`; a text tomllib rejects is parsed up to its error, then closed there with
    empty tokens placed past its end (`_Walk.whole` tells what they complete)."""
    from lark import Token
    from lark.exceptions import UnexpectedInput

    try:
        return _parser().parse(text)
    except UnexpectedInput as err:
        parser, end = err.interactive_parser, len(text)
        while (name := next(n for n in _CLOSERS if n in parser.accepts())) != "$END":
            parser.feed_token(Token(name, "", end + 1, 0, 0, 0, 0, end + 1))
        return parser.feed_eof()


class _Walk:
    def __init__(self, text: str, file: str) -> None:
        self.end = len(text)
        self.file = file
        self.found: dict[KeyPath, Located] = {}
        self.aot: dict[KeyPath, int] = {}  # array-of-tables path → elements so far

    def span(self, at: Token | Tree) -> Span:
        m = at if isinstance(at, str) else at.meta  # a token is a str
        return Span(self.file, m.line, m.column, m.end_line, m.end_column)

    def whole(self, at: Token | Tree) -> bool:
        """In the text: no closing token `_parse` added to a broken one."""
        return (at.end_pos if isinstance(at, str) else at.meta.end_pos) <= self.end

    def record(self, path: KeyPath, key: Span, value: Span, *, implicit: bool = False) -> None:
        if not (implicit and path in self.found):
            self.found[path] = Located(key, value)

    def document(self, tree: Tree) -> None:
        table: KeyPath = ()
        for item in tree.children:
            if item.data == "keyval":
                self.keyval(table, item)
            elif self.whole(item):  # a header the text breaks off in is not located
                table = self.header(item)

    def header(self, header: Tree) -> KeyPath:
        key = header.children[0]
        parts = key.children
        path: KeyPath = ()
        for n, part in enumerate(parts):
            path = (*path, _name(part))
            last = n == len(parts) - 1
            if last and header.data == "table_array":  # a new element of an array of tables: at its index
                index = self.aot.get(path, 0)
                self.aot[path] = index + 1
                self.record(path, self.span(part), self.span(key), implicit=True)
                path = (*path, index)
            elif path in self.aot:  # `[a.b]` after `[[a]]`: b is in a's latest element
                path = (*path, self.aot[path] - 1)
            if not last:
                self.record(path, self.span(part), self.span(part), implicit=True)
        self.record(path, self.span(parts[-1]), self.span(header))
        return path

    def keyval(self, table: KeyPath, keyval: Tree) -> None:
        key, value = keyval.children
        *dotted, last = key.children
        path = table
        for part in dotted:
            path = (*path, _name(part))
            self.record(path, self.span(part), self.span(part), implicit=True)
        path = (*path, _name(last))
        self.value(path, value)
        if self.whole(value):
            self.record(path, self.span(last), self.span(value))

    def value(self, path: KeyPath, value: Token | Tree) -> None:
        if isinstance(value, str):
            return
        for n, item in enumerate(value.children):
            if value.data == "inline_table":
                self.keyval(path, item)
                continue
            self.value((*path, n), item)
            if self.whole(item):
                self.record((*path, n), self.span(item), self.span(item))


def _name(part: Token) -> str:
    """A key part's name: a quoted one as tomllib reads it."""
    return loads(f"k = {part}")["k"] if part.type == "STRING" else str(part)


def locate(text: str, file: str) -> dict[KeyPath, Located]:
    """The position of every key path in `text` (TOML tomllib accepted). Never raises."""
    from lark.exceptions import LarkError

    walk = _Walk(text, file)
    try:
        walk.document(_parse(text))
    except (LarkError, RecursionError, TOMLDecodeError, StopIteration):
        pass  # keep what was found: the lookup falls back to enclosing keys
    return walk.found
