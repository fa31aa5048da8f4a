"""The symbol index, hover text and document outline, computed directly (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types

from tests.lsp import conftest
from wgc.lsp.document import Analysis, analyse
from wgc.lsp.hover import hover_text
from wgc.lsp.index import Occurrence
from wgc.lsp.positions import LineTable
from wgc.lsp.symbols import document_symbols

ROOT = Path(__file__).resolve().parents[2]
BAGEL = (ROOT / "models" / "bagel.walk").read_text()
ORPHEUS = (ROOT / "models" / "orpheus.walk").read_text()


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line containing `needle`."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def at(a: Analysis, needle: str, word: str, nth: int = 0) -> Occurrence:
    """The occurrence under `word` on the `nth` line (0-based) that contains `needle`."""
    lines = [i for i, line in enumerate(a.text.splitlines(), 1) if needle in line]
    line = lines[nth]
    column = a.text.splitlines()[line - 1].index(word) + 1
    occ = a.index.at(line, column)
    assert occ is not None, (needle, word)
    return occ


@pytest.fixture(scope="module")
def bagel() -> Analysis:
    a = analyse(BAGEL, "bagel.walk")
    assert not a.diagnostics
    return a


def test_component_use_resolves_to_its_declaration(bagel: Analysis) -> None:
    occ = at(bagel, "x = vit.encode(img)", "vit")
    assert occ.key == ("component", "vit") and not occ.definition
    [decl] = bagel.index.definitions(occ.key)
    assert decl.span.line == line_of(BAGEL, "component vit:")
    assert decl.span.column == len("component ") + 1


def test_walk_references_are_every_flow_use(bagel: Analysis) -> None:
    refs = bagel.index.references(("walk", "image_gen"))
    assert [r.span.line for r in refs] == [
        line_of(BAGEL, "walk image_gen()"),
        line_of(BAGEL, "prompt -> image_gen"),
        line_of(BAGEL, "decode -> image_gen"),
        line_of(BAGEL, "image_gen -> done"),
    ]
    assert [r.definition for r in refs] == [True, False, False, False]


def test_param_references_include_loop_bound_and_arguments(bagel: Analysis) -> None:
    refs = bagel.index.references(("param", "steps"), include_declaration=False)
    loop = line_of(BAGEL, "loop steps - 1")
    assert [r.span.line for r in refs] == [loop, loop + 1, loop + 2]


def test_labels_entries_and_consts_are_located_exactly(bagel: Analysis) -> None:
    fork = at(bagel, "fork cfg_text from main", "main")
    assert fork.key == ("label", "main")
    cache = at(bagel, "llm.prefill_text(prompt, cache=main)", "main")
    assert cache.key == ("label", "main")
    entry = at(bagel, "tok = llm.decode(", "decode")
    assert entry.key == ("entry", "llm", "decode")
    const = at(bagel, "loop until tok == llm.eos", "eos")
    assert const.key == ("const", "llm", "eos")
    assert bagel.index.definitions(const.key)[0].span.line == line_of(BAGEL, "const eos:")


def test_a_walk_value_is_local_to_its_walk(bagel: Analysis) -> None:
    # `x` is assigned in prefill_vit and in prefill_vae: two symbols.
    vit = at(bagel, "llm.prefill_vit(x, cache=main)", "x")
    assert vit.key == ("value", "prefill_vit", "x")
    assert [r.span.line for r in bagel.index.references(vit.key)] == [
        line_of(BAGEL, "x = vit.encode"), line_of(BAGEL, "llm.prefill_vit(x")]


def test_a_name_shadowing_a_param_is_the_walks_value() -> None:
    text = BAGEL.replace("tok = llm.decode(tok, temperature, cache=main)",
                         "temperature = llm.decode(tok, temperature, cache=main)")
    a = analyse(text, "b.walk")
    assert at(a, "temperature = llm.decode", "temperature").key == ("value", "decode", "temperature")


def test_hover_param_shows_default_and_bounds(bagel: Analysis) -> None:
    text = hover_text(bagel.index, bagel.symbols, at(bagel, "loop steps - 1", "steps"))
    assert text is not None
    assert "param steps: int = 50 in 2..200" in text
    assert "default: `50`" in text and "bounds: `2..200`" in text


def test_hover_entry_shows_its_signature(bagel: Analysis) -> None:
    text = hover_text(bagel.index, bagel.symbols, at(bagel, "tok = llm.decode(", "decode"))
    assert text is not None
    assert "llm.decode(prev: token, temperature: scalar) -> token" in text
    assert "entry point of component `llm` (kv)" in text


def test_hover_stream_shows_chunk_policy_and_end_rules() -> None:
    a = analyse(ORPHEUS, "orpheus.walk")
    text = hover_text(a.index, a.symbols, at(a, "send tok -> codes", "codes"))
    assert text is not None
    assert "sliding(window=28, stride=7)" in text and "windows of 28 items, one every 7 items" in text
    assert "chunk: `token[28]`" in text
    assert "at_end `drop`: the final fragment is discarded" in text
    assert "after_end `stop` (default)" in text


def test_hover_value_shows_its_inferred_type() -> None:
    text = """model m
