"""`wgc graph`: output by suffix; exit 0 drawn, 1 on program or placement errors, 2 on usage or I/O errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.graph.helpers import MODELS, PLACEMENTS
from wgc.cli.graph_cmd import graph
from wgc.graph import svg as svg_module

BROKEN = """
model broken
walk w() {
    emit text undefined_name
}
flow {
    start -> w -> done
}
"""


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(graph, list(args))
    return result.exit_code, result.stderr


@pytest.mark.parametrize("suffix, head", [(".dot", "digraph"), (".gv", "digraph"), (".mmd", "%% wgc graph")])
def test_writes_the_format_of_the_suffix(tmp_path: Path, suffix: str, head: str) -> None:
    out = tmp_path / f"bagel{suffix}"
    code, err = _run(str(MODELS / "bagel.walk"), "-p", str(PLACEMENTS / "cpu3.toml"), "-o", str(out))
    assert code == 0, err
    assert out.read_text().startswith(head)
    assert "drew bagel" in err


def test_svg(tmp_path: Path) -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz `dot` is not installed (apt-get install graphviz)")
    out = tmp_path / "orpheus.svg"
    code, err = _run(str(MODELS / "orpheus.walk"), "--output", str(out))
    assert code == 0, err
    assert b"<svg" in out.read_bytes()


def test_svg_without_graphviz_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(svg_module.shutil, "which", lambda name: None)
    out = tmp_path / "orpheus.svg"
    code, err = _run(str(MODELS / "orpheus.walk"), "-o", str(out))
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and "install graphviz" in err


@pytest.mark.parametrize("name", ["out.png", "out", "out.dot.txt"])
def test_unknown_suffix_is_a_usage_error(tmp_path: Path, name: str) -> None:
    code, err = _run(str(MODELS / "orpheus.walk"), "-o", str(tmp_path / name))
    assert code == 2
    assert "unknown format" in err and ".mmd" in err


def test_output_is_required() -> None:
    code, _ = _run(str(MODELS / "orpheus.walk"))
    assert code == 2


def test_missing_model_is_an_io_error(tmp_path: Path) -> None:
    code, err = _run(str(tmp_path / "nope.walk"), "-o", str(tmp_path / "out.dot"))
    assert code == 2 and "no such file" in err


def test_missing_placement_is_an_io_error(tmp_path: Path) -> None:
    code, err = _run(str(MODELS / "bagel.walk"), "-p", str(tmp_path / "nope.toml"), "-o", str(tmp_path / "o.dot"))
    assert code == 2 and "no such file" in err


def test_broken_program_reports_diagnostics(tmp_path: Path) -> None:
    src = tmp_path / "broken.walk"
    src.write_text(BROKEN)
    out = tmp_path / "out.dot"
    code, err = _run(str(src), "-o", str(out))
    assert code == 1 and not out.exists()
    assert "broken.walk:4:" in err and "error[" in err


def test_placement_with_errors_reports_diagnostics(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "bagel"\n\n[cluster]\ndevice = "cpu"\nranks = 1\n\n[components.nosuch]\nranks = 0\n')
    out = tmp_path / "out.dot"
    code, err = _run(str(MODELS / "bagel.walk"), "-p", str(bad), "-o", str(out))
    assert code == 1 and not out.exists()
    assert "bad.toml:" in err and "nosuch" in err


def test_unwritable_output_is_an_io_error(tmp_path: Path) -> None:
    code, err = _run(str(MODELS / "orpheus.walk"), "-o", str(tmp_path / "no" / "dir" / "out.dot"))
    assert code == 2 and "cannot write" in err


def test_a_placement_warning_is_shown_and_the_graph_still_drawn(tmp_path: Path) -> None:
    out = tmp_path / "orpheus.dot"
    code, err = _run(str(MODELS / "orpheus.walk"), "-p", str(PLACEMENTS / "orpheus-tp2-hosts.toml"), "-o", str(out))
    assert code == 0, err
    assert "W101" in err and out.read_text().startswith("digraph")
