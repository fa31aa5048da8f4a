"""Mapping positions of an old text onto a new one through the edits in between (wgc/lsp/mapping.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types

from wgc.lang.span import Span
from wgc.lsp.mapping import SpanMap, TextMap
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


def moved(old: str, new: str, needle: str, word: str) -> Span | None:
    return SpanMap(old, new).name(name_span(old, needle, word))


# ---- offsets ------------------------------------------------------------------------------------


def test_an_insertion_shifts_what_follows_and_keeps_what_precedes() -> None:
    m = TextMap("abc def ghi", "abc XY def ghi")
    assert m.exact(0, 3) == (0, 3)
    assert m.exact(4, 7) == (7, 10)
    assert m.exact(8, 11) == (11, 14)
    assert m.exact(2, 6) is None  # spans the insertion


def test_a_deletion_shifts_back_and_unmaps_what_it_removed() -> None:
    m = TextMap("abc def ghi", "abc ghi")
    assert m.exact(8, 11) == (4, 7)
    assert m.exact(4, 7) is None
    assert m.exact(5, 6) is None


def test_a_replacement_unmaps_only_its_own_characters() -> None:
    m = TextMap("x = llm.decode(tok)", "x = llm.sample(tok)")
    assert m.exact(4, 7) == (4, 7)  # llm
    assert m.exact(8, 14) is None  # decode, rewritten
    assert m.exact(15, 18) == (15, 18)  # tok


def test_identical_texts_map_to_themselves() -> None:
    text = "model m\nparam a: int = 1\n"
    m = TextMap(text, text)
    assert m.blocks == [(0, 0, len(text))]
    assert m.exact(8, 13) == (8, 13)


def test_enclosing_range_widens_over_edits_at_its_ends_and_inside() -> None:
    old = "walk w() {\n    a = b\n}\n"
    new = "walk w() {\n    a = b\n    c = \n"  # the closing brace replaced by a half-written line
    m = TextMap(old, new)
    start, end = old.index("walk"), old.index("}") + 1
    assert m.start(start) == 0
    assert m.end(end) == len(new) - 1  # up to the end of the replacement, before the unchanged final newline
    assert m.start(len(old)) <= m.end(len(old)) == len(new)


# ---- spans: lines and names ---------------------------------------------------------------------


OLD = "model m\nparam steps: int = 5 in 1..9\nwalk w() {\n    loop steps {\n        x = c.f(steps)\n    }\n}\n"


def test_lines_inserted_above_shift_every_span_below_by_that_many_lines() -> None:
    new = "# one\n# two\n# three\n" + OLD
    span = moved(OLD, new, "x = c.f(steps)", "steps")
    before = name_span(OLD, "x = c.f(steps)", "steps")
    assert span == before._replace(line=before.line + 3, end_line=before.end_line + 3)


def test_lines_deleted_above_shift_back_and_the_deleted_lines_unmap() -> None:
    new = OLD.replace("param steps: int = 5 in 1..9\n", "")
    assert moved(OLD, new, "param steps", "steps") is None
    before = name_span(OLD, "loop steps", "steps")
    assert moved(OLD, new, "loop steps", "steps") == before._replace(line=before.line - 1, end_line=before.line - 1)


def test_a_multi_line_replacement_unmaps_its_lines_and_keeps_the_rest() -> None:
    new = OLD.replace("    loop steps {\n        x = c.f(steps)\n    }\n", "    y = \n    z = q(\n")
    assert moved(OLD, new, "loop steps", "steps") is None
    assert moved(OLD, new, "x = c.f(steps)", "steps") is None
    assert moved(OLD, new, "param steps", "steps") == name_span(OLD, "param steps", "steps")
    assert moved(OLD, new, "walk w", "w") == name_span(OLD, "walk w", "w")


def test_edits_in_several_places_map_everything_between_them() -> None:
    new = "# header\n" + OLD.replace("= 5 in", "= 6 in").replace("    }\n}\n", "    }\n")
    assert moved(OLD, new, "param steps", "steps") == name_span(new, "param steps", "steps")
    assert moved(OLD, new, "x = c.f(steps)", "steps") == name_span(new, "x = c.f(steps)", "steps")
    assert moved(OLD, new, "x = c.f(steps)", "x") == name_span(new, "x = c.f(steps)", "x")


def test_a_name_typed_over_or_quoted_no_longer_maps() -> None:
    assert moved(OLD, OLD.replace("x = c.f(steps)", "x = c.f(steps2)"), "c.f(steps)", "steps") is None
    assert moved(OLD, OLD.replace("x = c.f(steps)", "x = c.f(_steps)"), "c.f(steps)", "steps") is None
    assert moved(OLD, OLD.replace("x = c.f(steps)", 'x = c.f("steps)'), "c.f(steps)", "steps") is None
    # A change next to the name but not of it keeps it.
    kept = moved(OLD, OLD.replace("x = c.f(steps)", "x = c.f(steps"), "c.f(steps)", "steps")
    assert kept == name_span(OLD, "c.f(steps)", "steps")


def test_non_ascii_text_before_a_name_on_an_edited_line() -> None:
    """Columns are code points inside the map; the LSP range of the result counts UTF-16 units."""
    old = 'model m\nparam voice: str = "é" param n: int = 3\n'
    new = 'model m\nparam voice: str = "🎉é" param n: int = 3\n'  # an emoji typed before `n`, on its line
    span = moved(old, new, "param n", "n")
    assert span is not None
    assert new.split("\n")[span.line - 1][span.column - 1:span.end_column - 1] == "n"
    rng = LineTable(new, UTF16).to_range(span)
    character = len('param voice: str = "🎉é" param '.encode("utf-16-le")) // 2
    assert rng == types.Range(start=types.Position(line=1, character=character),
                              end=types.Position(line=1, character=character + 1))
    assert character == len('param voice: str = "🎉é" param ') + 1  # the emoji is two units


def test_non_ascii_edit_after_a_name_keeps_its_columns() -> None:
    old = "walk w() {\n    x = c.f(a) # ok\n}\n"
    new = "walk w() {\n    x = c.f(a) # ü🎉 still ok\n}\n"
    assert moved(old, new, "c.f(a)", "a") == name_span(old, "c.f(a)", "a")


def test_enclosing_span_of_a_block_whose_closing_brace_was_deleted() -> None:
    old = OLD + "flow {\n    start -> w -> done\n}\n"
    new = old.replace("        x = c.f(steps)\n    }\n", "        x = c.f(steps)\n")  # the loop's `}` gone
    first, last = name_span(old, "walk w", "walk").line, old.split("\n").index("}") + 1
    walk = Span("t.walk", first, 1, last, 2)
    got = SpanMap(old, new).enclosing(walk)
    assert (got.line, got.column) == (walk.line, walk.column)
    assert (got.end_line, got.end_column) == (walk.end_line - 1, walk.end_column)


# ---- properties ---------------------------------------------------------------------------------

text = st.text(alphabet=st.sampled_from(list("ab c\n{}é🎉_x")), max_size=60)


@given(text, text)
def test_blocks_are_text_both_sides_share_in_order(old: str, new: str) -> None:
    m = TextMap(old, new)
    last_a = last_b = 0
    for a0, b0, n in m.blocks:
        assert n > 0 and a0 >= last_a and b0 >= last_b
        assert old[a0:a0 + n] == new[b0:b0 + n]
        last_a, last_b = a0 + n, b0 + n
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
    for at, cut, put in edits:
        at = min(at, len(new))
        new = new[:at] + put + new[at + cut:]
    spans = SpanMap(BAGEL, new)
    new_names = {(t.line, t.column, t.text) for t in tokenize(new) if t.kind == "name"}
    kept = 0
    for token in BAGEL_NAMES:
        placed = spans.name(token.span("t.walk"))
        if placed is not None:
            kept += 1
            assert placed.line == placed.end_line
            assert (placed.line, placed.column, token.text) in new_names
            assert placed.end_column - placed.column == len(token.text)
    assert kept >= len(BAGEL_NAMES) - sum(len(put) + cut + 2 for _, cut, put in edits)


def test_with_the_work_budget_spent_what_is_left_stays_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    from wgc.lsp import mapping

    new = OLD.replace("= 5 in", "= 6 in").replace("x = c.f(steps)", "x = c.g(steps)")  # two edits, lines apart
    assert moved(OLD, new, "loop steps", "steps") == name_span(OLD, "loop steps", "steps")
    monkeypatch.setattr(mapping, "WORK_BUDGET", 0)
    assert moved(OLD, new, "loop steps", "steps") is None  # between the edits: no longer diffed
    # Common ends cost nothing: what precedes the first edit and follows the last still maps.
    assert moved(OLD, new, "param steps", "steps") == name_span(OLD, "param steps", "steps")
    assert moved(OLD, new, "c.f(steps)", "steps") == name_span(new, "c.g(steps)", "steps")


class _Spy:
    """Counts the work a map does (steps spent from its budget) and the gaps it hands SequenceMatcher:
    bounded work is checked by counting, not by timing."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from wgc.lsp import mapping

        self.spent = 0
        self.gaps: list[tuple[int, int]] = []
        spend = mapping._Budget.spend

        def counted(budget: object, steps: int) -> bool:
            ok = spend(budget, steps)
            self.spent += steps if ok else 0
            return ok

        real = mapping.SequenceMatcher

        def matcher(isjunk: object, a: Sequence[str], b: Sequence[str], autojunk: bool = True) -> object:
            self.gaps.append((len(a), len(b)))
            return real(isjunk, a, b, autojunk=autojunk)

        monkeypatch.setattr(mapping._Budget, "spend", counted)
        monkeypatch.setattr(mapping, "SequenceMatcher", matcher)