import wgc.models.bagel as bagel
component llm: bagel.LanguageModel engine kv {
    noise() -> tensor[4096, 64; bf16]
    velocity(z: tensor[N, 64; bf16], t: scalar) -> tensor[N, 64; bf16]
}
walk w() {
    z = llm.noise()
    v = llm.velocity(z, 1.0)
    emit tensor v
}
flow {
    start -> w -> done
}
"""
    a = analyse(text, "t.walk")
    assert not a.diagnostics
    # The signature's N is bound by the call: the result is the concrete type.
    hover = hover_text(a.index, a.symbols, at(a, "emit tensor v", "v"))
    assert hover is not None and "v: tensor[4096, 64; bf16]" in hover


def test_broken_text_has_diagnostics_and_no_index() -> None:
    a = analyse(BAGEL.replace("walk decode() {", "walk decode( {"), "b.walk")
    assert [d.code for d in a.diagnostics] == ["E001"]
    assert a.index.occurrences == []


def test_analysis_survives_a_parser_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the parser ever raise (a bug), the document still gets an answer instead of the server dying."""
    from wgc.lsp import document
    from wgc.lsp.document import Documents

    def crash(text: str, file: str) -> None:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(document, "parse", crash)
    a = Documents().update("file:///t.walk", "model m\n", "t.walk")
    assert a.error is not None and "could not analyse" in a.error
    assert a.program is None


def test_document_symbols_nest_entries_under_components(bagel: Analysis) -> None:
    assert bagel.program is not None
    syms = document_symbols(bagel.program, bagel.tokens, LineTable(BAGEL))
    top = [(s.name, s.kind) for s in syms]
    assert ("max_tokens", types.SymbolKind.Variable) in top
    assert ("llm", types.SymbolKind.Class) in top and ("image_gen", types.SymbolKind.Function) in top
    assert ("flow", types.SymbolKind.Namespace) in top
    llm = next(s for s in syms if s.name == "llm")
    children = [c.name for c in llm.children or []]
    assert children[:6] == ["prefill_text", "prefill_vit", "prefill_vae", "decode", "init_latents", "velocity"]
    assert "eos" in children
    assert llm.selection_range.start == types.Position(line=line_of(BAGEL, "component llm:") - 1, character=10)
    flow = next(s for s in syms if s.name == "flow")
    assert [c.name for c in flow.children or []] == ["prompt"]


# ---- while the text does not parse: the last analysis that did, mapped (document.View) ----------


def replacing(text: str, *pairs: tuple[str, str]) -> tuple[str, list[tuple[int, int, int]]]:
    """The editor's edits for `pairs` (tests/lsp/conftest.py), as Documents takes them."""
    new, edits = conftest.replacing(text, *pairs)
    return new, [(start, end, len(typed)) for start, end, typed in edits]


