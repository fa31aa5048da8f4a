"""What `python -m wgc.lang.regenerate` changes in lark's standalone output: the tables as JSON
(wgc.lang.tables) and the runtime trimmed of what the walk parser never runs (wgc.lang.standalone_trim).

The committed parser must parse every program exactly as lark's own, unchanged standalone module
does (trees with positions, errors with their place and expected terminals), and both files must
be refused when they no longer belong together or to the grammar.
"""

from __future__ import annotations

import ast
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from wgc.lang import parser, regenerate, standalone_trim, tables

ROOT = Path(__file__).resolve().parents[2]
GRAMMAR = regenerate.GRAMMAR.read_text(encoding="utf-8")
PROGRAMS = sorted(p for p in {*ROOT.glob("models/*.walk"), *ROOT.glob("tests/**/*.walk")}
                  if parser._too_deep(p.read_text(encoding="utf-8"), "t.walk") is None)


@pytest.fixture(scope="module")
def printed() -> list[Any]:
    return regenerate.standalone_output(GRAMMAR)


@pytest.fixture(scope="module")
def untrimmed(printed: list[Any]) -> Any:
    """lark's standalone module exactly as its generator prints it (tables as literals), imported."""
    text = "\n".join(item if isinstance(item, str) else repr(item) for item in printed) + "\n"
    assert "\nDATA = (\n" in text and "pickle" in text  # the generator's own output, not the trimmed one
    module = types.ModuleType("walk_parser_as_printed")
    sys.modules[module.__name__] = module  # dataclasses look their module up while the class is built
    try:
        exec(compile(text, "walk_parser_as_printed.py", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]

    def own_token(callback: Any) -> Any:  # parse's callbacks make tokens of walk_parser's Token class
        def call(tok: Any) -> Any:
            out = callback(tok)
            return module.Token.new_borrow_pos(out.type, str(out), tok)
        return call

    return module, module.Lark_StandAlone(lexer_callbacks={
        "COMMENT": own_token(parser._collect_comment), "NAME": own_token(parser._reserve_declaration_words)})


def test_the_json_tables_decode_to_lark_tables_exactly(printed: list[Any]) -> None:
    _, data, memo = standalone_trim.split_tables(printed)
    text = tables.encode(data, memo, "ab" * 32, "1.3.1")
    decoded_data, decoded_memo, digest = tables.decode(text)
    # == tells an int key from a str key and a tuple from a list: lark's dicts come back unchanged
    assert (decoded_data, decoded_memo, digest) == (data, memo, "ab" * 32)
    assert isinstance(next(iter(decoded_memo)), int)
    assert json.loads(text)["grammar_sha256"] == "ab" * 32


@pytest.mark.parametrize("where", ["tuple in options", "int key in options", "str key in the memo"])
def test_tables_of_a_shape_decode_cannot_restore_are_refused(printed: list[Any], where: str) -> None:
    _, data, memo = standalone_trim.split_tables(printed)
    data = {**data, "options": dict(data["options"])}
    if where == "tuple in options":
        data["options"]["start"] = ("start",)
    elif where == "int key in options":
        data["options"][7] = 1
    else:
        memo = {**memo, "x": {}}
    with pytest.raises(ValueError, match="tables hold"):
        tables.encode(data, memo, "ab" * 32, "1.3.1")


def _outcome(lark_parser: Any, errors: type[Exception], text: str) -> Any:
    try:
        return _plain(lark_parser.parse(text, on_error=parser._keyword_as_name))
    except errors as err:
        expected = getattr(err, "expected", None) or getattr(err, "allowed", None) or ()
        return ("error", type(err).__name__, err.line, err.column, sorted(expected))


def _plain(node: Any) -> Any:
    if hasattr(node, "data"):
        meta = node.meta
        where = None if meta.empty else (meta.line, meta.column, meta.end_line, meta.end_column)
        return (str(node.data), where, tuple(_plain(c) for c in node.children))
    if node is None:
        return None
    return (node.type, str(node), node.line, node.column, node.end_line, node.end_column)


def _inputs() -> list[tuple[str, str]]:
    """Every test program, and each model cut at a few places (the error paths, lark's on_error)."""
    out = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in PROGRAMS]
    for path in sorted(ROOT.glob("models/*.walk")):
        text = path.read_text(encoding="utf-8")
        out += [(f"{path.name}[:{n * len(text) // 9}]", text[:n * len(text) // 9]) for n in range(1, 9)]
    return out


def test_the_committed_parser_parses_as_lark_standalone_output_does(untrimmed: Any) -> None:
    module, theirs = untrimmed
    ours = parser.grammar_parser()
    inputs = _inputs()
    assert len(inputs) > 150
    errors = 0
    for name, text in inputs:
        mine = _outcome(ours, parser.UnexpectedInput, text)
        assert mine == _outcome(theirs, module.UnexpectedInput, text), name
        errors += mine[0] == "error"
    assert errors > 30  # the cut programs did reach the error paths


def test_terminals_and_tokens_are_those_of_lark_standalone_output(untrimmed: Any) -> None:
    _, theirs = untrimmed
    ours = parser.grammar_parser()
    assert [(t.name, t.pattern.value, t.priority) for t in ours.terminals] == \
           [(t.name, t.pattern.value, t.priority) for t in theirs.terminals]
    text = (ROOT / "models" / "bagel.walk").read_text(encoding="utf-8")
    assert [_plain(t) for t in ours.lex(text)] == [_plain(t) for t in theirs.lex(text)]


def test_the_trimmed_runtime_holds_no_pickle_and_none_of_the_dropped_definitions() -> None:
    text = regenerate.MODULE.read_text(encoding="utf-8")
    assert "pickle" not in text and "import regex" not in text
    tree = ast.parse(text)
    top = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    lark_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Lark")
    methods = {n.name for n in lark_class.body if isinstance(n, ast.FunctionDef)}
    for owner, name in standalone_trim.DROPPED:
        assert name not in (methods if owner else top), (owner, name)
        assert f"# regenerate: {owner + '.' if owner else ''}{name} dropped" in text
    assert {"_load", "_load_from_dict", "parse", "lex"} <= methods and "Lark_StandAlone" in top


def test_trim_stops_where_lark_no_longer_has_a_definition_it_drops(printed: list[Any]) -> None:
    code, _, _ = standalone_trim.split_tables(printed)
    with pytest.raises(ValueError, match="no PythonIndenter"):
        standalone_trim.trim(code.replace("class PythonIndenter(", "class PythonIndenter2("))


@pytest.mark.parametrize("was, now", [("DATA = (", "TABLES = ("), ("import pickle, zlib, base64", "import zlib, base64")])
def test_split_stops_where_lark_prints_its_tables_another_way(printed: list[Any], was: str, now: str) -> None:
    assert was in printed
    changed = [now if item == was else item for item in printed]
    with pytest.raises(ValueError, match="no longer prints"):
        standalone_trim.split_tables(changed)


def test_a_tables_file_not_written_with_the_module_is_reported() -> None:
    module_text = regenerate.MODULE.read_text(encoding="utf-8")
    json_text = regenerate.TABLES.read_text(encoding="utf-8")
    assert regenerate.stale_reason(GRAMMAR, module_text, json_text) is None
    edited = json_text.replace('"priority":0', '"priority":1', 1)
    assert "walk_parser.json is not the file" in (regenerate.stale_reason(GRAMMAR, module_text, edited) or "")


def test_tables_of_another_grammar_are_reported_even_with_a_matching_header(printed: list[Any]) -> None:
    _, data, memo = standalone_trim.split_tables(printed)
    other = tables.encode(data, memo, regenerate.grammar_digest(GRAMMAR + "\n// old\n"), "1.3.1")
    module_text = regenerate.MODULE.read_text(encoding="utf-8")
    relabelled = regenerate._header(GRAMMAR, other) + module_text.split("\n", 3)[3]
    assert "another grammar" in (regenerate.stale_reason(GRAMMAR, relabelled, other) or "")


def test_a_hand_edit_inside_the_module_is_reported() -> None:
    module_text = regenerate.MODULE.read_text(encoding="utf-8")
    assert regenerate.code_differs(module_text) is None
    edited = module_text.replace("class Lark(Serialize):", "class Lark(Serialize):  # edited", 1)
    assert regenerate.stale_reason(GRAMMAR, edited) is None  # the header alone cannot see it
    assert "edited by hand" in (regenerate.code_differs(edited) or "")
