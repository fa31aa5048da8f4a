"""Positions in an old text → the same characters in a new one, through the edits made since.

While a document does not parse, hover, definition, references and the outline answer from the
last analysis that did; its spans are in that older text. The editor says exactly what changed
(incremental sync: each change is a range of the text it applies to and the text put there), so
the server keeps, per document, the unchanged blocks from that older text to the current one
(old offset, new offset, length, in code points, as Span columns count) and cuts them with each
edit as it arrives: everything between two blocks is a changed region, in which nothing is mapped.
A change that replaces the whole text (allowed by the protocol, and how a document is opened
again) keeps only the two texts' common start and end.

`SpanMap` applies it to spans: a name maps only if its characters lie wholly in one unchanged
block and it is still a whole name token in the new text (typing `llm2` over `llm`, or a quote
before it, unmaps it); a construct's range maps to the range enclosing the same text and every
edit inside it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from wgc.lang.span import Span
from wgc.lsp.positions import LineTable
from wgc.lsp.tokens import Tokens

Block = tuple[int, int, int]  # old start, new start, length: text that reads the same in both
Edit = tuple[int, int, int]  # start, end (offsets in the text it applies to), length of the text put there


def unchanged(text: str) -> list[Block]:
    """The blocks of a text against itself."""
    return [(0, 0, len(text))] if text else []


def cut(blocks: list[Block], edit: Edit) -> list[Block]:
    """`blocks` (old text → text) after `edit` replaced text[start:end]: what it covered is gone, what
    follows moves by the change in length."""
    start, end, length = edit
    shift = length - (end - start)
    out: list[Block] = []
    for a0, b0, n in blocks:
        b1 = b0 + n
        if b0 < start:
            _append(out, (a0, b0, min(b1, start) - b0))
        if b1 > end:
            keep = max(b0, end)
            _append(out, (a0 + keep - b0, keep + shift, b1 - keep))
    return out


def _append(blocks: list[Block], block: Block) -> None:
    """Add `block`, merged into the last one where both texts run on (an edit that put back what it took)."""
    if blocks:
        a0, b0, n = blocks[-1]
        if a0 + n == block[0] and b0 + n == block[1]:
            blocks[-1] = (a0, b0, n + block[2])
            return
    blocks.append(block)


def replaced(old: str, new: str) -> Edit:
    """The one edit that turns `old` into `new`: all but their common start and end."""
    limit = min(len(old), len(new))
    head = 0
    while head < limit and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < limit - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return head, len(old) - tail, len(new) - head - tail


def through(blocks: list[Block], edits: Iterable[Edit]) -> list[Block]:
    for edit in edits:
        blocks = cut(blocks, edit)
    return blocks


class TextMap:
    """Offsets in the old text → offsets in the new one, for the characters no edit touched."""

    def __init__(self, blocks: list[Block], new_length: int) -> None:
        self.new_length = new_length
        self.blocks = blocks
        self._old_starts = [blk[0] for blk in self.blocks]

    def exact(self, start: int, end: int) -> tuple[int, int] | None:
        """old[start:end] → its place in new, if no edit touched it (all of it in one unchanged block)."""
        i = bisect.bisect_right(self._old_starts, start) - 1
        if i < 0:
            return None
        a0, b0, n = self.blocks[i]
        if end > a0 + n or end < start:
            return None
        return b0 + start - a0, b0 + end - a0

    def start(self, offset: int) -> int:
        """Where a range starting at `offset` starts in new; in a changed region, where that region starts."""
        i = bisect.bisect_right(self._old_starts, offset) - 1
        if i < 0:
            return 0
        a0, b0, n = self.blocks[i]
        return b0 + min(offset - a0, n)

    def end(self, offset: int) -> int:
        """Where a range ending at `offset` (exclusive) ends in new; in a changed region, where that region ends."""
        j = bisect.bisect_left(self._old_starts, offset)
        if j > 0:
            a0, b0, n = self.blocks[j - 1]
            if offset <= a0 + n:
                return b0 + offset - a0
        return self.blocks[j][1] if j < len(self.blocks) else self.new_length


class SpanMap:
    """Spans of an analysis of `old` → spans in `new` (both 1-based line and code-point column), through
    `blocks`, the text the two share."""

    def __init__(self, old: str, new: str, blocks: list[Block], new_tokens: Tokens | None = None) -> None:
        self.text = TextMap(blocks, len(new))
        self.old_lines, self.new_lines = LineTable(old), LineTable(new)
        self.new_tokens = new_tokens if new_tokens is not None else Tokens(new)

    def _offsets(self, span: Span) -> tuple[int, int]:
        return (self.old_lines.offset(span.line, span.column), self.old_lines.offset(span.end_line, span.end_column))

    def _span(self, file: str, start: int, end: int) -> Span:
        return Span(file, *self.new_lines.position(start), *self.new_lines.position(end))

    def name(self, span: Span) -> Span | None:
        """A name's span in new, or None if an edit touched it or it no longer reads as that whole name."""
        placed = self.text.exact(*self._offsets(span))
        if placed is None:
            return None
        start, end = placed
        token = self.new_tokens.at(start)
        if token is None or token.kind != "name" or token.start != start or token.end != end:
            return None
        return self._span(span.file, start, end)

    def enclosing(self, span: Span) -> Span:
        """A construct's span in new: the same text, widened over any edit inside or at its ends."""
        start, end = self._offsets(span)
        return self._span(span.file, self.text.start(start), max(self.text.end(end), self.text.start(start)))
