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


# The text the server holds for each open document, as this client last sent it: changes are sent
# as an editor sends them (incremental sync), a range of that text and what replaces it.
_SENT: dict[str, str] = {}


def open_document(client: LanguageClient, uri: str, text: str, language_id: str = "walk") -> None:
    _SENT[uri] = text
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text)))


def lsp_position(text: str, offset: int) -> types.Position:
    """The LSP position of `offset` in `text`: lines as the protocol splits them, UTF-16 columns."""
    lines = text[:offset].splitlines(keepends=True)
    if not lines or lines[-1] != lines[-1].rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"):
        return types.Position(line=len(lines), character=0)
    return types.Position(line=len(lines) - 1, character=len(lines[-1].encode("utf-16-le", "surrogatepass")) // 2)


def replacing(text: str, *pairs: tuple[str, str]) -> tuple[str, list[tuple[int, int, str]]]:
    """`text` with each (old, new) pair's first `old` replaced in turn, and those replacements as an
    editor reports them (start and end offsets, each in the text the ones before it left, and what
    was typed: only the characters that differ, so `decode()` → `decode(` is one deleted `)`)."""
    edits = []
    for old, new in pairs:
        head = next((i for i, (x, y) in enumerate(zip(old, new)) if x != y), min(len(old), len(new)))
        tail = next((i for i, (x, y) in enumerate(zip(old[head:][::-1], new[head:][::-1])) if x != y),
                    min(len(old), len(new)) - head)
        at = text.index(old) + head
        typed = new[head:len(new) - tail]
        edits.append((at, at + len(old) - head - tail, typed))
        text = text[:at] + typed + text[at + len(old) - head - tail:]
    return text, edits


def change_document(client: LanguageClient, uri: str, version: int, text: str) -> None:
    """Send the change from the text sent last to `text` as one ranged edit: what lies between
    their common start and end."""
    old = _SENT[uri]
    head = 0
    while head < min(len(old), len(text)) and old[head] == text[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(text)) - head and old[-1 - tail] == text[-1 - tail]:
        tail += 1
    start, end = head, len(old) - tail
    # A position cannot fall between the two characters of a "\r\n" line break: widen over it.
    if 0 < start < len(old) and old[start - 1:start + 1] == "\r\n":
        start -= 1
    if 0 < end < len(old) and old[end - 1:end + 1] == "\r\n":
        end += 1
    edit_document(client, uri, version, [(start, end, text[start:len(text) - (len(old) - end)])])


def edit_document(client: LanguageClient, uri: str, version: int, edits: list[tuple[int, int, str]]) -> None:
    """Send `edits` (start and end offsets, each in the text the ones before it left, and the new text)
    as one didChange of ranged changes."""
    text = _SENT[uri]
    changes = []
    for start, end, new in edits:
        changes.append(types.TextDocumentContentChangePartial(
            range=types.Range(start=lsp_position(text, start), end=lsp_position(text, end)), text=new))
        text = text[:start] + new + text[end:]
    _SENT[uri] = text
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=changes))


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
