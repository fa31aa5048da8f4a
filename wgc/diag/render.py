"""Diagnostics as a good compiler prints them, or as JSON for tools."""

from __future__ import annotations

import json
from collections.abc import Iterable

from wgc.diag.diagnostic import Diagnostic

_STYLE = {"error": "\x1b[1;31m", "warning": "\x1b[1;33m", "help": "\x1b[1;36m", "note": "\x1b[1;34m", "bold": "\x1b[1m"}
_RESET = "\x1b[0m"


class Renderer:
    """Renders diagnostics against the sources they point into (file name → text)."""

    def __init__(self, sources: dict[str, str], color: bool) -> None:
        # Split on "\n" only, as the parser counts lines (splitlines() also breaks on \f, \x85, ...).
        self.lines = {name: [ln.rstrip("\r") for ln in text.split("\n")] for name, text in sources.items()}
        self.color = color

    def _c(self, style: str, text: str) -> str:
        return f"{_STYLE[style]}{text}{_RESET}" if self.color else text

    def render(self, d: Diagnostic) -> str:
        s = d.span
        head = f"{self._c('bold', f'{s.file}:{s.line}:{s.column}:')} {self._c(d.severity, f'{d.severity}[{d.code}]')}: {d.message}"
        out = [head, *self._excerpt(s.file, s.line, s.column, s.end_line, s.end_column, d.severity)]
        for note in d.notes:
            n = note.span
            out.append(f"  {self._c('note', 'note')}: {note.message} ({n.file}:{n.line}:{n.column})")
            out.extend(self._excerpt(n.file, n.line, n.column, n.end_line, n.end_column, "note"))
        out.extend(f"  {self._c('help', 'help')}: {h}" for h in d.help)
        return "\n".join(out)

    def _excerpt(self, file: str, line: int, col: int, end_line: int, end_col: int, style: str) -> list[str]:
        lines = self.lines.get(file)
        if not lines or not 1 <= line <= len(lines):
            return []
        text = lines[line - 1].replace("\t", " ")
        last = end_col if end_line == line else len(text) + 1
        width = max(1, min(last, len(text) + 1) - col)
        gutter = f"{line:>4} | "
        caret = " " * (len(gutter) - 2) + "| " + " " * (col - 1) + self._c(style, "^" * width)
        return [gutter + text, caret]

    def render_all(self, diags: Iterable[Diagnostic]) -> str:
        return "\n\n".join(self.render(d) for d in diags)


def summary(diags: list[Diagnostic]) -> str:
    errors = sum(d.is_error for d in diags)
    warnings = len(diags) - errors
    parts = []
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''}")
    if warnings:
        parts.append(f"{warnings} warning{'s' if warnings != 1 else ''}")
    return ", ".join(parts) if parts else "no problems"


def to_json(diags: Iterable[Diagnostic]) -> str:
    return json.dumps({"diagnostics": [d.to_json() for d in diags]}, indent=2)
