"""Output lines with the source's comments and blank lines woven back in.

The printer hands over one *line unit* at a time (a one-line declaration or
statement, a block header up to its `{`, a closing `}` with any `yield`), in
source order, with the source offsets the unit came from. Comments are not in
the AST, so they are placed by position alone:

- a comment before a unit (or inside its source range, e.g. between the lines
  of a call split over several lines) is printed on its own line above it;
- a comment after a unit's last token, on the same source line, stays at the
  end of the unit's printed line, two spaces after the code.

Each comment is consumed once, in order, so none can be lost or duplicated.
A blank line is printed before an element only if the source had at least one
blank line there (`user`), always (`force`), or never (`none`).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Literal

from wgc.lang.parser import Comment
from wgc.lang.span import Span

Blank = Literal["none", "user", "force"]

_INDENT = "    "
_TRAILING_GAP = "  "
_BRACES = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|[{}]')


class SourceMap:
    """Offsets, line numbers and braces of the original text."""

    def __init__(self, text: str) -> None:
        self.text = text
        lines = text.split("\n")
        self._line_starts = [0]
        for line in lines[:-1]:
            self._line_starts.append(self._line_starts[-1] + len(line) + 1)
        # _blank_before[n] = how many of lines 1..n are whitespace only.
        self._blank_before = [0]
        for line in lines:
            self._blank_before.append(self._blank_before[-1] + (not line.strip()))

    def offset(self, line: int, column: int) -> int:
        return self._line_starts[line - 1] + column - 1

    def start(self, span: Span) -> int:
        return self.offset(span.line, span.column)

    def end(self, span: Span) -> int:
        return self.offset(span.end_line, span.end_column)

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self._line_starts, offset)

    def blank_between(self, after_line: int, before_line: int) -> bool:
        """Is some line strictly between the two whitespace only?"""
        if before_line - after_line < 2:
            return False
        return self._blank_before[before_line - 1] > self._blank_before[after_line]

    def braces(self, start: int) -> tuple[int, int]:
        """Offsets of the first `{` at or after `start` and of its matching `}`.

        Headers hold no braces of their own, only strings and comments may, and
        those are skipped whole.
        """
        depth, open_at = 0, -1
        for m in _BRACES.finditer(self.text, start):
            ch = m.group()
            if ch == "{":
                open_at = m.start() if depth == 0 else open_at
                depth += 1
            elif ch == "}" and depth > 0:
                depth -= 1
                if depth == 0:
                    return open_at, m.start()
        raise ValueError(f"no braced block after offset {start}")


@dataclass(frozen=True)
class _Placed:
    offset: int
    line: int
    text: str


class Layout:
    """Collects output lines; owns the comment queue and the blank-line decisions."""

    def __init__(self, source: SourceMap, comments: tuple[Comment, ...]) -> None:
        self.source = source
        placed = [_Placed(source.start(c.span), c.span.line, c.text.rstrip()) for c in comments]
        self._comments = sorted(placed, key=lambda c: c.offset)
        self._offsets = [c.offset for c in self._comments]
        self._next = 0
        self._last_line = 0
        self.lines: list[str] = []

    def has_comments_between(self, start: int, end: int) -> bool:
        i = bisect.bisect_right(self._offsets, start, lo=self._next)
        return i < len(self._offsets) and self._offsets[i] < end

    def comments_before(self, offset: int, indent: int, blank: Blank) -> Blank:
        """Print, each on its own line, every pending comment that starts before `offset`.

        Returns the blank rule for whatever is printed next.
        """
        while self._next < len(self._comments) and self._comments[self._next].offset < offset:
            c = self._comments[self._next]
            self._next += 1
            self._put(indent, c.text, c.line, c.line, blank)
            blank = "user"
        return blank

    def unit(self, indent: int, text: str, start: int, end: int, blank: Blank, comment_indent: int | None = None) -> None:
        """Print one line of code that came from source offsets [start, end)."""
        first_line, last_line = self.source.line_of(start), self.source.line_of(end)
        ci = indent if comment_indent is None else comment_indent
        blank = self.comments_before(start, ci, blank)
        while self._next < len(self._comments) and self._comments[self._next].offset < end:
            # Inside the unit's own source range: hoisted above it, as if written there.
            self._put(ci, self._comments[self._next].text, first_line, first_line, blank)
            self._next += 1
            blank = "user"
        self._put(indent, text + self._trailing(end, last_line), first_line, last_line, blank)

    def finish(self) -> str:
        self.comments_before(len(self.source.text) + 1, 0, "user")
        return "\n".join(self.lines) + "\n" if self.lines else ""

    def _trailing(self, end: int, last_line: int) -> str:
        if self._next >= len(self._comments):
            return ""
        c = self._comments[self._next]
        if c.line != last_line or self.source.text[end : c.offset].strip():
            return ""
        self._next += 1
        return _TRAILING_GAP + c.text

    def _put(self, indent: int, text: str, first_line: int, last_line: int, blank: Blank) -> None:
        wanted = blank == "force" or (blank == "user" and self.source.blank_between(self._last_line, first_line))
        if wanted and self.lines:
            self.lines.append("")
        self.lines.append(_INDENT * indent + text)
        self._last_line = max(self._last_line, last_line)
