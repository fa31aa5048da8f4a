"""wgc/lang/walk_parser.py, written by lark's standalone generator, is the parser of grammar/walk.lark.

The module is generated (`python -m wgc.lang.regenerate`) and committed; these tests fail when the
grammar was edited without regenerating it, when the module was edited by hand, or when its tables
parse any program differently from the tables lark builds from the grammar today.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import lark
import pytest

from wgc.lang import parser, regenerate

ROOT = Path(__file__).resolve().parents[2]
# Programs nested past the limit are rejected before any parser runs: nothing to compare.
PROGRAMS = sorted(p for p in {*ROOT.glob("models/*.walk"), *ROOT.glob("tests/**/*.walk")}
                  if parser._too_deep(p.read_text(encoding="utf-8"), "t.walk") is None)


def _module_text() -> str:
    return regenerate.MODULE.read_text(encoding="utf-8")


def test_the_module_was_generated_from_the_grammar_as_it_is() -> None:
    assert regenerate.stale_reason(regenerate.GRAMMAR.read_text(encoding="utf-8"), _module_text()) is None


def test_the_check_command_passes_on_the_committed_module() -> None:
    done = subprocess.run([sys.executable, "-m", "wgc.lang.regenerate", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_grammar_edit_without_regenerating_is_reported() -> None:
    edited = regenerate.GRAMMAR.read_text(encoding="utf-8") + "\n// one more line\n"
    assert "another grammar" in (regenerate.stale_reason(edited, _module_text()) or "")


def test_a_hand_edit_of_the_module_is_reported() -> None:
    grammar = regenerate.GRAMMAR.read_text(encoding="utf-8")
    assert regenerate.stale_reason(grammar, "# edited\n" + _module_text()) is not None


def test_render_writes_lark_standalone_module_without_pickled_tables() -> None:
    text, tables_json = regenerate.render(regenerate.GRAMMAR.read_text(encoding="utf-8"))
    assert text.startswith(_module_text().split("\n", 2)[0])  # the same header
    assert "def Lark_StandAlone(" in text and "\nDATA, MEMO = read_tables()\n" in text  # tables as JSON
    assert tables_json.startswith('{"grammar_sha256":')
    assert "pickle" not in text and "pickle" not in _module_text()


def _plain(node: Any) -> Any:
    """A tree of either lark (installed or standalone) as tuples: rule, positions, children, tokens."""
    if hasattr(node, "data"):
        meta = node.meta
        where = None if meta.empty else (meta.line, meta.column, meta.end_line, meta.end_column)
        return (str(node.data), where, tuple(_plain(c) for c in node.children))
    if node is None:
        return None
    return (node.type, str(node), node.line, node.column, node.end_line, node.end_column)


@pytest.fixture(scope="module")
def fresh() -> lark.Lark:
    """The tables lark builds from grammar/walk.lark now, with the callbacks `parse` uses."""
    def installed(callback: Any) -> Any:  # the callbacks make tokens of walk_parser's Token class
        def call(tok: lark.Token) -> lark.Token:
            out = callback(tok)
            return lark.Token.new_borrow_pos(out.type, str(out), tok)
        return call

    callbacks = {"COMMENT": installed(parser._collect_comment), "NAME": installed(parser._reserve_declaration_words)}
    return lark.Lark(regenerate.GRAMMAR.read_text(encoding="utf-8"), lexer_callbacks=callbacks,
                     **regenerate.OPTIONS)


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_generated_tables_parse_as_lark_builds_them(path: Path, fresh: lark.Lark) -> None:
    text = path.read_text(encoding="utf-8")
    outcomes = []
    for lark_parser, errors in ((parser.grammar_parser(), parser.UnexpectedInput), (fresh, lark.UnexpectedInput)):
        try:
            outcomes.append(_plain(lark_parser.parse(text, on_error=parser._keyword_as_name)))
        except errors as err:
            outcomes.append(("error", type(err).__name__, err.line, err.column))
    assert outcomes[0] == outcomes[1]
