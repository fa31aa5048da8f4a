"""Random edits through didChange never take the server down, and its diagnostics follow the text.

Each example opens bagel.walk, applies a handful of random edits (inserted snippets, random
text, control characters, deletions, truncation), one didChange each, then asks for a hover at a
random position and the document symbols. 100 examples of 10 to 16 edits: at least 1,000 edits.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.lsp.conftest import ROOT, change_document, open_document
from wgc.lang import ast
from wgc.lsp.document import Documents

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


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(edit, min_size=10, max_size=16), probe=st.tuples(position, st.integers(0, 120)))
async def test_random_edits_keep_the_server_answering(client: LanguageClient, edits: list, probe: tuple) -> None:
    uri = (ROOT / "tests" / "lsp" / "fuzz.walk").as_uri()
    open_document(client, uri, BAGEL)
    text = BAGEL
    for version, change in enumerate(edits, start=2):
        text = apply(text, change)
        change_document(client, uri, version, text)

    lines = text.split("\n")
    row = int(probe[0] * (len(lines) - 1))
    at = types.Position(line=row, character=probe[1])
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=at))
    assert hover is None or isinstance(hover.contents, types.MarkupContent)
    symbols = await client.text_document_document_symbol_async(types.DocumentSymbolParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    assert symbols is not None

    # The diagnostics on the client are those of the final text (the server analysed every version).
    expected = Documents().update(uri, text, "fuzz.walk")
    got = [(d.code, d.range.start.line) for d in client.diagnostics[uri] if d.code is not None]
    assert got == [(d.code, d.span.line - 1) for d in expected.diagnostics]
    outlined = (ast.Param, ast.Component, ast.Stream, ast.Walk, ast.Flow)
    program_decls = expected.program.decls if expected.program is not None else ()
    assert len(symbols) == sum(isinstance(d, outlined) for d in program_decls)

    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
