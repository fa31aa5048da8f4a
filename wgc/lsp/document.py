"""One open document and what the server knows about it, recomputed whenever its text changes.

Analysis is the same parse and check `wgc check` runs, plus the symbol index and value types the
editor features read. It is computed eagerly on open and on every change (a model checks in
milliseconds), so requests only read it. When the text does not parse the index is empty:
positions in an old analysis would point at the wrong text.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from wgc.check import CheckResult, check_program
from wgc.check.context import Symbols
from wgc.diag.diagnostic import Diagnostic
from wgc.lang import ast
from wgc.lang.parser import ParseResult, parse
from wgc.lsp.index import Index, build_index
from wgc.lsp.tokens import Tokens
from wgc.lsp.values import value_types

log = logging.getLogger(__name__)


@dataclass
class Analysis:
    text: str
    file: str
    parsed: ParseResult
    checked: CheckResult | None
    tokens: Tokens
    index: Index = field(default_factory=Index)
    error: str | None = None  # analysis itself failed (a wgc bug): said once, as a diagnostic

    @property
    def program(self) -> ast.Program | None:
        return self.parsed.program

    @property
    def symbols(self) -> Symbols | None:
        return self.checked.symbols if self.checked is not None else None

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return self.checked.diagnostics if self.checked is not None else self.parsed.diagnostics


def analyse(text: str, file: str) -> Analysis:
    parsed = parse(text, file)
    tokens = Tokens(text)
    if parsed.program is None:
        return Analysis(text, file, parsed, None, tokens)
    checked = check_program(parsed.program)
    analysis = Analysis(text, file, parsed, checked, tokens)
    try:
        analysis.index = build_index(parsed.program, tokens, value_types(parsed.program))
    except Exception:  # diagnostics must still reach the editor if indexing fails
        log.exception("indexing %s failed", file)
    return analysis


def failed_analysis(text: str, file: str, error: Exception) -> Analysis:
    """What a document holds if analysis itself raised: no program, no symbols, the error kept."""
    first_line = str(error).strip().splitlines()[-1:] or [""]
    message = f"wgc could not analyse this file: {type(error).__name__}: {first_line[0]}"
    return Analysis(text, file, ParseResult(None, (), (), text), None, Tokens(text), error=message)


class Documents:
    """The open documents by URI: each with its latest text's analysis."""

    def __init__(self) -> None:
        self._docs: dict[str, Analysis] = {}

    def update(self, uri: str, text: str, file: str) -> Analysis:
        try:
            analysis = analyse(text, file)
        except Exception as err:  # a checker bug on odd input must not take the server down
            log.exception("analysing %s failed", file)
            analysis = failed_analysis(text, file, err)
        self._docs[uri] = analysis
        return analysis

    def get(self, uri: str) -> Analysis | None:
        return self._docs.get(uri)

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)
