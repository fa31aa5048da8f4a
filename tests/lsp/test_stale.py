"""While the document does not parse, the real server answers from the last analysis that did.

bagel.walk is broken by deleting the `}` that closes the flow's each-block, near the end of the
file; from then on hover, definition, references and the outline read the analysis of the text
before, its positions mapped through the edits, until the text parses again.
"""

from __future__ import annotations

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.lsp.conftest import (
    ROOT,
    assert_param_hover,
    change_document,
    edit_document,
    open_document,
    replacing,
    settle,
)
from tests.lsp.test_server import doc, position_of, row_of, uri_for

pytestmark = pytest.mark.asyncio(loop_scope="module")

BAGEL = (ROOT / "models" / "bagel.walk").read_text()
EACH_END = "        image -> prefill_vit\n    }\n"
BROKEN = BAGEL.replace(EACH_END, "        image -> prefill_vit\n")
INSERTED = "# three lines\n# typed above\n# the component\n"
SHIFTED = BROKEN.replace("component llm:", INSERTED + "component llm:")  # still broken, 3 lines more


async def symbols_of(client: LanguageClient, uri: str) -> list[types.DocumentSymbol]:
    result = await client.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=doc(uri)))
    assert result is not None
    assert all(isinstance(s, types.DocumentSymbol) for s in result)
    return result  # type: ignore[return-value]


async def broken_document(client: LanguageClient, name: str) -> tuple[str, list[types.DocumentSymbol]]:
    """A document opened as bagel.walk, then broken; with the outline of the text that parsed."""
    assert BAGEL.count(EACH_END) == 1
    uri = uri_for(name)
    open_document(client, uri, BAGEL)
    before = await symbols_of(client, uri)
    change_document(client, uri, 2, BROKEN)
    await settle(client, uri)
    assert [d.code for d in client.diagnostics[uri]] == ["E001"]  # diagnostics: the current text's
    return uri, before


def shifted(r: types.Range, lines: int) -> types.Range:
    return types.Range(start=types.Position(line=r.start.line + lines, character=r.start.character),
                       end=types.Position(line=r.end.line + lines, character=r.end.character))


async def test_outline_of_a_broken_document_keeps_every_declaration(client: LanguageClient) -> None:
    uri, before = await broken_document(client, "stale_outline.walk")
    after = await symbols_of(client, uri)
    assert [s.name for s in after] == [s.name for s in before]
    assert {"vit", "llm", "combine", "prefill_text", "image_gen", "flow"} <= {s.name for s in after}
    for old, new in zip(before[:-1], after[:-1], strict=True):  # everything above the edit: unmoved
        assert (new.range, new.selection_range) == (old.range, old.selection_range), old.name
        assert [c.name for c in new.children or []] == [c.name for c in old.children or []]
    flow_old, flow_new = before[-1], after[-1]
    assert flow_new.range.start == flow_old.range.start
    assert flow_new.range.end == shifted(flow_old.range, -1).end  # its body lost the `}` line
    [each] = flow_new.children or []
    assert each.name == "prompt" and each.selection_range == (flow_old.children or [])[0].selection_range

    change_document(client, uri, 3, SHIFTED)
    moved = await symbols_of(client, uri)
    llm = next(i for i, s in enumerate(before) if s.name == "llm")
    assert [s.name for s in moved] == [s.name for s in before]
    for i, (old, new) in enumerate(zip(before[:-1], moved[:-1], strict=True)):
        lines = 3 if i >= llm else 0
        assert new.range == shifted(old.range, lines), old.name
        assert new.selection_range == shifted(old.selection_range, lines), old.name
        for old_child, new_child in zip(old.children or [], new.children or [], strict=True):
            assert new_child.selection_range == shifted(old_child.selection_range, lines)
    assert moved[llm].selection_range.start == types.Position(line=row_of(SHIFTED, "component llm:"), character=10)


async def test_definition_above_the_broken_point_jumps_to_the_declaration(client: LanguageClient) -> None:
    uri, _ = await broken_document(client, "stale_definition.walk")
    change_document(client, uri, 3, SHIFTED)
    result = await client.text_document_definition_async(types.DefinitionParams(
        text_document=doc(uri), position=position_of(SHIFTED, "tok = llm.decode(", "llm")))
    row = row_of(SHIFTED, "component llm:")
    assert row == row_of(BAGEL, "component llm:") + 3
    assert result == [types.Location(uri=uri, range=types.Range(start=types.Position(line=row, character=10),
                                                                end=types.Position(line=row, character=13)))]
    refs = await client.text_document_references_async(types.ReferenceParams(
        text_document=doc(uri), position=position_of(SHIFTED, "walk prefill_vit(", "prefill_vit"),
        context=types.ReferenceContext(include_declaration=True)))
    assert refs is not None
    assert sorted((r.range.start.line, r.range.start.character) for r in refs) == [
        (row_of(SHIFTED, "walk prefill_vit("), 5),
        (row_of(SHIFTED, "image -> prefill_vae -> prefill_vit"), 32),
        (row_of(SHIFTED, "image -> prefill_vit"), 17),
    ]


