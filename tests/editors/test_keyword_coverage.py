"""One source of truth: every keyword of grammar/walk.lark has a rule in the TextMate grammar and in
the Vim syntax, so a keyword added to the grammar and not to the editors fails here, by name."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import lark

from tests.editors.helpers import LARK, TM_GRAMMAR, VIM_SYNTAX, VSCODE, lark_keywords

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPE = re.compile(r"\\.")
# A lookaround only constrains a match (`flow` not followed by `when`); it is no rule for its words.
_LOOKAROUND = re.compile(r"\(\?<?[=!][^()]*\)")


def _regex_words(pattern: str, escape: re.Pattern[str] = _ESCAPE) -> set[str]:
    previous = None
    while previous != pattern:
        previous, pattern = pattern, _LOOKAROUND.sub("", pattern)
    return set(_WORD.findall(escape.sub(" ", pattern)))


def _tm_patterns(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("match", "begin", "end", "while") and isinstance(value, str):
                yield value
            else:
                yield from _tm_patterns(value)
    elif isinstance(node, list):
        for item in node:
            yield from _tm_patterns(item)


def textmate_words(grammar: dict) -> set[str]:
    """The words the TextMate grammar's regexes match literally (`\\b(loop|until)\\b` gives both)."""
    return set().union(*(_regex_words(p) for p in _tm_patterns(grammar)))


# Vim patterns: `\<`, `\%(`, `\zs` and the like are one backslash, one letter or symbol; `\%(` is
# taken whole so its `%` is not read as part of a word.
_VIM_ESCAPE = re.compile(r"\\%?.")
_VIM_OPTIONS = re.compile(r"\b(?:contained|containedin|nextgroup|contains|skipwhite|skipnl|skipempty|transparent|oneline|"
                          r"fold|display|extend|keepend|excludenl|concealends|conceal|cchar|matchgroup)\b(?:=\S*)?")
_VIM_REGION_PATTERN = re.compile(r"\b(?:start|skip|end)=(\S)(.*?)(?<!\\)\1")


def vim_words(syntax: str) -> set[str]:
    """The words the Vim syntax file's `syntax keyword` lists and `match`/`region` patterns match."""
    words: set[str] = set()
    lines = re.sub(r"\n\s*\\", " ", syntax).splitlines()  # join `\` continuation lines
    for line in lines:
        parts = line.split(None, 3)
        if len(parts) < 4 or parts[0] not in ("syn", "syntax"):
            continue
        kind, rest = parts[1], parts[3]
        if kind == "keyword":
            words |= set(_VIM_OPTIONS.sub(" ", rest).split())
        elif kind == "match":
            delimiter = rest[0]
            words |= _regex_words(rest[1:rest.index(delimiter, 1)], _VIM_ESCAPE)
        elif kind == "region":
            for match in _VIM_REGION_PATTERN.finditer(rest):
                words |= _regex_words(match.group(2), _VIM_ESCAPE)
    return words


def missing(keywords: frozenset[str], tm_grammar: dict, vim_syntax: str) -> dict[str, list[str]]:
    """For each editor, the keywords it has no rule for."""
    tm, vim = textmate_words(tm_grammar), vim_words(vim_syntax)
    return {
        "the TextMate grammar (grammar/editors/vscode/syntaxes/walk.tmLanguage.json)": sorted(keywords - tm),
        "the Vim syntax (grammar/editors/vim/syntax/walk.vim)": sorted(keywords - vim),
    }


def _shipped() -> tuple[frozenset[str], dict, str]:
    return lark_keywords(LARK.read_text()), json.loads(TM_GRAMMAR.read_text()), VIM_SYNTAX.read_text()


def test_the_keyword_list_is_the_grammars() -> None:
    """The regex extraction agrees with lark's own reading of the grammar: its anonymous terminals."""
    text = LARK.read_text()
    parser = lark.Lark(text, parser="lalr")
    from_lark = {t.pattern.value for t in parser.terminals
                 if isinstance(t.pattern, lark.lexer.PatternStr) and _WORD.fullmatch(t.pattern.value)}
    assert lark_keywords(text) == from_lark
    # A sample that must be there, so an empty or truncated extraction cannot pass.
    assert {"model", "component", "walk", "loop", "until", "parallel", "stream", "flow", "at_end", "start"} <= from_lark


def test_every_keyword_has_an_editor_rule() -> None:
    found = {editor: names for editor, names in missing(*_shipped()).items() if names}
    assert not found, "keywords of grammar/walk.lark with no rule in " + "; ".join(
        f"{editor}: {', '.join(names)}" for editor, names in found.items())


def asserted_tokens(test_file: str) -> set[str]:
    """The source text under each positive scope assertion of a vscode-tmgrammar-test file."""
    tokens: set[str] = set()
    source = ""
    for line in test_file.splitlines()[1:]:
        caret = re.match(r"#( *)(\^+) +(?!-)\S", line)
        start = re.match(r"# <(-+) +(?!-)\S", line)
        if caret:
            column = len(caret.group(1)) + 1
            tokens.add(source[column:column + len(caret.group(2))])
        elif start:
            tokens.add(source[:len(start.group(1))])
        elif not line.startswith("#"):
            source = line
    return tokens


def test_every_keyword_has_a_scope_test() -> None:
    """Each keyword is asserted somewhere in grammar/editors/vscode/test/*.test.walk."""
    asserted = set().union(*(asserted_tokens(p.read_text()) for p in (VSCODE / "test").glob("*.test.walk")))
    untested = sorted(lark_keywords(LARK.read_text()) - asserted)
    assert not untested, f"keywords with no scope assertion in grammar/editors/vscode/test/: {', '.join(untested)}"


def test_a_new_keyword_is_reported_missing() -> None:
    keywords, tm_grammar, vim_syntax = _shipped()
    grammar = LARK.read_text() + '\nfrobnicate_decl: "frobnicate" NAME\n'
    report = missing(lark_keywords(grammar), tm_grammar, vim_syntax)
    assert all(names == ["frobnicate"] for names in report.values()), report


def test_a_keyword_dropped_from_an_editor_is_reported_missing() -> None:
    keywords, tm_grammar, vim_syntax = _shipped()
    tm_text = json.dumps(tm_grammar).replace("|nospec", "").replace("nospec|", "")
    vim_text = re.sub(r"\bafter_end\b", "", vim_syntax)
    report = missing(keywords, json.loads(tm_text), vim_text)
    assert list(report.values()) == [["nospec"], ["after_end"]], report


def test_lookarounds_and_vim_options_are_not_rules() -> None:
    assert _regex_words(r"\b(flow)\b(?:\s+(?!when\b)([A-Za-z_]\w*))?") == {"flow", "A", "Za", "z_"}
    assert vim_words('syntax region walkString start=/"/ skip=/\\\\./ end=/"/ oneline contains=walkEscape') == set()
    assert vim_words("syntax keyword walkRepeat loop until max contained nextgroup=walkX skipwhite") == {"loop", "until", "max"}
