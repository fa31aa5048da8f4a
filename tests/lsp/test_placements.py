"""`wgc lsp` on placement files: a real server process publishes, for a placement `.toml` open in
the editor, what `wgc compile` reports for it, from the editor's text, against the program its
`model` names; and nothing for TOML that is not a placement."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.lsp.conftest import ROOT, change_document, open_document, settle
from wgc.compile import compile_program
from wgc.diag.diagnostic import Diagnostic
from wgc.lsp.positions import LineTable
from wgc.placement import load_placement

pytestmark = pytest.mark.asyncio(loop_scope="module")

PLACEMENTS = ROOT / "placements"
ORPHEUS = ROOT / "models" / "orpheus.walk"
TP2_HOSTS = PLACEMENTS / "orpheus-tp2-hosts.toml"
TP2_TEXT = TP2_HOSTS.read_text(encoding="utf-8")
WARNING, INFORMATION = types.DiagnosticSeverity.Warning, types.DiagnosticSeverity.Information


async def opened_toml(client: LanguageClient, path: Path, text: str) -> str:
    """Open `path` (it need not exist on disk: the editor's text is what is checked) as TOML."""
    uri = path.as_uri()
    open_document(client, uri, text, language_id="toml")
    await settle(client, uri)
    return uri


async def changed(client: LanguageClient, uri: str, version: int, text: str) -> list[types.Diagnostic]:
    change_document(client, uri, version, text)
    await settle(client, uri)
    return list(client.diagnostics[uri])


def lsp_range(text: str, d: Diagnostic) -> types.Range:
    return LineTable(text).to_range(d.span)


def at(text: str, needle: str, width: int | None = None) -> types.Range:
    """The range of the first `needle` in `text`."""
    row = next(i for i, line in enumerate(text.split("\n")) if needle in line)
    column = text.split("\n")[row].index(needle)
    return types.Range(start=types.Position(line=row, character=column),
                       end=types.Position(line=row, character=column + (width or len(needle))))


def codes(diags: list[types.Diagnostic]) -> list[str | int | None]:
    return sorted(str(d.code) for d in diags)


async def test_a_tp_copy_across_hosts_warns_w101_where_wgc_compile_does(client: LanguageClient) -> None:
    compiled = compile_program(str(ORPHEUS), ORPHEUS.read_text(encoding="utf-8"), str(TP2_HOSTS))
    [expected] = compiled.diagnostics
    assert expected.code == "W101" and compiled.data is not None

    uri = await opened_toml(client, TP2_HOSTS, TP2_TEXT)
    [diag] = client.diagnostics[uri]
    assert diag.code == "W101" and diag.severity == WARNING and diag.source == "wgc"
    assert diag.range == lsp_range(TP2_TEXT, expected) == at(TP2_TEXT, "llm]", 3)  # line 29, column 13
    assert diag.message == expected.message + "".join(f"\nhelp: {h}" for h in expected.help)


async def test_an_unknown_key_is_published_at_its_key_and_cleared_when_it_is_fixed(client: LanguageClient) -> None:
    path = PLACEMENTS / "lsp-unsaved-edit.toml"  # never written: the editor's copy is the document
    uri = await opened_toml(client, path, TP2_TEXT)
    assert codes(client.diagnostics[uri]) == ["W101"]

    typo = TP2_TEXT.replace("tp = 2", "tpp = 2")
    diags = await changed(client, uri, 2, typo)
    [unknown] = [d for d in diags if d.code == "P002"]
    assert unknown.range == at(typo, "tpp", 3)
    assert "unknown key `tpp` in [components.llm]" in unknown.message
    assert "\nhelp: did you mean `tp`?" in unknown.message
    assert unknown.severity == types.DiagnosticSeverity.Error
    # all of them, each at its place, as wgc compile would report them for this text
    _, expected = load_placement(path, _orpheus(), typo)
    assert [(d.code, d.range) for d in diags] == [(e.code, lsp_range(typo, e)) for e in expected]

    assert codes(await changed(client, uri, 3, TP2_TEXT)) == ["W101"]


async def test_a_rank_out_of_range_is_published_at_the_rank(client: LanguageClient) -> None:
    uri = await opened_toml(client, PLACEMENTS / "lsp-unsaved-rank.toml", TP2_TEXT)
    wide = TP2_TEXT.replace("ranks = [0, 1]", "ranks = [0, 5]")
    [diag] = await changed(client, uri, 2, wide)
    assert diag.code == "P012" and "rank 5 is out of range" in diag.message
    assert diag.range == at(wide, "5]", 1)
    assert codes(await changed(client, uri, 3, TP2_TEXT)) == ["W101"]


async def test_a_warning_in_a_base_is_shown_on_extends_and_points_into_the_base(client: LanguageClient) -> None:
    text = 'extends = "orpheus-tp2-hosts.toml"  # its model, cluster and components\n'
    uri = await opened_toml(client, PLACEMENTS / "lsp-unsaved-child.toml", text)
    [diag] = client.diagnostics[uri]
    assert diag.code == "W101" and diag.range == at(text, '"orpheus-tp2-hosts.toml"')
    assert diag.related_information is not None
    there = diag.related_information[0].location
    assert there.uri == TP2_HOSTS.as_uri() and there.range == at(TP2_TEXT, "llm]", 3)


async def test_a_program_that_cannot_be_found_is_one_information_diagnostic_at_model(client: LanguageClient) -> None:
    text = 'model = "no_such_model"\n\n[cluster]\ndevice = "cpu"\nranks = 1\n'
    uri = await opened_toml(client, ROOT / "tests" / "lsp" / "lost.toml", text)
    [diag] = client.diagnostics[uri]
    assert diag.severity == INFORMATION and diag.range == at(text, '"no_such_model"')
    assert "no .walk file declaring `model no_such_model`" in diag.message
    assert "`tests/lsp/`, `tests/`, `models/`" in diag.message  # where it was looked for
    assert "Traceback" not in diag.message


async def test_a_placement_naming_no_model_says_how_to_name_one(client: LanguageClient) -> None:
    cpu = PLACEMENTS / "cpu.toml"
    uri = await opened_toml(client, cpu, cpu.read_text(encoding="utf-8"))
    [diag] = client.diagnostics[uri]
    assert diag.severity == INFORMATION and diag.range.start == types.Position(line=0, character=0)
    assert "names no model" in diag.message and 'model = "NAME"' in diag.message


@pytest.mark.parametrize("name", ["pyproject.toml", "broken-pyproject.toml"])
async def test_toml_that_is_not_a_placement_gets_no_diagnostics(client: LanguageClient, name: str) -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    if name.startswith("broken"):  # not TOML either: still not a placement's syntax error
        text = text.replace("[tool.ruff]", "[tool.ruff", 1)
    uri = await opened_toml(client, ROOT / name, text)
    assert list(client.diagnostics[uri]) == []


async def test_editing_the_program_checks_its_open_placements_again(client: LanguageClient) -> None:
    uri = await opened_toml(client, PLACEMENTS / "lsp-unsaved-program.toml", TP2_TEXT)
    assert codes(client.diagnostics[uri]) == ["W101"]
    program = ORPHEUS.read_text(encoding="utf-8")
    walk = ORPHEUS.as_uri()

    renamed = re.sub(r"\bllm\b", "lm", program)  # every use, so the program itself still checks
    open_document(client, walk, renamed)
    await settle(client, walk)
    assert list(client.diagnostics[walk]) == []
    await settle(client, uri)
    [unknown] = client.diagnostics[uri]
    assert unknown.code == "P008" and "unknown component `llm`" in unknown.message
    assert unknown.range == at(TP2_TEXT, "llm]", 3)

    broken = program.replace("component llm:", "component llm::", 1)
    change_document(client, walk, 2, broken)
    await settle(client, walk)
    await settle(client, uri)
    [notice] = client.diagnostics[uri]
    assert notice.severity == INFORMATION and "models/orpheus.walk" in notice.message
    assert "has errors" in notice.message and notice.range == at(TP2_TEXT, '"orpheus"')

    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=walk)))
    await settle(client, uri)  # the program on disk again
    assert codes(client.diagnostics[uri]) == ["W101"]


