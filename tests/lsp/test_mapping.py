"""Mapping positions of an old text onto a new one through the edits the editor reported (wgc/lsp/mapping.py)."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types

from tests.lsp.conftest import replacing
from wgc.lang.span import Span
from wgc.lsp.mapping import Block, SpanMap, TextMap, cut, replaced, through, unchanged
from wgc.lsp.positions import UTF16, LineTable
from wgc.lsp.tokens import tokenize


def name_span(text: str, needle: str, word: str) -> Span:
    """The span (1-based line, code-point columns) of `word` inside the first line containing `needle`."""
    lines = text.split("\n")
    row = next(i for i, line in enumerate(lines) if needle in line)
    found = re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", needle)
    assert found is not None
    column = lines[row].index(needle) + found.start() + 1
    return Span("t.walk", row + 1, column, row + 1, column + len(word))


def edited(old: str, *pairs: tuple[str, str]) -> tuple[str, list[Block]]:
    """The new text after the editor's edits for `pairs`, and the blocks old and new share."""
    new, edits = replacing(old, *pairs)
    return new, through(unchanged(old), [(start, end, len(typed)) for start, end, typed in edits])


def moved(old: str, pairs: list[tuple[str, str]], needle: str, word: str) -> Span | None:
    new, blocks = edited(old, *pairs)
    return SpanMap(old, new, blocks).name(name_span(old, needle, word))


def text_map(old: str, *edits: tuple[int, int, str]) -> TextMap:
    new = old
    for start, end, typed in edits:
        new = new[:start] + typed + new[end:]
    return TextMap(through(unchanged(old), [(s, e, len(t)) for s, e, t in edits]), len(new))


# ---- offsets ------------------------------------------------------------------------------------


def test_an_insertion_shifts_what_follows_and_keeps_what_precedes() -> None:
    m = text_map("abc def ghi", (4, 4, "XY "))  # "abc XY def ghi"
    assert m.exact(0, 3) == (0, 3)
    assert m.exact(4, 7) == (7, 10)
    assert m.exact(8, 11) == (11, 14)
    assert m.exact(2, 6) is None  # across the insertion point: not in one unchanged block


def test_a_deletion_shifts_back_and_unmaps_what_it_removed() -> None:
    m = text_map("abc def ghi", (4, 8, ""))  # "abc ghi"
    assert m.exact(8, 11) == (4, 7)
    assert m.exact(4, 7) is None
    assert m.exact(5, 6) is None


def test_a_replacement_unmaps_only_its_own_characters() -> None:
    m = text_map("x = llm.decode(tok)", (8, 14, "sample"))
    assert m.exact(4, 7) == (4, 7)  # llm
    assert m.exact(8, 14) is None  # decode, rewritten
    assert m.exact(15, 18) == (15, 18)  # tok


def test_no_edit_maps_the_text_to_itself() -> None:
    text = "model m\nparam a: int = 1\n"
    m = TextMap(unchanged(text), len(text))
    assert m.blocks == [(0, 0, len(text))]
    assert m.exact(8, 13) == (8, 13)


def test_an_edit_that_puts_back_what_it_took_leaves_one_block() -> None:
    text = "model m\nparam a: int = 1\n"
    assert through(unchanged(text), [(10, 12, 0), (10, 10, 2)]) != unchanged(text)  # typed over: changed
    assert cut(unchanged(text), (10, 10, 0)) == unchanged(text)  # an empty edit changes nothing


def test_later_edits_are_in_the_text_the_earlier_ones_left() -> None:
    # "abc def ghi" → "abc def" (delete " ghi") → "X abc def" (insert at the new text's start)
    m = text_map("abc def ghi", (7, 11, ""), (0, 0, "X "))
    assert m.exact(4, 7) == (6, 9)
    assert m.exact(8, 11) is None
    assert m.blocks == [(0, 2, 7)]


def test_enclosing_range_widens_over_edits_at_its_ends_and_inside() -> None:
    old = "walk w() {\n    a = b\n}\n"
    new, blocks = edited(old, ("}\n", "    c = \n"))  # the closing brace replaced by a half-written line
    assert new == "walk w() {\n    a = b\n    c = \n"
    m = TextMap(blocks, len(new))
    start, end = old.index("walk"), old.index("}") + 1
    assert m.start(start) == 0
    assert m.end(end) == len(new) - 1  # up to the end of the replacement, before the unchanged final newline
    assert m.start(len(old)) <= m.end(len(old)) == len(new)


