"""Diagnostics: one value type for every error and warning wgc reports, and the one error root."""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.lang.span import Span


@dataclass(frozen=True)
class Note:
    """A secondary location ("`z` is defined here")."""

    message: str
    span: Span


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    span: Span
    help: tuple[str, ...] = ()
    notes: tuple[Note, ...] = field(default=())

    @property
    def severity(self) -> str:
        return "warning" if self.code.startswith("W") else "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    @property
    def title(self) -> str:
        """The stable slug of the code (`unknown-name`), for tools and docs."""
        from wgc.diag.catalog import all_codes

        code = all_codes().get(self.code)
        return code.slug if code else "unknown"

    def to_json(self) -> dict[str, object]:
        return {
            "code": self.code,
            "slug": self.title,
            "severity": self.severity,
            "message": self.message,
            **self.span.to_json(),
            "help": list(self.help),
            "notes": [{"message": n.message, **n.span.to_json()} for n in self.notes],
        }


class WgcError(Exception):
    """The root of every error wgc raises on user input; it always carries positions."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        first = diagnostics[0] if diagnostics else None
        super().__init__(f"{first.span}: {first.message}" if first else "error")


def sort_key(d: Diagnostic) -> tuple:
    return (d.span.file, d.span.line, d.span.column, d.code)
