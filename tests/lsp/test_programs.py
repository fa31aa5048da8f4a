"""Finding the program a placement names (wgc/lsp/programs.py): where, in which order, which text."""

from __future__ import annotations

import os
from pathlib import Path

from wgc.lsp.document import analyse
from wgc.lsp.programs import Programs, declared_model, search_dirs

PROGRAM = "model {name}\n\ncomponent llm: m.LM engine stateless {{\n}}\n"


def _write(path: Path, name: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PROGRAM.format(name=name), encoding="utf-8")
    return path


def test_the_model_line_is_read_without_parsing() -> None:
    assert declared_model("# m\nmodel qwen3_omni\ncomponent ???") == "qwen3_omni"
    assert declared_model("# model x\n") is None


def test_the_placement_directory_then_its_parent_then_the_workspace_models(tmp_path: Path) -> None:
    placement = tmp_path / "deploy" / "placements" / "p.toml"
    assert search_dirs(placement, tmp_path) == (tmp_path / "deploy" / "placements", tmp_path / "deploy",
                                                tmp_path / "models")
    assert search_dirs(tmp_path / "p.toml", tmp_path) == (tmp_path, tmp_path.parent, tmp_path / "models")
    assert search_dirs(placement, None) == (placement.parent, placement.parent.parent)

    dirs = search_dirs(placement, tmp_path)
    models = _write(tmp_path / "models" / "tts.walk", "tts")
    found = Programs().find("tts", dirs, [])
    assert found is not None and found.path == models and found.checked.program is not None
    nearer = _write(tmp_path / "deploy" / "tts_copy.walk", "TTS")  # names compare as P007 compares them
    assert Programs().find("tts", dirs, []).path == nearer  # type: ignore[union-attr]
    assert Programs().find("other", dirs, []) is None


def test_a_file_named_after_the_model_comes_first_in_its_directory(tmp_path: Path) -> None:
    _write(tmp_path / "a_old.walk", "tts")
    named = _write(tmp_path / "tts.walk", "tts")
    assert Programs().find("tts", [tmp_path], []).path == named  # type: ignore[union-attr]


def test_an_open_program_is_read_as_the_editor_holds_it(tmp_path: Path) -> None:
    on_disk = _write(tmp_path / "tts.walk", "tts")
    edited = analyse(PROGRAM.format(name="renamed"), str(on_disk))
    assert Programs().find("tts", [tmp_path], [edited]) is None  # the editor's copy declares another model
    unsaved = analyse(PROGRAM.format(name="fresh"), str(tmp_path / "fresh.walk"))  # not on disk at all
    found = Programs().find("fresh", [tmp_path], [unsaved])
    assert found is not None and found.checked is unsaved.checked


def test_a_program_on_disk_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = _write(tmp_path / "tts.walk", "tts")
    programs = Programs()
    first = programs.find("tts", [tmp_path], [])
    assert first is not None and programs.find("tts", [tmp_path], []).checked is first.checked  # type: ignore[union-attr]
    path.write_text(PROGRAM.format(name="tts") + "# changed\n", encoding="utf-8")
    os.utime(path, ns=(1, 1))
    again = programs.find("tts", [tmp_path], [])
    assert again is not None and again.checked is not first.checked