def test_a_whole_text_change_keeps_the_common_start_and_end() -> None:
    assert replaced("abc def ghi", "abc XY def ghi") == (4, 4, 3)
    assert replaced("abc", "abc") == (3, 3, 0)
    assert replaced("aaa", "aa") == (2, 3, 0)
    assert replaced("", "xy") == (0, 0, 2)
    old, new = "one two three", "one 2 three"
    m = TextMap(cut(unchanged(old), replaced(old, new)), len(new))
    assert m.exact(0, 3) == (0, 3) and m.exact(8, 13) == (6, 11) and m.exact(4, 7) is None


# ---- spans: lines and names ---------------------------------------------------------------------


OLD = "model m\nparam steps: int = 5 in 1..9\nwalk w() {\n    loop steps {\n        x = c.f(steps)\n    }\n}\n"


def test_lines_inserted_above_shift_every_span_below_by_that_many_lines() -> None:
    span = moved(OLD, [("", "# one\n# two\n# three\n")], "x = c.f(steps)", "steps")
    before = name_span(OLD, "x = c.f(steps)", "steps")
    assert span == before._replace(line=before.line + 3, end_line=before.end_line + 3)


def test_lines_deleted_above_shift_back_and_the_deleted_lines_unmap() -> None:
    deleted = [("param steps: int = 5 in 1..9\n", "")]
    assert moved(OLD, deleted, "param steps", "steps") is None
    before = name_span(OLD, "loop steps", "steps")
    assert moved(OLD, deleted, "loop steps", "steps") == before._replace(line=before.line - 1, end_line=before.line - 1)


def test_a_multi_line_replacement_unmaps_its_lines_and_keeps_the_rest() -> None:
    pairs = [("    loop steps {\n        x = c.f(steps)\n    }\n", "    y = \n    z = q(\n")]
    assert moved(OLD, pairs, "loop steps", "steps") is None
    assert moved(OLD, pairs, "x = c.f(steps)", "steps") is None
    assert moved(OLD, pairs, "param steps", "steps") == name_span(OLD, "param steps", "steps")
    assert moved(OLD, pairs, "walk w", "w") == name_span(OLD, "walk w", "w")


def test_edits_in_several_places_map_everything_between_them() -> None:
    pairs = [("", "# header\n"), ("= 5 in", "= 6 in"), ("    }\n}\n", "    }\n")]
    new, _ = edited(OLD, *pairs)
    assert moved(OLD, pairs, "param steps", "steps") == name_span(new, "param steps", "steps")
    assert moved(OLD, pairs, "x = c.f(steps)", "steps") == name_span(new, "x = c.f(steps)", "steps")
    assert moved(OLD, pairs, "x = c.f(steps)", "x") == name_span(new, "x = c.f(steps)", "x")


def test_a_name_typed_over_or_quoted_no_longer_maps() -> None:
    assert moved(OLD, [("x = c.f(steps)", "x = c.f(steps2)")], "c.f(steps)", "steps") is None
    assert moved(OLD, [("x = c.f(steps)", "x = c.f(_steps)")], "c.f(steps)", "steps") is None
    assert moved(OLD, [("x = c.f(steps)", 'x = c.f("steps)')], "c.f(steps)", "steps") is None
    # A change next to the name but not of it keeps it.
    kept = moved(OLD, [("x = c.f(steps)", "x = c.f(steps")], "c.f(steps)", "steps")
    assert kept == name_span(OLD, "c.f(steps)", "steps")


def test_non_ascii_text_before_a_name_on_an_edited_line() -> None:
    """Columns are code points inside the map; the LSP range of the result counts UTF-16 units."""
    old = 'model m\nparam voice: str = "é" param n: int = 3\n'
    pairs = [('"é"', '"🎉é"')]  # an emoji typed before `n`, on its line
    new, _ = edited(old, *pairs)
    span = moved(old, pairs, "param n", "n")
    assert span is not None
    assert new.split("\n")[span.line - 1][span.column - 1:span.end_column - 1] == "n"
    rng = LineTable(new, UTF16).to_range(span)
    character = len('param voice: str = "🎉é" param '.encode("utf-16-le")) // 2
    assert rng == types.Range(start=types.Position(line=1, character=character),
                              end=types.Position(line=1, character=character + 1))
    assert character == len('param voice: str = "🎉é" param ') + 1  # the emoji is two units


