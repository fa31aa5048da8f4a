"""Every handler runs under a guard: a failure is logged and answered with the handler's empty answer."""

from __future__ import annotations

import logging

import pytest
from lsprotocol import types

from wgc.lsp.server import WalkLanguageServer


def test_a_failing_handler_answers_empty_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    ws = WalkLanguageServer()

    def hover(params: types.HoverParams) -> types.Hover:
        raise ValueError("boom")

    guarded = ws.guard(None)(hover)
    params = types.HoverParams(text_document=types.TextDocumentIdentifier(uri="file:///x.walk"),
                               position=types.Position(line=0, character=0))
    with caplog.at_level(logging.ERROR, logger="wgc.lsp"):
        assert guarded(params) is None
    assert "hover failed" in caplog.text and "boom" in caplog.text


def test_requests_on_an_unknown_document_answer_empty() -> None:
    ws = WalkLanguageServer()
    unknown = types.TextDocumentIdentifier(uri="file:///never-opened.walk")
    at = types.Position(line=0, character=0)
    assert ws.hover(types.HoverParams(text_document=unknown, position=at)) is None
    assert ws.definition(types.DefinitionParams(text_document=unknown, position=at)) == []
    assert ws.completion(types.CompletionParams(text_document=unknown, position=at)).items == []
    assert ws.document_symbol(types.DocumentSymbolParams(text_document=unknown)) == []


def test_a_failure_mapping_the_last_good_analysis_is_guarded(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    from wgc.lsp import document

    ws = WalkLanguageServer()
    uri = "file:///t.walk"
    ws.docs.update(uri, "model m\nparam n: int = 3\n", "t.walk")
    ws.docs.update(uri, "model m\nparam n: int = = 3\n", "t.walk")  # does not parse: the fallback is read

    def crash(good: document.Analysis, current: document.Analysis) -> document.View:
        raise RecursionError("deep")

    monkeypatch.setattr(document, "mapped_view", crash)
    ident = types.TextDocumentIdentifier(uri=uri)
    at = types.Position(line=1, character=6)
    with caplog.at_level(logging.ERROR, logger="wgc.lsp"):
        assert ws.guard(None)(ws.hover)(types.HoverParams(text_document=ident, position=at)) is None
        assert ws.guard([])(ws.document_symbol)(types.DocumentSymbolParams(text_document=ident)) == []
    assert "hover failed" in caplog.text and "document_symbol failed" in caplog.text
