"""The words of a source text with their positions, without a parse.

The AST keeps most names as plain strings on a node whose span covers the whole construct
(`fork cfg_text from main` is one span), and a document being typed rarely parses at all. Both
the index (where exactly is `main`?) and completion (what precedes the cursor?) read this token
list instead. It follows the grammar's terminals closely enough for that: strings and comments
are single tokens, so nothing inside them is ever taken for a name.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from wgc.lang.span import Span

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:[^"\\\n]|\\.)*"?)
  | (?P<comment>\#[^\n]*)
  | (?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?[KMBT]?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>->|==|!=|<=|>=|\.\.|[^\sA-Za-z0-9_"\#])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # "name", "number", "string", "comment" or "punct"
    text: str
    start: int  # offsets into the text, in code points
    end: int
    line: int  # 1-based, like Span
    column: int

    def span(self, file: str) -> Span:
        return Span(file, self.line, self.column, self.line, self.column + (self.end - self.start))


def tokenize(text: str) -> list[Token]:
    out: list[Token] = []
    line, line_start = 1, 0
    for m in _TOKEN.finditer(text):
        start = m.start()
        newlines = text.count("\n", line_start, start)
        if newlines:
            line += newlines
            line_start = text.rfind("\n", 0, start) + 1
        kind = m.lastgroup or "punct"
        out.append(Token(kind, m.group(), start, m.end(), line, start - line_start + 1))
    return out


class Tokens:
    """A token list searchable by position: the tokens inside a span, the token at an offset."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.all = tokenize(text)
        self._starts = [t.start for t in self.all]
        self._line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]

    def offset(self, line: int, column: int) -> int:
        index = min(max(line - 1, 0), len(self._line_starts) - 1)
        return self._line_starts[index] + max(column - 1, 0)

    def within(self, span: Span) -> list[Token]:
        """The code tokens (no comments) that lie inside `span`."""
        lo = bisect.bisect_left(self._starts, self.offset(span.line, span.column))
        hi = bisect.bisect_left(self._starts, self.offset(span.end_line, span.end_column))
        return [t for t in self.all[lo:hi] if t.kind != "comment"]

    def before(self, offset: int) -> list[Token]:
        """Every token that starts before `offset`."""
        return self.all[: bisect.bisect_left(self._starts, offset)]

    def at(self, offset: int) -> Token | None:
        """The token containing `offset`, or ending right at it (a cursor just after a word is on it)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0 and self.all[i].start <= offset <= self.all[i].end:
            return self.all[i]
        return None

    def name(self, span: Span | None, name: str, skip: int = 0, after: str | None = None, last: bool = False) -> Span | None:
        """Where `name` is written inside `span`.

        `skip` passes over leading tokens (the keyword of `param NAME`); `after` starts looking past
        the first token reading `after` (`from` in `fork a from b`); `last` takes the last match.
        """
        if span is None:
            return None
        toks = self.within(span)[skip:]
        if after is not None:
            i = next((k for k, t in enumerate(toks) if t.text == after), None)
            if i is None:
                return None
            toks = toks[i + 1:]
        found = [t for t in toks if t.kind == "name" and t.text == name]
        if not found:
            return None
        return (found[-1] if last else found[0]).span(span.file)
