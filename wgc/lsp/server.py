"""The pygls wiring: which LSP message runs which feature, and the guard every handler runs under.

Documents are analysed on open and on every change (incremental sync: the client sends each
edit's range and new text, which also tell the mapping below exactly what changed) and their
diagnostics published; requests read the latest analysis, except that while the text does not parse, hover,
definition, references and the outline read the last one that did, mapped onto the current text
(document.View). A handler that fails, on any text, logs the error (stderr and window/logMessage)
and answers empty: one bad document must never stop the server.

TOML documents are placements or nothing (wgc/lsp/placement_rule.py): a placement is checked on
open and on every change as `wgc compile` checks it, against the program its `model` names
(wgc/lsp/placement_check.py); a `.walk` opened, edited or closed where such a program is looked
for checks the open placements again. A base (`extends`) open in the editor is read from its text,
saved or not, and one opened, edited or closed checks again the open placements built on it. Only
diagnostics: the requests answer nothing for TOML.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from wgc import __version__
from wgc.diag.diagnostic import WgcError
from wgc.fmt.printer import format_source
from wgc.lsp.completion import complete
from wgc.lsp.diagnostics import to_lsp
from wgc.lsp.document import Documents, View
from wgc.lsp.hover import hover_text
from wgc.lsp.index import Occurrence
from wgc.lsp.mapping import Edit
from wgc.lsp.placement_check import check_placement
from wgc.lsp.placement_diagnostics import placement_to_lsp
from wgc.lsp.placement_rule import has_toml_name, is_placement, is_toml
from wgc.lsp.positions import UTF16, LineTable
from wgc.lsp.programs import Programs
from wgc.lsp.symbols import document_symbols
from wgc.placement.document import identity

log = logging.getLogger("wgc.lsp")
P = TypeVar("P")

_ITEM_KINDS = {
    "keyword": types.CompletionItemKind.Keyword,
    "component": types.CompletionItemKind.Class,
    "entry": types.CompletionItemKind.Method,
    "const": types.CompletionItemKind.Constant,
    "label": types.CompletionItemKind.EnumMember,
    "walk": types.CompletionItemKind.Function,
    "stream": types.CompletionItemKind.Event,
    "param": types.CompletionItemKind.Variable,
    "value": types.CompletionItemKind.Variable,
    "type": types.CompletionItemKind.TypeParameter,
    "field": types.CompletionItemKind.Field,
    "each": types.CompletionItemKind.Enum,
    "module": types.CompletionItemKind.Module,
}


class WalkLanguageServer:
    """The features, over one pygls server and the open documents."""

    def __init__(self) -> None:
        self.server = LanguageServer("wgc", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.docs = Documents()
        # Open TOML documents (wgc/lsp/placement_rule.py), never analysed as .walk; for each one
        # checked as a placement, the directories its program was looked for in (resolved).
        self.tomls: dict[str, tuple[str, ...]] = {}
        self.bases: dict[str, frozenset[str]] = {}  # an open placement's `extends` files, by identity
        self.programs = Programs()

    # ---- plumbing ---------------------------------------------------------------------------

    def guard(self, fallback: Any) -> Callable[[Callable[[P], Any]], Callable[[P], Any]]:
        def wrap(handler: Callable[[P], Any]) -> Callable[[P], Any]:
            @functools.wraps(handler)
            def run(params: P) -> Any:
                try:
                    return handler(params)
                except Exception as err:  # the server outlives any one request
                    log.exception("%s failed", handler.__name__)
                    self._tell(f"wgc lsp: {handler.__name__} failed: {type(err).__name__}: {err}")
                    return fallback
            return run
        return wrap

    def _tell(self, message: str) -> None:
        try:
            self.server.window_log_message(types.LogMessageParams(type=types.MessageType.Error, message=message))
        except Exception:  # with no client to tell, stderr has it already
            log.debug("could not send a log message", exc_info=True)

    def lines(self, text: str) -> LineTable:
        encoding = getattr(self.server.workspace, "position_encoding", None) or UTF16
        return LineTable(text, str(getattr(encoding, "value", encoding)))

    def _occurrence(self, uri: str, position: types.Position) -> tuple[View, LineTable, Occurrence] | None:
        view = self.docs.view(uri)
        if view is None:
            return None
        lines = self.lines(view.text)
        occ = view.index.at(*lines.from_lsp(position))
        return (view, lines, occ) if occ is not None else None

    # ---- document sync and diagnostics ---------------------------------------------------

    def refresh(self, uri: str, version: int | None, edits: list[Edit] | None = None) -> None:
        text = self.server.workspace.get_text_document(uri).source
        analysis = self.docs.update(uri, text, to_fs_path(uri) or uri, edits)
        diagnostics = to_lsp(analysis, self.lines(text), uri)
        self.server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version))
        self.recheck_placements(analysis.file)

    def refresh_toml(self, uri: str, version: int | None, dependents: bool = True) -> None:
        """Check a TOML document as `wgc compile` checks a placement, if it is one; publish the result
        (nothing for TOML that is not a placement, so one that stops being one is cleared). Then,
        with `dependents`, the open placements that extend it."""
        text = self.server.workspace.get_text_document(uri).source
        path = to_fs_path(uri)
        if path is None or not has_toml_name(uri) or not is_placement(text):
            self.tomls[uri] = ()
            self.bases.pop(uri, None)
            diagnostics: list[types.Diagnostic] = []
        else:
            root = self.server.workspace.root_path
            check = check_placement(Path(path), text, Path(root) if root else None, self.programs,
                                    self.docs.analyses(), self._open_tomls(uri))
            self.tomls[uri] = tuple(identity(d) for d in check.searched)
            self.bases[uri] = check.bases
            diagnostics = placement_to_lsp(check, text, uri, self.lines)
        self.server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version))
        if dependents and path is not None:
            self.recheck_extending(identity(Path(path)))

    def _open_tomls(self, but: str) -> dict[str, str]:
        """The editor's texts of the open TOML documents other than `but`, by identity."""
        out = {}
        for uri in self.tomls:
            path = to_fs_path(uri)
            if uri != but and path is not None:
                out[identity(Path(path))] = self.server.workspace.get_text_document(uri).source
        return out

    def recheck_extending(self, base: str) -> None:
        """A TOML file (by identity) was opened, edited or closed: check again the open placements
        built on it. Every base of a chain is in each placement's set, so one pass reaches them all."""
        for uri, bases in list(self.bases.items()):
            if base in bases and uri in self.tomls:
                self.refresh_toml(uri, self.server.workspace.get_text_document(uri).version, dependents=False)

    def recheck_placements(self, walk_file: str) -> None:
        """A .walk was opened, edited or closed: check again the open placements whose program may be it."""
        here = identity(Path(walk_file).parent)
        for uri, searched in list(self.tomls.items()):
            if here in searched:  # each such placement is in this pass: none re-checks its dependents
                self.refresh_toml(uri, self.server.workspace.get_text_document(uri).version, dependents=False)

    def did_open(self, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        if is_toml(doc.uri, doc.language_id):
            self.refresh_toml(doc.uri, doc.version)
        else:
            self.refresh(doc.uri, doc.version)

    def did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        if uri in self.tomls:
            self.refresh_toml(uri, params.text_document.version)
            return
        before = self.docs.get(uri)
        edits = None
        if before is not None:
            replayed = replay(before.text, params.content_changes, self.lines(before.text).encoding)
            # pygls has applied the same changes to its copy; should the two ever disagree (a line
            # break the two count differently), the new text is taken as one replacement.
            if replayed is not None and replayed[0] == self.server.workspace.get_text_document(uri).source:
                edits = replayed[1]
        self.refresh(uri, params.text_document.version, edits)

    def did_close(self, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        closed = self.docs.get(uri)
        was_toml = self.tomls.pop(uri, None) is not None
        self.bases.pop(uri, None)
        self.docs.close(uri)
        self.server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        if closed is not None:  # its placements now read the program from disk
            self.recheck_placements(closed.file)
        path = to_fs_path(uri)
        if was_toml and path is not None:  # the placements built on it now read it from disk
            self.recheck_extending(identity(Path(path)))

    # ---- requests ------------------------------------------------------------------------------

    def hover(self, params: types.HoverParams) -> types.Hover | None:
        found = self._occurrence(params.text_document.uri, params.position)
        if found is None:
            return None
        view, lines, occ = found
        text = hover_text(view.index, view.symbols, occ)
        if text is None:
            return None
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
                           range=lines.to_range(occ.span))

    def definition(self, params: types.DefinitionParams) -> list[types.Location]:
        found = self._occurrence(params.text_document.uri, params.position)
        if found is None:
            return []
        view, lines, occ = found
        defs = view.index.definitions(occ.key)
        if occ.key[0] == "value":  # a value's first binding: its input, assignment or carry
            defs = [] if occ.key in view.lost_first_binding else defs[:1]
        return [types.Location(uri=params.text_document.uri, range=lines.to_range(d.span)) for d in defs]

    def references(self, params: types.ReferenceParams) -> list[types.Location]:
        found = self._occurrence(params.text_document.uri, params.position)
        if found is None:
            return []
        view, lines, occ = found
        refs = view.index.references(occ.key, params.context.include_declaration)
        return [types.Location(uri=params.text_document.uri, range=lines.to_range(r.span)) for r in refs]

    def completion(self, params: types.CompletionParams) -> types.CompletionList:
        analysis = self.docs.get(params.text_document.uri)
        if analysis is None:
            return types.CompletionList(is_incomplete=False, items=[])
        lines = self.lines(analysis.text)
        offset = lines.offset(*lines.from_lsp(params.position))
        items = [types.CompletionItem(label=c.label, kind=_ITEM_KINDS.get(c.kind), detail=c.detail or None)
                 for c in complete(analysis.text, offset)]
        return types.CompletionList(is_incomplete=False, items=items)

    def document_symbol(self, params: types.DocumentSymbolParams) -> list[types.DocumentSymbol]:
        view = self.docs.view(params.text_document.uri)
        if view is None or view.program is None or view.tokens is None:
            return []
        return document_symbols(view.program, view.tokens, self.lines(view.text), view.spans)

    def formatting(self, params: types.DocumentFormattingParams) -> list[types.TextEdit]:
        analysis = self.docs.get(params.text_document.uri)
        if analysis is None:
            return []
        try:
            pretty = format_source(analysis.text, analysis.file)
        except WgcError:
            return []  # it does not parse: the diagnostics already say why
        if pretty == analysis.text:
            return []
        whole = types.Range(start=types.Position(line=0, character=0), end=self.lines(analysis.text).end())
        return [types.TextEdit(range=whole, new_text=pretty)]


def replay(text: str, changes: list[types.TextDocumentContentChangeEvent],
           encoding: str) -> tuple[str, list[Edit]] | None:
    """didChange's changes as offset edits, each in the text the ones before it left, and the text
    they make; None if one of them sends the whole text (Documents then keeps the common ends)."""
    edits: list[Edit] = []
    for change in changes:
        if not isinstance(change, types.TextDocumentContentChangePartial):
            return None
        lines = LineTable(text, encoding)
        start = lines.offset(*lines.from_lsp(change.range.start))
        end = max(start, lines.offset(*lines.from_lsp(change.range.end)))
        edits.append((start, end, len(change.text)))
        text = text[:start] + change.text + text[end:]
    return text, edits


def build_server() -> LanguageServer:
    ws = WalkLanguageServer()
    feature, guard = ws.server.feature, ws.guard
    feature(types.TEXT_DOCUMENT_DID_OPEN)(guard(None)(ws.did_open))
    feature(types.TEXT_DOCUMENT_DID_CHANGE)(guard(None)(ws.did_change))
    feature(types.TEXT_DOCUMENT_DID_CLOSE)(guard(None)(ws.did_close))
    feature(types.TEXT_DOCUMENT_HOVER)(guard(None)(ws.hover))
    feature(types.TEXT_DOCUMENT_DEFINITION)(guard([])(ws.definition))
    feature(types.TEXT_DOCUMENT_REFERENCES)(guard([])(ws.references))
    feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=[".", "="]))(
        guard(types.CompletionList(is_incomplete=False, items=[]))(ws.completion))
    feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)(guard([])(ws.document_symbol))
    feature(types.TEXT_DOCUMENT_FORMATTING)(guard([])(ws.formatting))
    return ws.server


def serve(log_level: str = "WARNING") -> None:
    """Run the server over stdin/stdout until the client says exit."""
    logging.basicConfig(level=log_level, format="wgc lsp: %(levelname)s %(name)s: %(message)s")
    build_server().start_io()
