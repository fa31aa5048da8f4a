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
from dataclasses import dataclass
from tomllib import TOMLDecodeError, loads

from wgc.lang.span import Span

KeyPath = tuple[str | int, ...]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_DATETIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?([Zz]|[+-][0-9]{2}:[0-9]{2})?"
)
_SCALAR = re.compile(r"[^\s,\]\}#]+")


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

    # ---- positions ------------------------------------------------------------

    def span(self, start: int, end: int) -> Span:
        line, col = self._pos(start)
        end_line, end_col = self._pos(end)
        return Span(self.file, line, col, end_line, end_col)

    def _pos(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def record(self, path: KeyPath, key: Span, value: Span, *, implicit: bool = False) -> None:
        if implicit and path in self.found:
            return
        self.found[path] = Located(key, value)

    # ---- lexical helpers ------------------------------------------------------

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def ws(self) -> None:
        while self.peek() in (" ", "\t"):
            self.i += 1

    def blank(self) -> None:
        """Skip whitespace, newlines and comments."""
        while True:
            c = self.peek()
            if c in (" ", "\t", "\r", "\n"):
                self.i += 1
            elif c == "#":
                nl = self.s.find("\n", self.i)
                self.i = len(self.s) if nl < 0 else nl
            else:
                return

    def expect(self, token: str) -> None:
        if not self.s.startswith(token, self.i):
            raise _Stuck(self.i)
        self.i += len(token)

    # ---- grammar --------------------------------------------------------------

    def document(self) -> None:
        table: KeyPath = ()
        while True:
            self.blank()
            if self.i >= len(self.s):
                return
            before = self.i
            if self.peek() == "[":
                table = self.header()
            else:
                self.keyval(table)
            if self.i == before:
                raise _Stuck(self.i)

    def header(self) -> KeyPath:
        start = self.i
        many = self.s.startswith("[[", self.i)
        self.i += 2 if many else 1
        self.ws()
        parts = self.key()
        self.ws()
        self.expect("]]" if many else "]")
        path: KeyPath = ()
        for n, (name, p0, p1) in enumerate(parts):
            path = (*path, name)
            last = n == len(parts) - 1
            if last and many:
                index = self.aot.get(path, 0)
                self.aot[path] = index + 1
                self.record(path, self.span(p0, p1), self.span(parts[0][1], p1), implicit=True)
                path = (*path, index)
            elif path in self.aot:
                path = (*path, self.aot[path] - 1)
            if not last:
                self.record(path, self.span(p0, p1), self.span(p0, p1), implicit=True)
        self.record(path, self.span(parts[-1][1], parts[-1][2]), self.span(start, self.i))
        return path

    def keyval(self, table: KeyPath) -> None:
        parts = self.key()
        self.ws()
        self.expect("=")
        self.ws()
        path = table
        for name, p0, p1 in parts[:-1]:
            path = (*path, name)
            self.record(path, self.span(p0, p1), self.span(p0, p1), implicit=True)
        path = (*path, parts[-1][0])
        start = self.i
        self.value(path)
        self.record(path, self.span(parts[-1][1], parts[-1][2]), self.span(start, self.i))

    def key(self) -> list[tuple[str, int, int]]:
        parts = [self.simple_key()]
        self.ws()
        while self.peek() == ".":
            self.i += 1
            self.ws()
            parts.append(self.simple_key())
            self.ws()
        return parts

    def simple_key(self) -> tuple[str, int, int]:
        start = self.i
        if self.peek() in ('"', "'"):
            self.string()
            raw = self.s[start : self.i]
            name = loads(f"k = {raw}")["k"]
            return name, start, self.i
        m = _BARE_KEY.match(self.s, self.i)
        if m is None:
            raise _Stuck(self.i)
        self.i = m.end()
        return m.group(), start, self.i

    def value(self, path: KeyPath) -> None:
        c = self.peek()
        if c in ('"', "'"):
            self.string()
        elif c == "[":
            self.array(path)
        elif c == "{":
            self.inline_table(path)
        else:
            m = _DATETIME.match(self.s, self.i) or _SCALAR.match(self.s, self.i)
            if m is None:
                raise _Stuck(self.i)
            self.i = m.end()

    def string(self) -> None:
        q = self.peek()
        if self.s.startswith(q * 3, self.i):
            self.i += 3
            while not self.s.startswith(q * 3, self.i):
                if self.i >= len(self.s):
                    raise _Stuck(self.i)
                self.i += 2 if (q == '"' and self.peek() == "\\") else 1
            self.i += 3
            extra = 0
            while extra < 2 and self.peek() == q:  # `""""` ends with a quote inside the string
                self.i += 1
                extra += 1
            return
        self.i += 1
        while self.peek() != q:
            if self.peek() in ("", "\n"):
                raise _Stuck(self.i)
            self.i += 2 if (q == '"' and self.peek() == "\\") else 1
        self.i += 1

    def array(self, path: KeyPath) -> None:
        self.expect("[")
        index = 0
        while True:
            self.blank()
            if self.peek() == "]":
                self.i += 1
                return
            start = self.i
            self.value((*path, index))
            element = self.span(start, self.i)
            self.record((*path, index), element, element)
            index += 1
            self.blank()
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != "]":
                raise _Stuck(self.i)

    def inline_table(self, path: KeyPath) -> None:
        self.expect("{")
        while True:
            self.blank()
            if self.peek() == "}":
                self.i += 1
                return
            self.keyval(path)
            self.blank()
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != "}":
                raise _Stuck(self.i)


def locate(text: str, file: str) -> dict[KeyPath, Located]:
    """The position of every key path in `text` (TOML tomllib accepted). Never raises."""
    scanner = _Scanner(text, file)
    try:
        scanner.document()
    except (_Stuck, RecursionError, TOMLDecodeError):
        pass  # keep what was found: the lookup falls back to enclosing keys
    return scanner.found