def test_repetitive_text_is_mapped_within_the_work_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """SequenceMatcher alone took 85 s on the first pair (and left most of a real model unmatched
    with autojunk); here it only ever sees small gaps, and what is matched reads the same.
    Timings: bench/lsp_mapping.py."""
    from wgc.lsp import mapping

    pairs = [("a\n" * 2000, "a\nb\n" * 1000), ("}\n\n" * 1000, "\n}\n" * 1000 + "x"),
             ("a" * 5000, "ab" * 2500), ("x = " + "ab " * 20000, "x = " + "ba " * 20000)]
    for old, new in pairs:
        spy = _Spy(monkeypatch)
        m = TextMap(old, new)
        assert all(a * b <= mapping.SMALL_GAP for a, b in spy.gaps), spy.gaps  # never a pathological diff
        assert all(old[a:a + n] == new[b:b + n] for a, b, n in m.blocks)


def test_a_two_thousand_line_document_with_200_edits_maps_fully_on_a_fraction_of_the_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured: about 1 ms for one edit, 12 ms for 200 (docs/lsp.md). Counted here: the budget is
    far from spent, so every unchanged stretch is matched."""
    from wgc.lsp import mapping

    long = "".join(BAGEL.replace("bagel", f"bagel{k}") for k in range(15))
    assert long.count("\n") >= 2000
    rows = long.split("\n")
    for k in range(0, len(rows), 10):  # an edit every ten lines: 200 places
        rows[k] = rows[k][: len(rows[k]) // 2] + "{" + rows[k][len(rows[k]) // 2:]
    edited = "\n".join(rows)
    spy = _Spy(monkeypatch)
    m = TextMap(long, edited)
    assert spy.spent < mapping.WORK_BUDGET // 4
    assert sum(n for _, _, n in m.blocks) >= len(long) - 200 * 20  # at most the word each edit split