def test_non_ascii_edit_after_a_name_keeps_its_columns() -> None:
    old = "walk w() {\n    x = c.f(a) # ok\n}\n"
    assert moved(old, [("# ok", "# ü🎉 still ok")], "c.f(a)", "a") == name_span(old, "c.f(a)", "a")


def test_enclosing_span_of_a_block_whose_closing_brace_was_deleted() -> None:
    old = OLD + "flow {\n    start -> w -> done\n}\n"
    new, blocks = edited(old, ("        x = c.f(steps)\n    }\n", "        x = c.f(steps)\n"))  # the loop's `}` gone
    first, last = name_span(old, "walk w", "walk").line, old.split("\n").index("}") + 1
    walk = Span("t.walk", first, 1, last, 2)
    got = SpanMap(old, new, blocks).enclosing(walk)
    assert (got.line, got.column) == (walk.line, walk.column)
    assert (got.end_line, got.end_column) == (walk.end_line - 1, walk.end_column)


# ---- properties ---------------------------------------------------------------------------------

text = st.text(alphabet=st.sampled_from(list("ab c\n{}é🎉_x")), max_size=60)
splices = st.lists(st.tuples(st.floats(0, 1), st.integers(0, 8), text), max_size=6)


@given(text, splices)
def test_blocks_are_text_both_sides_share_in_order(old: str, splice: list[tuple[float, int, str]]) -> None:
    new, edits = old, []
    for where, width, typed in splice:
        start = int(where * len(new))
        end = min(len(new), start + width)
        edits.append((start, end, len(typed)))
        new = new[:start] + typed + new[end:]
    m = TextMap(through(unchanged(old), edits), len(new))
    last_a = last_b = 0
    for a0, b0, n in m.blocks:
        assert n > 0 and a0 >= last_a and b0 >= last_b
        assert old[a0:a0 + n] == new[b0:b0 + n]
        last_a, last_b = a0 + n, b0 + n
    # What no edit touched is all kept: the blocks cover all but the characters edits removed.
    assert sum(n for _, _, n in m.blocks) >= len(old) - sum(end - start for start, end, _ in edits)
    for start in range(len(old) + 1):
        for end in range(start, min(start + 4, len(old)) + 1):
            placed = m.exact(start, end)
            if placed is not None:
                assert new[placed[0]:placed[1]] == old[start:end]
            if start < end:
                assert 0 <= m.start(start) <= m.end(end) <= len(new)
        if start < len(old):
            assert m.start(start) <= m.start(start + 1) and m.end(start) <= m.end(start + 1)


BAGEL = (Path(__file__).resolve().parents[2] / "models" / "bagel.walk").read_text()
BAGEL_NAMES = [t for t in tokenize(BAGEL) if t.kind == "name"]
splice = st.tuples(st.integers(0, len(BAGEL)), st.integers(0, 40), st.sampled_from(["", "}", "\n", "x", "é🎉 ", "# a\nb\n"]))


@given(st.lists(splice, min_size=1, max_size=6))
def test_every_name_that_maps_reads_the_same_whole_name(edits: list[tuple[int, int, str]]) -> None:
    new = BAGEL
    reported = []
    for at, width, put in edits:
        at = min(at, len(new))
        end = min(len(new), at + width)
        reported.append((at, end, len(put)))
        new = new[:at] + put + new[end:]
    spans = SpanMap(BAGEL, new, through(unchanged(BAGEL), reported))
    new_names = {(t.line, t.column, t.text) for t in tokenize(new) if t.kind == "name"}
    kept = 0
    for token in BAGEL_NAMES:
        placed = spans.name(token.span("t.walk"))
        if placed is not None:
            kept += 1
            assert placed.line == placed.end_line
            assert (placed.line, placed.column, token.text) in new_names
            assert placed.end_column - placed.column == len(token.text)
    assert kept >= len(BAGEL_NAMES) - sum(len(put) + width + 2 for _, width, put in edits)