def test_a_broken_document_is_viewed_through_its_last_good_analysis() -> None:
    from wgc.lsp.document import Documents

    docs = Documents()
    docs.update("file:///t.walk", BAGEL, "t.walk")
    view = docs.view("file:///t.walk")
    assert view is not None and not view.stale and view.index is docs.get("file:///t.walk").index  # type: ignore[union-attr]

    broken, edits = replacing(BAGEL, ("", "# a\n# b\n"), ("walk decode() {", "walk decode( {"))
    current = docs.update("file:///t.walk", broken, "t.walk", edits)
    assert current.program is None and current.index.occurrences == []  # the analysis itself: no index
    view = docs.view("file:///t.walk")
    assert view is not None and view.stale and view.text == broken and view.program is not None
    occ = view.index.at(line_of(broken, "x = vit.encode(img)"), len("    x = vit.encode(") + 1)
    assert occ is not None and occ.key == ("value", "prefill_vit", "img")
    [decl] = view.index.definitions(("component", "vit"))
    assert decl.span.line == line_of(broken, "component vit:") == line_of(BAGEL, "component vit:") + 2
    assert docs.view("file:///t.walk") is view  # built once per text
    [walk] = view.index.definitions(("walk", "decode"))  # on the edited line, but the edit is past it
    assert (walk.span.line, walk.span.column) == (line_of(broken, "walk decode( {"), len("walk ") + 1)
    typed, edits = replacing(broken, ("x = vit.encode(img)", "x = vit.encode(imgs"))
    docs.update("file:///t.walk", typed, "t.walk", edits)
    view = docs.view("file:///t.walk")
    assert view is not None and view.stale
    assert view.index.at(line_of(typed, "x = vit.encode(imgs"), len("    x = vit.encode(") + 1) is None
    assert view.index.at(line_of(typed, "x = vit.encode(imgs"), len("    x = ") + 1) is not None  # vit

    fixed = broken.replace("walk decode( {", "walk decode() {")
    docs.update("file:///t.walk", fixed, "t.walk")
    view = docs.view("file:///t.walk")
    assert view is not None and not view.stale and view.index.definitions(("walk", "decode"))
    docs.close("file:///t.walk")
    assert docs.view("file:///t.walk") is None


def test_a_crashed_analysis_is_viewed_through_the_last_good_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from wgc.lsp import document
    from wgc.lsp.document import Documents

    docs = Documents()
    docs.update("file:///t.walk", BAGEL, "t.walk")

    def crash(text: str, file: str) -> None:
        raise OverflowError("boom")

    monkeypatch.setattr(document, "parse", crash)
    changed = BAGEL.replace("param think: bool = false\n", "")
    assert docs.update("file:///t.walk", changed, "t.walk").error is not None
    view = docs.view("file:///t.walk")
    assert view is not None and view.stale
    [steps] = view.index.definitions(("param", "steps"))
    assert steps.span.line == line_of(changed, "param steps:")
    assert view.index.definitions(("param", "think")) == []


def test_a_value_whose_first_binding_was_edited_has_no_definition_to_give() -> None:
    from wgc.lsp.document import Documents

    docs = Documents()
    docs.update("file:///t.walk", BAGEL, "t.walk")
    broken, edits = replacing(BAGEL, ("    z = llm.init_latents(height, width, seed)",
                                      "    zz = llm.init_latents(height, width, seed"),
                              ("walk decode() {", "walk decode( {"))
    docs.update("file:///t.walk", broken, "t.walk", edits)
    view = docs.view("file:///t.walk")
    assert view is not None and view.stale
    z = ("value", "image_gen", "z")
    assert z in view.lost_first_binding
    # Its later bindings are still there (the carry, the assignment in the loop): not its first.
    assert [d.span.line for d in view.index.definitions(z)][:1] == [line_of(broken, "carry z {")]
    assert ("value", "image_gen", "t") not in view.lost_first_binding
