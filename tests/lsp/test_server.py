"""`wgc lsp` end to end: a real server process, driven as an editor drives it, over stdio."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.lsp.conftest import ROOT, assert_param_hover, change_document, open_document, settle

pytestmark = pytest.mark.asyncio(loop_scope="module")

BAGEL = (ROOT / "models" / "bagel.walk").read_text()


def uri_for(name: str) -> str:
    return (ROOT / "tests" / "lsp" / name).as_uri()


def doc(uri: str) -> types.TextDocumentIdentifier:
    return types.TextDocumentIdentifier(uri=uri)


def position_of(text: str, needle: str, word: str) -> types.Position:
    """The LSP position (UTF-16) of `word` on the first line containing `needle`."""
    lines = text.split("\n")
    row = next(i for i, line in enumerate(lines) if needle in line)
    column = lines[row].index(needle) + needle.index(word)
    return types.Position(line=row, character=len(lines[row][:column].encode("utf-16-le")) // 2)


def row_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n")) if needle in line)


async def opened(client: LanguageClient, name: str, text: str) -> str:
    uri = uri_for(name)
    open_document(client, uri, text)
    await settle(client, uri)
    return uri


async def test_diagnostics_appear_for_a_broken_program_and_clear_after_the_fix(client: LanguageClient) -> None:
    broken = BAGEL.replace("x = vit.encode(img)", "x = vit.encode(imgg)")
    uri = await opened(client, "broken.walk", broken)
    [diag] = client.diagnostics[uri]
    assert diag.code == "E004" and "unknown name `imgg`" in diag.message
    assert diag.severity == types.DiagnosticSeverity.Error and diag.source == "wgc"
    start = position_of(broken, "x = vit.encode(imgg)", "imgg")
    assert diag.range == types.Range(start=start, end=types.Position(line=start.line, character=start.character + 4))
    assert "did you mean `img`?" in diag.message  # the help line travels with the message

    change_document(client, uri, 2, BAGEL)
    await settle(client, uri)
    assert list(client.diagnostics[uri]) == []


async def test_syntax_error_has_its_code_and_position(client: LanguageClient) -> None:
    uri = await opened(client, "syntax.walk", "model m\nparam steps: int = = 3\n")
    [diag] = client.diagnostics[uri]
    assert diag.code == "E001"
    assert diag.range.start == types.Position(line=1, character=19)


async def test_close_clears_diagnostics(client: LanguageClient) -> None:
    uri = await opened(client, "closed.walk", "model m\nmodel n\n")
    assert client.diagnostics[uri]
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=doc(uri)))
    await client.text_document_hover_async(types.HoverParams(text_document=doc(uri), position=types.Position(line=0, character=0)))
    assert list(client.diagnostics[uri]) == []


async def test_hover_on_a_param_shows_default_and_bounds(client: LanguageClient) -> None:
    uri = await opened(client, "hover.walk", BAGEL)
    at = position_of(BAGEL, "loop steps - 1", "steps")
    await assert_param_hover(client, uri, at)


async def test_hover_on_an_entry_and_a_value(client: LanguageClient) -> None:
    uri = await opened(client, "hover2.walk", BAGEL)
    entry = await client.text_document_hover_async(types.HoverParams(
        text_document=doc(uri), position=position_of(BAGEL, "tok = llm.decode(", "decode")))
    assert entry is not None and "llm.decode(prev: token, temperature: scalar) -> token" in str(entry.contents)
    value = await client.text_document_hover_async(types.HoverParams(
        text_document=doc(uri), position=position_of(BAGEL, "z = combine.step(", "z")))
    assert value is not None and "z: tensor[N, 64; bf16]" in str(value.contents)
    nothing = await client.text_document_hover_async(types.HoverParams(
        text_document=doc(uri), position=types.Position(line=0, character=3)))  # inside a comment
    assert nothing is None


async def test_definition_of_a_component_use_jumps_to_its_declaration(client: LanguageClient) -> None:
    uri = await opened(client, "definition.walk", BAGEL)
    result = await client.text_document_definition_async(types.DefinitionParams(
        text_document=doc(uri), position=position_of(BAGEL, "tok = llm.decode(", "llm")))
    assert isinstance(result, list) and len(result) == 1
    assert result[0].uri == uri
    row = row_of(BAGEL, "component llm:")
    assert result[0].range == types.Range(start=types.Position(line=row, character=10),
                                          end=types.Position(line=row, character=13))


async def test_references_of_a_walk_list_every_use(client: LanguageClient) -> None:
    uri = await opened(client, "references.walk", BAGEL)
    refs = await client.text_document_references_async(types.ReferenceParams(
        text_document=doc(uri), position=position_of(BAGEL, "walk prefill_vit(", "prefill_vit"),
        context=types.ReferenceContext(include_declaration=True)))
    assert refs is not None
    assert sorted((r.range.start.line, r.range.start.character) for r in refs) == [
        (row_of(BAGEL, "walk prefill_vit("), 5),
        (row_of(BAGEL, "image -> prefill_vae -> prefill_vit"), 32),
        (row_of(BAGEL, "image -> prefill_vit"), 17),
    ]
    uses = await client.text_document_references_async(types.ReferenceParams(
        text_document=doc(uri), position=position_of(BAGEL, "walk prefill_vit(", "prefill_vit"),
        context=types.ReferenceContext(include_declaration=False)))
    assert uses is not None and len(uses) == 2


async def test_completion_of_component_members_while_typing(client: LanguageClient) -> None:
    uri = await opened(client, "completion.walk", BAGEL)
    typing = BAGEL.replace("    dt = t - combine", "    w = llm.\n    dt = t - combine")
    change_document(client, uri, 2, typing)
    at = position_of(typing, "    w = llm.", "llm")
    at = types.Position(line=at.line, character=at.character + 4)
    result = await client.text_document_completion_async(types.CompletionParams(text_document=doc(uri), position=at))
    assert isinstance(result, types.CompletionList)
    by_label = {item.label: item for item in result.items}
    assert {"decode", "velocity", "init_latents", "eos", "bos"} <= set(by_label)
    assert "encode" not in by_label
    assert by_label["velocity"].kind == types.CompletionItemKind.Method
    assert client.diagnostics[uri][0].code == "E001"  # the text being typed does not parse, yet completion answers


async def test_document_symbols_outline_the_model(client: LanguageClient) -> None:
    uri = await opened(client, "symbols.walk", BAGEL)
    symbols = await client.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=doc(uri)))
    assert symbols is not None
    names = [s.name for s in symbols]
    assert names[:2] == ["max_tokens", "temperature"]
    assert {"vit", "llm", "combine", "prefill_text", "image_gen", "flow"} <= set(names)
    llm = next(s for s in symbols if s.name == "llm")
    assert isinstance(llm, types.DocumentSymbol) and llm.kind == types.SymbolKind.Class
    assert "velocity" in [c.name for c in llm.children or []]


async def test_formatting_returns_the_canonical_text(client: LanguageClient) -> None:
    messy = BAGEL.replace("    x = vit.encode(img)", "        x   =   vit.encode( img )").replace(
        "walk decode() {", "walk   decode(  )   {")
    uri = await opened(client, "formatting.walk", messy)
    options = types.FormattingOptions(tab_size=4, insert_spaces=True)
    edits = await client.text_document_formatting_async(types.DocumentFormattingParams(
        text_document=doc(uri), options=options))
    assert edits is not None and len(edits) == 1
    lines = messy.split("\n")
    assert edits[0].range == types.Range(start=types.Position(line=0, character=0),
                                         end=types.Position(line=len(lines) - 1, character=len(lines[-1])))
    assert edits[0].new_text == BAGEL
    change_document(client, uri, 2, BAGEL)
    unchanged = await client.text_document_formatting_async(types.DocumentFormattingParams(
        text_document=doc(uri), options=options))
    assert unchanged is not None and list(unchanged) == []


async def test_utf16_columns_after_non_ascii_text(client: LanguageClient) -> None:
    # Three emoji (two UTF-16 units each) before `n`: a server counting code points would be 3 off.
    text = ('model m\n\nimport wgc.models.x as x\n\nparam voice: str = "🎉🎉🎉" param n: int = 3 in 1..9\n\n'
            'component c: x.Y engine stateless {\n    f(v: str) -> audio\n}\n\n'
            'walk w() {\n    loop n {\n        emit audio c.f(voice)\n    }\n}\n\n'
            'flow {\n    start -> w -> done\n}\n')
    uri = await opened(client, "utf16.walk", text)
    assert list(client.diagnostics[uri]) == []
    decl = position_of(text, "param n:", "n")
    assert decl.character == len('param voice: str = "🎉🎉🎉" param ') + 3
    hover = await client.text_document_hover_async(types.HoverParams(text_document=doc(uri), position=decl))
    assert hover is not None and "param n: int = 3 in 1..9" in str(hover.contents)
    result = await client.text_document_definition_async(types.DefinitionParams(
        text_document=doc(uri), position=position_of(text, "loop n {", "n")))
    assert isinstance(result, list)
    assert [r.range for r in result] == [types.Range(start=decl, end=types.Position(line=decl.line, character=decl.character + 1))]

    broken = text.replace("param n: int", "param n: itn")
    change_document(client, uri, 2, broken)
    await settle(client, uri)
    codes = {d.code: d for d in client.diagnostics[uri]}
    start = decl.character - len("param ")  # the diagnostic spans the whole declaration
    assert codes["E027"].range == types.Range(
        start=types.Position(line=decl.line, character=start),
        end=types.Position(line=decl.line, character=start + len("param n: itn = 3 in 1..9")))


async def test_a_size_literal_too_large_for_a_float_is_analysed_not_crashed(client: LanguageClient) -> None:
    """It once made the AST builder raise (the guard answered "could not analyse"); a size is exact now.
    The guard itself is tested with an injected crash in test_index.py and test_guard.py."""
    text = "model m\ncomponent c: a.B engine kv { weights = " + "9" * 400 + "B }\n"
    uri = await opened(client, "huge.walk", text)
    assert not any("could not analyse" in d.message for d in client.diagnostics[uri])
    change_document(client, uri, 2, BAGEL)
    symbols = await client.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=doc(uri)))
    assert symbols and list(client.diagnostics[uri]) == []
