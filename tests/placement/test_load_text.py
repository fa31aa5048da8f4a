"""`load_placement(path, program, text)`, the placement read from text the caller holds (`wgc lsp`:
the editor's copy), gives what it gives from the file: the same placement and diagnostics for every
shipped placement (against its model) and every error example (against its stand-in program)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.placement.helpers import MODELS, PLACEMENTS, parse_file, stand_in
from tests.placement.test_errors import EXAMPLES, read_expected
from wgc.lang import ast
from wgc.placement import load_placement
from wgc.placement.document import load_with_bases
from wgc.placement.load import model_key

SHIPPED = sorted(PLACEMENTS.glob("*.toml"))


def _program_for(placement: Path) -> ast.Program:
    """The model a shipped placement names (its own `model` or its base's), else orpheus: the
    generic placements serve any model."""
    tree, _, _ = load_with_bases(placement, placement.read_text(encoding="utf-8"))
    named = tree.get("model") if tree is not None else None
    wanted = model_key(str(named.value)) if named is not None else "orpheus"
    [walk] = [p for p in MODELS.glob("*.walk") if model_key(p.stem) == wanted]
    return parse_file(walk)


def _same(path: Path, program: ast.Program) -> None:
    from_file = load_placement(path, program)
    from_text = load_placement(path, program, path.read_text(encoding="utf-8"))
    assert from_text == from_file


@pytest.mark.parametrize("placement", SHIPPED, ids=lambda p: p.stem)
def test_a_shipped_placement_reads_the_same_from_its_text(placement: Path) -> None:
    _same(placement, _program_for(placement))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_an_error_example_reads_the_same_from_its_text(example: Path) -> None:
    program, _ = read_expected(example)
    _same(example, stand_in(program))


@pytest.mark.parametrize("extends", ['3', '""', '"p.toml"', '"missing.toml"', '"base.toml"'])
def test_a_bad_extends_in_the_text_is_reported_as_from_the_file(tmp_path: Path, extends: str) -> None:
    (tmp_path / "base.toml").write_text('extends = "p.toml"\n[cluster]\nranks = 1\n', encoding="utf-8")
    path = tmp_path / "p.toml"
    path.write_text(f'extends = {extends}\n[cluster]\ndevice = "cpu"\n', encoding="utf-8")
    _same(path, stand_in("orpheus"))
    assert load_placement(path, stand_in("orpheus"))[1]  # each one is an error


def test_the_text_is_read_not_the_file(tmp_path: Path) -> None:
    on_disk = tmp_path / "p.toml"
    on_disk.write_text('[cluster]\ndevice = "cpu"\nranks = 1\n', encoding="utf-8")
    _, diags = load_placement(on_disk, stand_in("orpheus"), '[cluster\n')
    assert [(d.code, d.span.file, d.span.line) for d in diags] == [("P001", str(on_disk), 1)]


def test_a_base_is_resolved_beside_the_top_file_even_when_that_file_is_not_saved(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text('[cluster]\ndevice = "cpu"\nranks = 1\n', encoding="utf-8")
    tree, sources, diags = load_with_bases(tmp_path / "unsaved.toml", 'extends = "base.toml"\nmodel = "x"\n')
    assert diags == [] and tree is not None
    assert sources == (str(tmp_path / "base.toml"), str(tmp_path / "unsaved.toml"))
    assert tree.get("cluster") is not None and tree.get("model") is not None


def test_a_base_the_caller_holds_is_read_from_its_text_not_from_disk(tmp_path: Path) -> None:
    from wgc.placement.document import identity

    base, child = tmp_path / "base.toml", tmp_path / "child.toml"
    base.write_text('[cluster]\ndevice = "cpu"\nranks = 1\n[defaults]\nranks = 0\n'
                    '[defaults.engine]\nkv_memory = "64MiB"\n', encoding="utf-8")
    child.write_text('extends = "base.toml"\n', encoding="utf-8")
    program = stand_in("orpheus")
    on_disk, _ = load_placement(child, program)
    assert on_disk is not None and on_disk.cluster.ranks == 1
    held = {identity(base): base.read_text(encoding="utf-8").replace("ranks = 1", "ranks = 2")}
    from_editor, diags = load_placement(child, program, held=held)
    assert from_editor is not None, diags
    assert from_editor.cluster.ranks == 2 and from_editor.sources == (str(base), str(child))


def test_a_base_that_cannot_be_read_is_still_listed_among_the_sources(tmp_path: Path) -> None:
    """So that an editor knows to check the placement again when that base appears."""
    child = tmp_path / "child.toml"
    child.write_text('extends = "missing.toml"\n', encoding="utf-8")
    _, sources, diags = load_with_bases(child)
    assert [d.code for d in diags] == ["P005"]
    assert sources == (str(tmp_path / "missing.toml"), str(child))
