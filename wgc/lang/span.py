"""Source positions: every AST node, diagnostic and plan instruction carries one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Span:
    """A region of one source file; lines and columns are 1-based, `end_column` exclusive."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
        }


def point(file: str, line: int, column: int, width: int = 1) -> Span:
    """A span of `width` characters on one line."""
    return Span(file, line, column, line, column + max(width, 1))
