"""Where every key and value of a TOML text is: a map from key path to source spans.

Why a locator beside tomllib, and not tomlkit: tomllib (the standard library's TOML 1.0
parser) gives exact values and strict syntax errors with a line and column, but no positions
for what it accepts; tomlkit keeps formatting but exposes no positions either (they would have
to be recomputed from its private rendering), and it would be one more dependency. This
scanner runs only on text tomllib has accepted and records where each key and value is; the
values still come from tomllib, so the locator can never change what a file means, only where
a diagnostic points. A path it cannot place falls back to its nearest enclosing key.

Paths are tuples of table keys (str) and array indices (int): `("cluster", "hosts", 1, "ranks")`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from tomllib import TOMLDecodeError, loads

from wgc.lang.span import Span

KeyPath = tuple[str | int, ...]

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_DATETIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?([Zz]|[+-][0-9]{2}:[0-9]{2})?"
)
_SCALAR = re.compile(r"[^\s,\]\}#]+")
# Strings as tomllib accepts them, by their opening quotes: a closing `"""` may be followed by up
# to two quotes that belong to the string; escapes only in basic strings.
_STRINGS = {
    '"""': re.compile(r'"""(?:\\[\s\S]|[^\\])*?"""(?:"{0,2})'),
    "'''": re.compile(r"'''[\s\S]*?'''(?:'{0,2})"),
    '"': re.compile(r'"(?:\\[\s\S]|[^"\\\n])*"'),
    "'": re.compile(r"'[^'\n]*'"),
}
_WS = re.compile(r"[ \t]*")
_BLANK = re.compile(r"(?:[ \t\r\n]|#[^\n]*)*")  # whitespace, newlines and comments


@dataclass(frozen=True)
class Located:
    key: Span  # the key's own name (the last part of a dotted key); an array element: the element
    value: Span  # the value; a table from a header: the whole `[header]`


class _Stuck(Exception):
    """The scanner met text it does not expect (it only sees text tomllib accepted)."""


class _Scanner:
    def __init__(self, text: str, file: str) -> None:
        self.s = text
        self.i = 0
        self.file = file
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.found: dict[KeyPath, Located] = {}
        self.aot: dict[KeyPath, int] = {}  # array-of-tables path → elements so far

    def span(self, start: int, end: int) -> Span:
        (line, col), (end_line, end_col) = self._pos(start), self._pos(end)
        return Span(self.file, line, col, end_line, end_col)

    def _pos(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def record(self, path: KeyPath, key: Span, value: Span, *, implicit: bool = False) -> None:
        if not (implicit and path in self.found):
            self.found[path] = Located(key, value)

    def peek(self) -> str:
        return self.s[self.i : self.i + 1]

    def skip(self, pattern: re.Pattern[str]) -> str:
        """Move past `pattern` at the current position (the text matched), or get stuck."""
        m = pattern.match(self.s, self.i)
        if m is None:
            raise _Stuck(self.i)
        self.i = m.end()
        return m.group()

    def expect(self, token: str) -> None:
        if not self.s.startswith(token, self.i):
            raise _Stuck(self.i)
        self.i += len(token)

    def document(self) -> None:
        table: KeyPath = ()
        while True:
            self.skip(_BLANK)
            if self.i >= len(self.s):
                return
            if self.peek() == "[":
                table = self.header()
            else:
                self.keyval(table)  # never empty: a key is at least one character

    def header(self) -> KeyPath:
        start = self.i
        many = self.s.startswith("[[", self.i)
        self.i += 2 if many else 1
        self.skip(_WS)
        parts = self.key()
        self.expect("]]" if many else "]")
        path: KeyPath = ()
        for n, (name, p0, p1) in enumerate(parts):
            path = (*path, name)
            last = n == len(parts) - 1
            if last and many:  # a new element of an array of tables: the path goes on at its index
                index = self.aot.get(path, 0)
                self.aot[path] = index + 1
                self.record(path, self.span(p0, p1), self.span(parts[0][1], p1), implicit=True)
                path = (*path, index)
            elif path in self.aot:  # `[a.b]` after `[[a]]`: b is in a's latest element
                path = (*path, self.aot[path] - 1)
            if not last:
                self.record(path, self.span(p0, p1), self.span(p0, p1), implicit=True)
        self.record(path, self.span(parts[-1][1], parts[-1][2]), self.span(start, self.i))
        return path

    def keyval(self, table: KeyPath) -> None:
        parts = self.key()
        self.expect("=")
        self.skip(_WS)
        path = table
        for name, p0, p1 in parts[:-1]:
            path = (*path, name)
            self.record(path, self.span(p0, p1), self.span(p0, p1), implicit=True)
        path = (*path, parts[-1][0])
        start = self.i
        self.value(path)
        self.record(path, self.span(parts[-1][1], parts[-1][2]), self.span(start, self.i))

    def key(self) -> list[tuple[str, int, int]]:
        """A dotted key: each part's name and offsets; the whitespace after it is skipped."""
        parts = []
        while True:
            start = self.i
            if self.peek() in ('"', "'"):
                raw = self.string()
                parts.append((loads(f"k = {raw}")["k"], start, self.i))
            else:
                parts.append((self.skip(BARE_KEY), start, self.i))
            self.skip(_WS)
            if self.peek() != ".":
                return parts
            self.i += 1
            self.skip(_WS)

    def value(self, path: KeyPath) -> None:
        c = self.peek()
        if c in ('"', "'"):
            self.string()
        elif c == "[":
            self.sequence("[", "]", lambda n: self.element((*path, n)))
        elif c == "{":
            self.sequence("{", "}", lambda n: self.keyval(path))
        else:
            self.skip(_DATETIME if _DATETIME.match(self.s, self.i) else _SCALAR)

    def string(self) -> str:
        q = self.peek()
        return self.skip(_STRINGS[q * 3] if self.s.startswith(q * 3, self.i) else _STRINGS[q])

    def element(self, path: KeyPath) -> None:
        start = self.i
        self.value(path)
        self.record(path, self.span(start, self.i), self.span(start, self.i))

    def sequence(self, open_: str, close: str, item: Callable[[int], None]) -> None:
        """An array or an inline table: items separated by commas, blank text between them."""
        self.expect(open_)
        n = 0
        while True:
            self.skip(_BLANK)
            if self.peek() == close:
                self.i += 1
                return
            item(n)
            n += 1
            self.skip(_BLANK)
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != close:
                raise _Stuck(self.i)


def locate(text: str, file: str) -> dict[KeyPath, Located]:
    """The position of every key path in `text` (TOML tomllib accepted). Never raises."""
    scanner = _Scanner(text, file)
    try:
        scanner.document()
    except (_Stuck, RecursionError, TOMLDecodeError):
        pass  # keep what was found: the lookup falls back to enclosing keys
    return scanner.found
