"""wgc diagnostics → LSP diagnostics: same code, message and span; help lines and notes kept."""

from __future__ import annotations

from lsprotocol import types

from wgc.lsp.document import Analysis
from wgc.lsp.positions import LineTable

# Warnings about something never used: editors grey the code out.
_UNNECESSARY = frozenset({"W001", "W002", "W003"})


def to_lsp(analysis: Analysis, lines: LineTable, uri: str) -> list[types.Diagnostic]:
    out: list[types.Diagnostic] = []
    for d in analysis.diagnostics:
        related = [
            types.DiagnosticRelatedInformation(location=types.Location(uri=uri, range=lines.to_range(n.span)),
                                               message=n.message)
            for n in d.notes
        ]
        out.append(types.Diagnostic(
            range=lines.to_range(d.span),
            message=d.message + "".join(f"\nhelp: {h}" for h in d.help),
            severity=types.DiagnosticSeverity.Error if d.is_error else types.DiagnosticSeverity.Warning,
            code=d.code,
            source="wgc",
            related_information=related or None,
            tags=[types.DiagnosticTag.Unnecessary] if d.code in _UNNECESSARY else None,
        ))
    if analysis.error is not None:
        start = types.Position(line=0, character=0)
        out.append(types.Diagnostic(range=types.Range(start=start, end=start), message=analysis.error,
                                    severity=types.DiagnosticSeverity.Error, source="wgc"))
    return out
