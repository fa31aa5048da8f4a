"""A real `wgc lsp` process driven over stdio by pytest-lsp's client, one per test module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "wgc", "lsp"]


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER), scope="module")
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=ROOT.as_uri()))
    yield
    await lsp_client.shutdown_session()


def open_document(client: LanguageClient, uri: str, text: str) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="walk", version=1, text=text)))


def change_document(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


async def settle(client: LanguageClient, uri: str) -> None:
    """Wait until the server has handled every notification sent so far.

    The server answers in order, so once a request sent after them is answered, the diagnostics
    published for them have arrived too.
    """
    await client.text_document_document_symbol_async(
        types.DocumentSymbolParams(text_document=types.TextDocumentIdentifier(uri=uri)))


async def assert_param_hover(client: LanguageClient, uri: str, at: types.Position) -> None:
    """Hover at `steps` (bagel.walk's param): its declaration, default and bounds, over the name."""
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=at))
    assert hover is not None and isinstance(hover.contents, types.MarkupContent)
    assert "param steps: int = 50 in 2..200" in hover.contents.value
    assert "default: `50`" in hover.contents.value and "bounds: `2..200`" in hover.contents.value
    assert hover.range == types.Range(start=at, end=types.Position(line=at.line, character=at.character + 5))