async def test_bad_toml_is_a_located_diagnostic_and_the_server_stays_up(client: LanguageClient,
                                                                        tmp_path: Path) -> None:
    text = '[cluster\ndevice = "cpu"\nranks = 1\n'
    on_disk = tmp_path / "syntax.toml"
    on_disk.write_text(text, encoding="utf-8")
    [expected] = load_placement(on_disk, _orpheus())[1]  # what wgc compile says of this text

    uri = await opened_toml(client, PLACEMENTS / "lsp-unsaved-syntax.toml", text)
    [diag] = client.diagnostics[uri]
    assert diag.code == "P001" and diag.message == expected.message
    assert diag.range == lsp_range(text, expected) and diag.range.start.line == 0
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=1)))
    assert hover is None  # answered: the server is up

    [notice] = await changed(client, uri, 2, text.replace("[cluster", "[cluster]", 1))
    assert notice.severity == INFORMATION and "names no model" in notice.message  # the syntax error gone


async def test_a_missing_base_is_reported_at_extends(client: LanguageClient) -> None:
    text = 'extends = "nowhere.toml"\n\n[cluster]\nranks = 1\n'
    uri = await opened_toml(client, PLACEMENTS / "lsp-unsaved-base.toml", text)
    [diag] = client.diagnostics[uri]
    assert diag.code == "P005" and "does not exist" in diag.message
    assert diag.range == at(text, '"nowhere.toml"')


def _orpheus():
    from wgc.check import check_source

    program = check_source(ORPHEUS.read_text(encoding="utf-8"), str(ORPHEUS)).program
    assert program is not None
    return program


async def test_an_open_base_is_read_from_the_editor_and_checks_its_placements_again(client: LanguageClient) -> None:
    """The base is not on disk: first missing (P005), then the editor's copy (W101 from it, then an
    error in it as it is edited), then missing again once it is closed."""
    base = PLACEMENTS / "lsp-unsaved-open-base.toml"
    assert not base.exists()
    text = f'extends = "{base.name}"\n'
    uri = await opened_toml(client, PLACEMENTS / "lsp-unsaved-open-child.toml", text)
    [missing] = client.diagnostics[uri]
    assert missing.code == "P005" and "does not exist" in missing.message

    base_uri = await opened_toml(client, base, TP2_TEXT)
    await settle(client, uri)
    [warning] = client.diagnostics[uri]
    assert warning.code == "W101" and warning.range == at(text, f'"{base.name}"')

    bad = TP2_TEXT.replace("[cluster]\n", "[cluster]\nrankz = 2\n", 1)
    await changed(client, base_uri, 2, bad)
    await settle(client, uri)
    assert "P002" in codes(client.diagnostics[uri])  # the base's unknown key, as the editor has it

    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=base_uri)))
    await settle(client, uri)
    [missing] = client.diagnostics[uri]
    assert missing.code == "P005"
