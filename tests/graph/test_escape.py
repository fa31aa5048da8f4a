"""Labels are escaped for DOT and Mermaid: quotes, brackets, `<`, `>`, `|`, `&`, `#`, backslashes."""

from __future__ import annotations

import re

import pytest

from tests.graph.dot_reader import DotSyntaxError, read_dot, unquote
from wgc.check import check_source
from wgc.fmt.expr import quote as quote_literal
from wgc.graph import build_graph, render
from wgc.graph import dot as dot_writer
from wgc.graph import mermaid as mermaid_writer

NASTY = 'a "b" [c] <d> |e| {f} & g#h \\ i'

PROGRAM = r"""
model esc
import m.x as x
param task: str = "t"
component c: x.C engine kv {
    run(p: text) -> text
    labels main
}
walk w(p: text) {
    emit text c.run(p, cache=main)
}
flow {
    start -> w when task == "a \"b\" [c] <d> |e| {f} & g#h \\ i"
    start -> done
    w -> done
}
"""


def test_dot_quote_round_trips() -> None:
    quoted = dot_writer.quote(NASTY)
    assert quoted.startswith('"') and quoted.endswith('"')
    assert not re.search(r'(?<!\\)"', quoted[1:-1])  # no bare quote inside
    assert "<" not in quoted and ">" not in quoted
    assert unquote(quoted) == NASTY


def test_mermaid_quote_leaves_no_special_character() -> None:
    quoted = mermaid_writer.quote(NASTY + "\nline two")
    inner = quoted[1:-1].replace("<br>", "")
    assert not set(inner) & set('"[]<>|{}\\&')
    assert "<br>line two" in quoted
    # '#' is escaped first, so every '#' starts an entity code
    assert re.fullmatch(r"(?:[^#]|#\d+;)*", inner)


@pytest.fixture(scope="module")
def nasty_graph():
    result = check_source(PROGRAM, "esc.walk")
    assert result.ok, [d.message for d in result.diagnostics if d.is_error]
    assert result.program is not None and result.symbols is not None
    return build_graph(result.program, result.symbols)


def test_a_nasty_condition_survives_both_writers(nasty_graph) -> None:
    d = read_dot(render(nasty_graph, ".dot").decode())
    labels = [attrs.get("label", "") for _, _, attrs in d.edges]
    assert f"1. task == {quote_literal(NASTY)}" in labels  # the condition as the program spells it
    mmd = render(nasty_graph, ".mmd").decode()
    for label in re.findall(r'"([^"]*)"', mmd):  # a quote inside a label would split it here
        assert not set(label.replace("<br>", "")) & set('[]<>|{}\\&')
    assert "c.run #91;main#93;" in mmd


@pytest.mark.parametrize("text, problem", [
    ('digraph "g" { "a" [label="x"]; ', "unbalanced"),
    ('digraph "g" { "a" [label="x"]; "a" -> "b"; }', "not a declared node"),
    ('digraph "g" { "a" [label="x]; }', "unexpected text"),
])
def test_the_reader_rejects_malformed_dot(text: str, problem: str) -> None:
    with pytest.raises(DotSyntaxError, match=problem):
        read_dot(text)
