"""A placement check → the LSP diagnostics of the placement's document.

Each diagnostic in the document itself is shown at its span, as the .walk ones are (same code,
message, span; help lines appended, notes as related locations). One in an `extends` base (a
warning about a component the base places, say) is shown on the document's `extends` value,
its exact place in the base given as the first related location: the editor shows the document's
problems, and the base may not be open. The notice, when there is one, is information-level.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lsprotocol import types

from wgc.lang.span import Span
from wgc.lsp.diagnostics import convert, failure
from wgc.lsp.placement_check import PlacementCheck
from wgc.lsp.positions import LineTable
from wgc.placement.locate import locate


class _Files:
    """Line tables of the files spans name: the document's own text, any other read from disk."""

    def __init__(self, check: PlacementCheck, text: str, uri: str, lines: Callable[[str], LineTable]) -> None:
        self.own, self.uri, self.lines = check.file, uri, lines
        self._tables: dict[str, LineTable] = {check.file: lines(text)}

    def table(self, file: str) -> LineTable:
        if file not in self._tables:
            try:
                text = Path(file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                text = ""
            self._tables[file] = self.lines(text)
        return self._tables[file]

    def location(self, span: Span) -> types.Location:
        uri = self.uri if span.file == self.own else Path(span.file).absolute().as_uri()
        return types.Location(uri=uri, range=self.table(span.file).to_range(span))


def placement_to_lsp(check: PlacementCheck, text: str, uri: str,
                     lines: Callable[[str], LineTable]) -> list[types.Diagnostic]:
    files = _Files(check, text, uri, lines)
    own = files.table(check.file)
    out: list[types.Diagnostic] = []
    extends_at: types.Range | None = None
    for d in check.diagnostics:
        if d.span.file == check.file:
            out.append(convert(d, own.to_range(d.span), files.location))
            continue
        if extends_at is None:
            found = locate(text, check.file).get(("extends",))
            extends_at = own.to_range(found.value) if found is not None else own.to_range(Span(check.file, 1, 1, 1, 1))
        there = types.DiagnosticRelatedInformation(location=files.location(d.span),
                                                   message=f"reported here, in `{Path(d.span.file).name}`")
        out.append(convert(d, extends_at, files.location, (there,)))
    if check.notice is not None:
        out.append(types.Diagnostic(range=own.to_range(check.notice.span), message=check.notice.message,
                                    severity=types.DiagnosticSeverity.Information, source="wgc"))
    if check.error is not None:
        out.append(failure(check.error))
    return out
