"""One open document and what the server knows about it, recomputed whenever its text changes.

Analysis is the same parse and check `wgc check` runs, plus the symbol index and value types the
editor features read. It is computed eagerly on open and on every change (a model checks in
milliseconds), so requests only read it. When the text does not parse its own index is empty, and
hover, definition, references and the outline read the last analysis that parsed instead, its
spans mapped through the edits the editor reported since (a `View`, built on the first such request).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from wgc.check import CheckResult, check_program
from wgc.check.context import Symbols
from wgc.diag.diagnostic import Diagnostic
from wgc.lang import ast
from wgc.lang.parser import ParseResult, parse
from wgc.lsp.index import Index, Key, Occurrence, build_index
from wgc.lsp.mapping import Block, Edit, SpanMap, replaced, through, unchanged
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


@dataclass
class View:
    """What hover, definition, references and the outline read, in the current text's positions.

    While the text parses, its own analysis. While it does not, the last analysis that parsed:
    `index` holds its occurrences mapped onto the current text (those an edit touched dropped),
    `program` and `tokens` are still the old text's, and `spans` maps their spans onto the current
    text. With neither, an empty index and no program.
    """

    text: str
    index: Index
    symbols: Symbols | None = None
    program: ast.Program | None = None
    tokens: Tokens | None = None
    spans: SpanMap | None = None
    # Values whose first binding an edit touched: definition (which answers a value's first
    # binding) has nothing right to answer for them, the next binding not being the first.
    lost_first_binding: frozenset[Key] = frozenset()

    @property
    def stale(self) -> bool:
        return self.spans is not None


def current_view(analysis: Analysis) -> View:
    return View(analysis.text, analysis.index, analysis.symbols, analysis.program, analysis.tokens)


def mapped_view(good: Analysis, current: Analysis, blocks: list[Block]) -> View:
    """`good`'s answers, placed in `current`'s text through `blocks` (the text the two share)."""
    spans = SpanMap(good.text, current.text, blocks, current.tokens)
    occurrences = []
    bound: set[Key] = set()
    lost: set[Key] = set()
    for occ in good.index.occurrences:  # in text order: a key's first definition comes first
        placed = spans.name(occ.span)
        if occ.definition and occ.key[0] == "value" and occ.key not in bound:
            bound.add(occ.key)
            if placed is None:
                lost.add(occ.key)
        if placed is not None:
            occurrences.append(Occurrence(occ.key, placed, occ.definition, occ.ty))
    index = Index(occurrences, good.index.decls)
    return View(current.text, index, good.symbols, good.program, good.tokens, spans, frozenset(lost))


@dataclass
class _Document:
    current: Analysis
    good: Analysis | None = None  # the last analysis whose text parsed (`current` itself while it parses)
    shared: list[Block] = field(default_factory=list)  # good's text → current's: what no edit touched
    view: View | None = None  # built on first use, for `current`


class Documents:
    """The open documents by URI: each with its latest text's analysis and the last one that parsed."""

    def __init__(self) -> None:
        self._docs: dict[str, _Document] = {}

    def update(self, uri: str, text: str, file: str, edits: Sequence[Edit] | None = None) -> Analysis:
        """Analyse `text`, the document's new text. `edits` (start, end, length of what was put there,
        each in the text left by the ones before) say how the previous text became it; without them
        the new text is taken as one replacement of all but the two texts' common start and end."""
        try:
            analysis = analyse(text, file)
        except Exception as err:  # a checker bug on odd input must not take the server down
            log.exception("analysing %s failed", file)
            analysis = failed_analysis(text, file, err)
        doc = self._docs.get(uri)
        if analysis.program is not None or doc is None or doc.good is None:
            good = analysis if analysis.program is not None else None
            self._docs[uri] = _Document(analysis, good, unchanged(text))
            return analysis
        if edits is None:
            edits = [replaced(doc.current.text, text)]
        self._docs[uri] = _Document(analysis, doc.good, through(doc.shared, edits))
        return analysis

    def get(self, uri: str) -> Analysis | None:
        doc = self._docs.get(uri)
        return doc.current if doc is not None else None

    def analyses(self) -> list[Analysis]:
        """The latest analysis of every open document."""
        return [doc.current for doc in self._docs.values()]

    def view(self, uri: str) -> View | None:
        """What position requests read for `uri` (None if it is not open); see `View`."""
        doc = self._docs.get(uri)
        if doc is None:
            return None
        if doc.view is None:
            if doc.good is doc.current or doc.good is None:
                doc.view = current_view(doc.current)
            else:
                doc.view = mapped_view(doc.good, doc.current, doc.shared)
        return doc.view

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)