async def test_hover_on_a_param_still_shows_default_and_bounds(client: LanguageClient) -> None:
    uri, _ = await broken_document(client, "stale_hover.walk")
    change_document(client, uri, 3, SHIFTED)
    at = position_of(SHIFTED, "loop steps - 1", "steps")
    await assert_param_hover(client, uri, at)


async def test_nothing_answers_inside_the_edited_text(client: LanguageClient) -> None:
    uri, _ = await broken_document(client, "stale_edited.walk")
    typing, edits = replacing(BROKEN, ("tok = llm.decode(tok,", "tok = llm.dekode(tok,"),
                              ("temperature, cache=main)", "temperature, ca"))  # two places on one line
    assert typing == BROKEN.replace("tok = llm.decode(tok, temperature, cache=main)", "tok = llm.dekode(tok, temperature, ca")
    edit_document(client, uri, 3, edits)
    inside = position_of(typing, "llm.dekode(", "dekode")
    for character in (inside.character, inside.character + 3, inside.character + 6):
        at = types.Position(line=inside.line, character=character)
        assert await client.text_document_hover_async(types.HoverParams(text_document=doc(uri), position=at)) is None
        definition = await client.text_document_definition_async(types.DefinitionParams(text_document=doc(uri), position=at))
        assert isinstance(definition, list | tuple) and list(definition) == []
        references = await client.text_document_references_async(types.ReferenceParams(
            text_document=doc(uri), position=at, context=types.ReferenceContext(include_declaration=True)))
        assert references is not None and list(references) == []
    # The names on that line the edit left alone still answer, at their place in the new text.
    temperature = position_of(typing, "(tok, temperature, ca", "temperature")
    hover = await client.text_document_hover_async(types.HoverParams(text_document=doc(uri), position=temperature))
    assert hover is not None and "param temperature: float = 0.0" in str(hover.contents)
    assert hover.range is not None and hover.range.start == temperature
    # The entry `decode` is no longer written there: its references skip that line.
    refs = await client.text_document_references_async(types.ReferenceParams(
        text_document=doc(uri), position=position_of(typing, "    decode(prev: token", "decode"),
        context=types.ReferenceContext(include_declaration=True)))
    assert refs is not None and [r.range.start.line for r in refs] == [row_of(typing, "    decode(prev: token")]


async def test_once_it_parses_again_answers_come_from_the_new_text(client: LanguageClient) -> None:
    uri, _ = await broken_document(client, "stale_fixed.walk")
    fixed = SHIFTED.replace("        image -> prefill_vit\n", EACH_END).replace(
        "param steps: int = 50 in 2..200", "param steps: int = 60 in 2..100")
    change_document(client, uri, 3, fixed)
    await settle(client, uri)
    assert list(client.diagnostics[uri]) == []
    at = position_of(fixed, "loop steps - 1", "steps")
    hover = await client.text_document_hover_async(types.HoverParams(text_document=doc(uri), position=at))
    assert hover is not None and "param steps: int = 60 in 2..100" in str(hover.contents)
    flow = (await symbols_of(client, uri))[-1]
    assert flow.range.end.line == row_of(fixed, "    image_gen -> done") + 1

    # Broken again: the fallback is now that fixed text's analysis, not bagel.walk's.
    again = fixed.replace(EACH_END, "        image -> prefill_vit\n")
    change_document(client, uri, 4, again)
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=doc(uri), position=position_of(again, "loop steps - 1", "steps")))
    assert hover is not None and "param steps: int = 60 in 2..100" in str(hover.contents)


async def test_a_document_that_never_parsed_answers_nothing(client: LanguageClient) -> None:
    uri = uri_for("stale_never.walk")
    open_document(client, uri, BROKEN)
    assert await symbols_of(client, uri) == []
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=doc(uri), position=position_of(BROKEN, "loop steps - 1", "steps")))
    assert hover is None


async def test_definition_of_a_value_whose_first_binding_was_edited_answers_nothing(client: LanguageClient) -> None:
    uri, _ = await broken_document(client, "stale_value.walk")
    typing = BROKEN.replace("    z = llm.init_latents(height, width, seed)", "    zz = llm.init_latents(height, width, seed")
    change_document(client, uri, 3, typing)
    use = position_of(typing, "z = combine.step(z, t, dt", "t, dt")
    result = await client.text_document_definition_async(types.DefinitionParams(text_document=doc(uri), position=use))
    row = row_of(typing, "t = combine.timestep(i, steps")
    assert result == [types.Location(uri=uri, range=types.Range(start=types.Position(line=row, character=8),
                                                                end=types.Position(line=row, character=9)))]
    z = position_of(typing, "z = combine.step(z, t, dt", "z, t, dt")
    result = await client.text_document_definition_async(types.DefinitionParams(text_document=doc(uri), position=z))
    assert isinstance(result, list | tuple) and list(result) == []  # its first binding is being edited
