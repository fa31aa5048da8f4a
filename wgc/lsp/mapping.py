"""Positions in an old text → the same characters in a new one, through the edits made since.

While a document does not parse, hover, definition, references and the outline answer from the
last analysis that did; its spans are in that older text. `TextMap` pairs the two texts as a list
of unchanged blocks (old offset, new offset, length, in code points, as Span columns count) and
everything between two blocks is a changed region, in which nothing is mapped.

The blocks come from a diff in two passes, lines then the words of the lines that changed:

- lines keep the sequences short and a match meaningful (a character diff of a whole document
  is slow and happily pairs stray spaces and brackets); words within the changed lines then let
  an edit in the middle of a line unmap only what was typed over, so the names before and after
  it on that line keep their place.
- each pass is a patience diff: the common first and last elements are set aside (the usual
  state, one edit in one place, costs one comparison of lines and nothing more), then elements
  that occur exactly once on each side and in the same order anchor the match, and the gaps
  between anchors are diffed the same way. A gap with no such element is left to
  `difflib.SequenceMatcher` when it is small (`SMALL_GAP`: it pairs repeated lines such as `}`
  and blank ones there) and is otherwise a changed region.

Why not SequenceMatcher over the whole text: with autojunk (on from 200 elements) it will not
start a match at a line that makes up 1% of the document, and a model repeats `}`, blank lines
and `dtype = bf16` that often: on a 2,000-line model with edits every ten lines it left 80% of
the text unmatched. Without autojunk its work on repetitive text grows with the cube of the
length (2,000 lines alternating between two texts: 85 s). Every step here is counted against
`WORK_BUDGET`; when it runs out the gaps left are changed regions, which is never wrong, only
less helpful, and the map of any text pair is bounded in time.

`SpanMap` applies it to spans: a name maps only if its characters lie wholly in one unchanged
block and it is still a whole name token in the new text (typing `llm2` over `llm`, or a quote
before it, unmaps it); a construct's range maps to the range enclosing the same text and every
edit inside it.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from difflib import SequenceMatcher

from wgc.lang.span import Span
from wgc.lsp.positions import LineTable
from wgc.lsp.tokens import Tokens

Block = tuple[int, int, int]  # old start, new start, length: elements (or text) that read the same in both

# A gap without anchors goes to SequenceMatcher when (old elements × new elements) is at most this;
# its work there grows faster than that product (50 × 50 repetitive elements: about 2 ms).
SMALL_GAP = 2_500
# Steps one map may take: elements looked at, plus twice the product above for each small gap
# diffed. About 0.4 µs each, so any text pair maps in about 0.1 s at most; 200 edits across a
# 2,000-line model take a few percent of it.
WORK_BUDGET = 200_000

_WORD = re.compile(r"\w+|[^\w]")


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self, steps: int) -> bool:
        if steps > self.left:
            self.left = 0
            return False
        self.left -= steps
        return True


def _anchors(a: Sequence[str], alo: int, ahi: int, b: Sequence[str], blo: int, bhi: int) -> list[tuple[int, int]]:
    """Elements found exactly once in a[alo:ahi] and in b[blo:bhi], the longest run in the same order."""
    seen_a: dict[str, int] = {}
    for i in range(alo, ahi):
        seen_a[a[i]] = -1 if a[i] in seen_a else i
    seen_b: dict[str, int] = {}
    for j in range(blo, bhi):
        if seen_a.get(b[j], -1) >= 0:
            seen_b[b[j]] = -1 if b[j] in seen_b else j
    pairs = [(seen_a[x], j) for x, j in seen_b.items() if j >= 0]
    pairs.sort()
    # Longest increasing run of new positions (patience sorting), read back through predecessors.
    tops: list[int] = []
    top_at: list[int] = []
    before: list[int] = []
    for k, (_, j) in enumerate(pairs):
        pile = bisect.bisect_left(tops, j)
        before.append(top_at[pile - 1] if pile else -1)
        if pile == len(tops):
            tops.append(j)
            top_at.append(k)
        else:
            tops[pile], top_at[pile] = j, k
    run: list[tuple[int, int]] = []
    k = top_at[-1] if top_at else -1
    while k >= 0:
        run.append(pairs[k])
        k = before[k]
    run.reverse()
    return run


def _match(a: Sequence[str], b: Sequence[str], budget: _Budget) -> list[Block]:
    """Runs of equal elements of a and b, in order (indices, not offsets)."""
    out: list[Block] = []
    todo = [(0, len(a), 0, len(b))]
    while todo:
        alo, ahi, blo, bhi = todo.pop()
        n = 0
        while alo + n < ahi and blo + n < bhi and a[alo + n] == b[blo + n]:
            n += 1
        if n:
            out.append((alo, blo, n))
            alo, blo = alo + n, blo + n
        n = 0
        while ahi - n > alo and bhi - n > blo and a[ahi - n - 1] == b[bhi - n - 1]:
            n += 1
        if n:
            out.append((ahi - n, bhi - n, n))
            ahi, bhi = ahi - n, bhi - n
        if alo == ahi or blo == bhi:
            continue
        if (ahi - alo) * (bhi - blo) <= SMALL_GAP:
            if budget.spend(2 * (ahi - alo) * (bhi - blo)):
                matcher = SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
                out.extend((alo + i, blo + j, size) for i, j, size in matcher.get_matching_blocks() if size)
            continue
        if not budget.spend(ahi - alo + bhi - blo):
            continue
        anchors = _anchors(a, alo, ahi, b, blo, bhi)
        if not anchors:
            continue
        for i, j in anchors:
            out.append((i, j, 1))
            todo.append((alo, i, blo, j))
            alo, blo = i + 1, j + 1
        todo.append((alo, ahi, blo, bhi))
    out.sort()
    return out


def _lines(text: str) -> list[str]:
    """The lines of `text`, each with its "\n" (the parser's lines: "\r" is part of a line)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _starts(pieces: Sequence[str], at: int = 0) -> list[int]:
    starts = [at]
    for piece in pieces:
        starts.append(starts[-1] + len(piece))
    return starts


def _blocks(a: Sequence[str], b: Sequence[str], a0: int, b0: int, budget: _Budget,
            changed: list[tuple[int, int, int, int]] | None = None) -> list[Block]:
    """Equal runs of pieces of text as offsets (pieces of old from offset a0, of new from b0); with
    `changed`, also collect each replaced stretch (old start, old end, new start, new end)."""
    a_at, b_at = _starts(a, a0), _starts(b, b0)
    out: list[Block] = []
    i = j = 0
    for ai, bj, n in [*_match(a, b, budget), (len(a), len(b), 0)]:
        if changed is not None and ai > i and bj > j:
            changed.append((a_at[i], a_at[ai], b_at[j], b_at[bj]))
        if n:
            out.append((a_at[ai], b_at[bj], a_at[ai + n] - a_at[ai]))
        i, j = ai + n, bj + n
    return out


def equal_blocks(old: str, new: str, budget: int | None = None) -> list[Block]:
    """The text old and new share, in order, adjacent blocks merged."""
    spend = _Budget(WORK_BUDGET if budget is None else budget)
    changed: list[tuple[int, int, int, int]] = []
    blocks = _blocks(_lines(old), _lines(new), 0, 0, spend, changed)
    for a0, a1, b0, b1 in changed:  # lines replaced: pair their words
        blocks += _blocks(_WORD.findall(old, a0, a1), _WORD.findall(new, b0, b1), a0, b0, spend)
    blocks.sort()
    merged: list[Block] = []
    for a0, b0, n in blocks:
        if merged and merged[-1][0] + merged[-1][2] == a0 and merged[-1][1] + merged[-1][2] == b0:
            merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + n)
        else:
            merged.append((a0, b0, n))
    return merged


class TextMap:
    """Offsets in `old` → offsets in `new`, for the characters no edit touched."""

    def __init__(self, old: str, new: str) -> None:
        self.old_length, self.new_length = len(old), len(new)
        self.blocks = equal_blocks(old, new)
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
    """Spans of an analysis of `old` → spans in `new` (both 1-based line and code-point column)."""

    def __init__(self, old: str, new: str, new_tokens: Tokens | None = None) -> None:
        self.text = TextMap(old, new)
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
