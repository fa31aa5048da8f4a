"""Random edits through didChange never take the server down, and its answers follow the text.

Each example opens bagel.walk, applies a handful of random edits (inserted snippets, random
text, control characters, deletions, truncation), one didChange each, then asks for a hover,
the definition and the references at a random position (or a random name) and the document
symbols. 100 examples of 10 to 16 edits: at least 1,000 edits. Most final texts do not parse, so
most answers come from the last version that did, mapped through the edits since: every range
the server returns must lie inside the current text, and every location it names must read the
same name.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.lsp.conftest import ROOT, change_document, open_document
from wgc.lang import ast
from wgc.lsp.document import Documents
from wgc.lsp.tokens import tokenize

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

BAGEL = (ROOT / "models" / "bagel.walk").read_text()
SNIPPETS = ["{", "}", "(", ")", "[", "]", "->", "..", "=", "==", ".", ",", ":", ";", '"', "#", "\n", "\r\n", "\t",
            "loop", "walk", "model", "recv", "yield", "parallel", "é", "🎉", "\x00", "\ufeff", "9" * 40, "1e-3",
            "7.2B", "llm.eos", "cache=main"]

position = st.floats(min_value=0.0, max_value=1.0)
inserted = st.one_of(st.sampled_from(SNIPPETS), st.text(max_size=12),
                     st.binary(max_size=8).map(lambda b: b.decode("latin-1")))
edit = st.one_of(
    st.tuples(st.just("insert"), position, inserted),
    st.tuples(st.just("delete"), position, st.integers(min_value=1, max_value=200)),
    st.tuples(st.just("truncate"), position, st.just("")),
)


def apply(text: str, change: tuple) -> str:
    kind, where, arg = change
    at = int(where * len(text))
    if kind == "insert":
        return text[:at] + arg + text[at:]
    if kind == "delete":
        return text[:at] + text[at + arg:]
    return text[:at]


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def check_range(lines: list[str], r: types.Range) -> None:
    """`r` lies inside the text: real lines, columns within them, start before end."""
    for p in (r.start, r.end):
        assert 0 <= p.line < len(lines) and 0 <= p.character <= utf16(lines[p.line]), (p, len(lines))
    assert (r.start.line, r.start.character) <= (r.end.line, r.end.character)


def contains(outer: types.Range, inner: types.Range) -> bool:
    return ((outer.start.line, outer.start.character) <= (inner.start.line, inner.start.character)
            and (inner.end.line, inner.end.character) <= (outer.end.line, outer.end.character))


def read(lines: list[str], r: types.Range) -> str:
    """The text a one-line range covers (columns in UTF-16 units)."""
    assert r.start.line == r.end.line
    units = lines[r.start.line].encode("utf-16-le", "surrogatepass")
    return units[2 * r.start.character:2 * r.end.character].decode("utf-16-le", "surrogatepass")


def check_symbols(lines: list[str], symbols: list, parent: types.Range | None = None) -> None:
    for sym in symbols:
        assert isinstance(sym, types.DocumentSymbol)
        check_range(lines, sym.range)
        check_range(lines, sym.selection_range)
        assert contains(sym.range, sym.selection_range), sym.name
        assert parent is None or contains(parent, sym.range), sym.name
        check_symbols(lines, sym.children or [], sym.range)


def probes(text: str, where: float, character: int, rnd: random.Random) -> list[types.Position]:
    """A random position and the starts of three random name tokens (the places that answer).

    The names are drawn with a hypothesis-seeded Random: drawn as numbers, hypothesis's taste for
    small and round values would keep picking the first word, `model`.
    """
    lines = text.split("\n")
    at = [types.Position(line=int(where * (len(lines) - 1)), character=character)]
    names = [t for t in tokenize(text) if t.kind == "name"]
    for token in rnd.sample(names, min(3, len(names))):
        at.append(types.Position(line=token.line - 1, character=utf16(lines[token.line - 1][:token.column - 1])))
    return at


async def check_requests_at(client: LanguageClient, uri: str, lines: list[str], at: types.Position) -> None:
    """Hover, definition and references at `at`: ranges inside the text, every location reading one name."""
    document = types.TextDocumentIdentifier(uri=uri)
    hover = await client.text_document_hover_async(types.HoverParams(text_document=document, position=at))
    assert hover is None or isinstance(hover.contents, types.MarkupContent)
    definition = await client.text_document_definition_async(types.DefinitionParams(text_document=document, position=at))
    references = await client.text_document_references_async(types.ReferenceParams(
        text_document=document, position=at, context=types.ReferenceContext(include_declaration=True)))
    assert isinstance(definition, list | tuple) and references is not None
    named = [loc.range for loc in [*definition, *references]] + ([hover.range] if hover and hover.range else [])
    for r in named:
        check_range(lines, r)
    words = {read(lines, r) for r in named}
    assert len(words) <= 1 and all(w.isidentifier() for w in words), words


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(edit, min_size=10, max_size=16),
       probe=st.tuples(position, st.integers(0, 120), st.randoms(use_true_random=False)))
async def test_random_edits_keep_the_server_answering(client: LanguageClient, edits: list, probe: tuple) -> None:
    uri = (ROOT / "tests" / "lsp" / "fuzz.walk").as_uri()
    open_document(client, uri, BAGEL)
    text = BAGEL
    for version, change in enumerate(edits, start=2):
        text = apply(text, change)
        change_document(client, uri, version, text)

    lines = text.split("\n")
    for at in probes(text, *probe):
        await check_requests_at(client, uri, lines, at)
    symbols = await client.text_document_document_symbol_async(types.DocumentSymbolParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    assert symbols is not None
    check_symbols(lines, list(symbols))

    # The diagnostics on the client are those of the final text (the server analysed every version).
    expected = Documents().update(uri, text, "fuzz.walk")
    got = [(d.code, d.range.start.line) for d in client.diagnostics[uri] if d.code is not None]
    assert got == [(d.code, d.span.line - 1) for d in expected.diagnostics]
    if expected.program is not None:  # it parses: the outline is this text's, none dropped
        outlined = (ast.Param, ast.Component, ast.Stream, ast.Walk, ast.Flow)
        assert len(symbols) == sum(isinstance(d, outlined) for d in expected.program.decls)

    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
