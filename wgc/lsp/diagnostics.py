"""wgc diagnostics → LSP diagnostics: same code, message and span; help lines and notes kept."""

from __future__ import annotations

from collections.abc import Callable

from lsprotocol import types

from wgc.diag.diagnostic import Diagnostic
from wgc.lang.span import Span
from wgc.lsp.document import Analysis
from wgc.lsp.positions import LineTable

# Warnings about something never used: editors grey the code out.
_UNNECESSARY = frozenset({"W001", "W002", "W003"})


def to_lsp(analysis: Analysis, lines: LineTable, uri: str) -> list[types.Diagnostic]:
    out = [convert(d, lines.to_range(d.span), lambda span: types.Location(uri=uri, range=lines.to_range(span)))
           for d in analysis.diagnostics]
    if analysis.error is not None:
        out.append(failure(analysis.error))
    return out


def convert(d: Diagnostic, at: types.Range, locate: Callable[[Span], types.Location],
            related: tuple[types.DiagnosticRelatedInformation, ...] = ()) -> types.Diagnostic:
    """`d` shown at `at`; `locate` places its notes (related locations), after any `related` given."""
    notes = [types.DiagnosticRelatedInformation(location=locate(n.span), message=n.message) for n in d.notes]
    return types.Diagnostic(
        range=at,
        message=d.message + "".join(f"\nhelp: {h}" for h in d.help),
        severity=types.DiagnosticSeverity.Error if d.is_error else types.DiagnosticSeverity.Warning,
        code=d.code,
        source="wgc",
        related_information=[*related, *notes] or None,
        tags=[types.DiagnosticTag.Unnecessary] if d.code in _UNNECESSARY else None,
    )


def failure(message: str) -> types.Diagnostic:
    """Analysis itself failed: said once, at the top of the file."""
    start = types.Position(line=0, character=0)
    return types.Diagnostic(range=types.Range(start=start, end=start), message=message,
                            severity=types.DiagnosticSeverity.Error, source="wgc")
