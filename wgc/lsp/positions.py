"""Our spans ↔ LSP positions.

wgc spans (from lark) are 1-based lines and 1-based columns counted in code points, with an
exclusive end column. LSP positions are 0-based lines and 0-based columns counted in the
negotiated encoding's code units: UTF-16 unless the client asked for another, so "é" is one
unit and an emoji two. Lines are split on "\n" only, as the parser counts them (a "\r" before it
is the last character of the line, which no position a client sends ever points past).
"""

from __future__ import annotations

import bisect

from lsprotocol import types

from wgc.lang.span import Span

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"


def units(text: str, encoding: str = UTF16) -> int:
    """How many code units of `encoding` spell `text`."""
    if encoding == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    if encoding == UTF32:
        return len(text)
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _chars_for_units(line: str, count: int, encoding: str) -> int:
    """How many code points of `line` fit in its first `count` code units (a split character stays whole)."""
    if encoding == UTF32:
        return min(count, len(line))
    used = 0
    for i, ch in enumerate(line):
        used += units(ch, encoding)
        if used > count:
            return i
    return len(line)


class LineTable:
    """One document's lines, for converting positions both ways; every conversion clamps to the text."""

    def __init__(self, text: str, encoding: str = UTF16) -> None:
        self.lines = text.split("\n")
        self.encoding = encoding
        self._starts = [0]
        for line in self.lines[:-1]:
            self._starts.append(self._starts[-1] + len(line) + 1)

    def _line(self, index: int) -> str:
        return self.lines[index] if 0 <= index < len(self.lines) else ""

    def to_lsp(self, line: int, column: int) -> types.Position:
        """1-based line and code-point column → LSP position."""
        index = min(max(line - 1, 0), len(self.lines) - 1)
        text = self._line(index)
        chars = min(max(column - 1, 0), len(text))
        return types.Position(line=index, character=units(text[:chars], self.encoding))

    def from_lsp(self, position: types.Position) -> tuple[int, int]:
        """LSP position → 1-based line and code-point column."""
        index = min(max(position.line, 0), len(self.lines) - 1)
        chars = _chars_for_units(self._line(index), max(position.character, 0), self.encoding)
        return index + 1, chars + 1

    def to_range(self, span: Span) -> types.Range:
        start = self.to_lsp(span.line, span.column)
        end = self.to_lsp(span.end_line, span.end_column)
        if (end.line, end.character) < (start.line, start.character):
            end = start
        return types.Range(start=start, end=end)

    def end(self) -> types.Position:
        """The position just after the last character."""
        return types.Position(line=len(self.lines) - 1, character=units(self.lines[-1], self.encoding))

    def offset(self, line: int, column: int) -> int:
        """1-based line and column → offset into the text (code points), clamped."""
        index = min(max(line - 1, 0), len(self.lines) - 1)
        return self._starts[index] + min(max(column - 1, 0), len(self.lines[index]))

    def position(self, offset: int) -> tuple[int, int]:
        """Offset into the text (code points) → 1-based line and column, clamped: the inverse of `offset`."""
        offset = min(max(offset, 0), self._starts[-1] + len(self.lines[-1]))
        index = bisect.bisect_right(self._starts, offset) - 1
        return index + 1, offset - self._starts[index] + 1
