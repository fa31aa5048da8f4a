"""A placement check that fails inside wgc (a bug, not bad input) is one error diagnostic at the top
of the document, never an exception out of the server; the handlers stay under the guard."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from lsprotocol import types

from wgc.lsp import placement_check
from wgc.lsp.placement_check import check_placement
from wgc.lsp.placement_diagnostics import placement_to_lsp
from wgc.lsp.positions import LineTable
from wgc.lsp.programs import Programs
from wgc.lsp.server import WalkLanguageServer


def test_a_check_that_raises_is_one_error_at_the_top(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    def crash(path: Path, text: str, held: object = None) -> None:
        raise RecursionError("deep\nin the reader")

    monkeypatch.setattr(placement_check, "load_with_bases", crash)
    with caplog.at_level(logging.ERROR):
        check = check_placement(tmp_path / "p.toml", "[cluster]\n", tmp_path, Programs(), [])
    assert "checking placement" in caplog.text
    [diag] = placement_to_lsp(check, "[cluster]\n", (tmp_path / "p.toml").as_uri(), LineTable)
    assert diag.severity == types.DiagnosticSeverity.Error
    assert diag.message == "wgc could not check this placement: RecursionError: in the reader"
    assert diag.range.start == types.Position(line=0, character=0)


def test_opening_toml_runs_under_the_guard(caplog: pytest.LogCaptureFixture) -> None:
    ws = WalkLanguageServer()  # never initialised: reading its workspace raises inside the handler
    params = types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
        uri="file:///w/p.toml", language_id="toml", version=1, text="[cluster]\n"))
    with caplog.at_level(logging.ERROR, logger="wgc.lsp"):
        assert ws.guard(None)(ws.did_open)(params) is None
    assert "did_open failed" in caplog.text
