"""Where a checking pass puts its diagnostics, and the one "did you mean" rule they all suggest by.

The checker (wgc/check/context.py) and the placement reader (wgc/placement/fields.py) report every
problem at once through a `Sink`, so each reports the same way and suggests names the same way.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from wgc.diag.diagnostic import Diagnostic, Note
from wgc.lang.span import Span


class Sink:
    """The diagnostics so far; `error` adds one (a warning is told apart by its W code)."""

    def __init__(self, diagnostics: list[Diagnostic] | None = None) -> None:
        self.diagnostics: list[Diagnostic] = [] if diagnostics is None else diagnostics

    def error(self, code: str, message: str, span: Span, help: Iterable[str] = (), notes: Iterable[Note] = ()) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, tuple(help), tuple(notes)))

    warn = error


def did_you_mean(name: str, candidates: Iterable[str]) -> tuple[str, ...]:
    """A help line naming the closest candidate, if one is close enough; none otherwise."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return (f"did you mean `{close[0]}`?",) if close else ()
