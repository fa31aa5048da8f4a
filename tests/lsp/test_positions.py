"""Span ↔ LSP position conversion: 0-based lines, code-unit columns of the negotiated encoding."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types

from wgc.lang.parser import parse
from wgc.lang.span import Span
from wgc.lsp.positions import UTF8, UTF16, UTF32, LineTable, units


def test_ascii_line_is_shifted_to_zero_based() -> None:
    table = LineTable("model m\nparam steps: int = 5\n")
    assert table.to_lsp(2, 7) == types.Position(line=1, character=6)
    assert table.to_range(Span("f", 2, 7, 2, 12)) == types.Range(
        start=types.Position(line=1, character=6), end=types.Position(line=1, character=11))


def test_non_ascii_before_a_name_counts_utf16_code_units() -> None:
    # `x` is code point 6 of its line; before it "é" is one UTF-16 unit (2 UTF-8 bytes), the emoji 2 (4 bytes).
    text = "model m\n# é🎉 x\n"
    table = LineTable(text)
    assert table.to_lsp(2, 6) == types.Position(line=1, character=6)
    assert table.from_lsp(types.Position(line=1, character=6)) == (2, 6)
    assert table.to_range(Span("f", 2, 6, 2, 7)).end.character == 7
    assert LineTable(text, UTF8).to_lsp(2, 6).character == 1 + 1 + 2 + 4 + 1
    assert LineTable(text, UTF32).to_lsp(2, 6).character == 5


def test_a_position_inside_a_surrogate_pair_stays_on_the_character() -> None:
    table = LineTable("🎉ab")
    assert table.from_lsp(types.Position(line=0, character=1)) == (1, 1)
    assert table.from_lsp(types.Position(line=0, character=2)) == (1, 2)


def test_positions_past_the_text_are_clamped() -> None:
    table = LineTable("ab\ncd")
    assert table.to_lsp(9, 9) == types.Position(line=1, character=2)
    assert table.from_lsp(types.Position(line=7, character=40)) == (2, 3)
    assert table.end() == types.Position(line=1, character=2)
    assert table.offset(2, 2) == 4


def test_parser_columns_are_code_points() -> None:
    """The premise of the module: lark counts columns in code points, after any non-ASCII text."""
    text = 'model m\nparam voice: str = "é🎉" in ["é🎉"]\nparam steps: int = 3\n'
    program = parse(text, "t.walk").program
    assert program is not None
    steps = program.decls[-1]
    assert (steps.span.line, steps.span.column) == (3, 1)
    voice = program.decls[1]
    assert voice.span.end_column == len('param voice: str = "é🎉" in ["é🎉"]') + 1


@given(st.text(max_size=40), st.sampled_from([UTF8, UTF16, UTF32]))
def test_round_trip_for_every_character_boundary(line: str, encoding: str) -> None:
    line = line.replace("\n", " ")
    table = LineTable(line, encoding)
    for column in range(1, len(line) + 2):
        pos = table.to_lsp(1, column)
        assert pos.character == units(line[: column - 1], encoding)
        assert table.from_lsp(pos) == (1, column)
