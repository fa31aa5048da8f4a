"""SVG through Graphviz: runs where `dot` is installed; without it, a clear error (tested everywhere)."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from tests.graph.helpers import CASES, case_id, dot_text, drawing
from wgc.graph import GraphvizError, render
from wgc.graph import svg as svg_module

SVG_ROOT = "{http://www.w3.org/2000/svg}svg"


def _need_dot() -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz `dot` is not installed (apt-get install graphviz)")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_graphviz_reads_the_dot_without_a_warning(case: tuple[str, str | None]) -> None:
    _need_dot()
    proc = subprocess.run(["dot", "-Tsvg"], input=dot_text(*case).encode(), capture_output=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr.decode()
    assert ET.fromstring(proc.stdout).tag == SVG_ROOT


def test_svg_is_well_formed_xml_with_an_svg_root() -> None:
    _need_dot()
    data = render(drawing("bagel", "cpu3.toml"), ".svg")
    root = ET.fromstring(data)
    assert root.tag == SVG_ROOT
    texts = {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert "llm.fork [cfg_text <- main]" in texts  # entities decoded by Graphviz, re-escaped as XML


def test_missing_graphviz_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(svg_module.shutil, "which", lambda name: None)
    with pytest.raises(GraphvizError) as err:
        render(drawing("orpheus"), ".svg")
    message = str(err.value)
    assert "\n" not in message and "install graphviz" in message and ".dot" in message
