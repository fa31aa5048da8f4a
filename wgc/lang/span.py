"""Source positions: every AST node, diagnostic and plan instruction carries one."""

from __future__ import annotations

from typing import NamedTuple


class Span(NamedTuple):
    """A region of one source file; lines and columns are 1-based, `end_column` exclusive.

    A NamedTuple rather than a frozen dataclass: the parser makes one per AST node, and a tuple is
    built several times faster. Immutable and ordered (file, line, column, end) all the same.
    """

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
