"""Which documents the server treats as TOML, and which TOML as placements (wgc/lsp/placement_rule.py)."""

from __future__ import annotations

import pytest

from wgc.lsp.placement_rule import is_placement, is_toml


@pytest.mark.parametrize(("uri", "language_id", "toml"), [
    ("file:///w/p.toml", "toml", True),
    ("file:///w/p.toml", "plaintext", True),  # named .toml: TOML whatever the client calls it
    ("untitled:Untitled-1", "toml", True),  # the client says TOML: never analysed as .walk
    ("file:///w/m.walk", "walk", False),
    ("file:///w/p.TOML", "", True),
])
def test_which_documents_are_toml(uri: str, language_id: str, toml: bool) -> None:
    assert is_toml(uri, language_id) is toml


@pytest.mark.parametrize(("text", "placement"), [
    ('[cluster]\nranks = 1\n', True),
    ('[[cluster.hosts]]\nname = "a"\n', True),
    ('cluster.ranks = 2\n', True),
    ('extends = "cpu.toml"\n[components]\nllm = 0\n', True),  # its cluster is its base's
    ('extends = 3\n', True),  # a placement with a bad `extends`: its error is shown
    ('[project]\nname = "wgc"\n[tool.x]\nextends = "y"\n', False),  # extends, but not at the top level
    ('[clusters]\nn = 1\n', False),
    ('[tool.ruff]\nline-length = 120\n', False),
    ('', False),
    # not TOML: judged from its lines
    ('# a comment\n[cluster\ndevice = "cpu"\n', True),
    ('[[cluster.hosts]\n', True),
    ('extends = "cpu.toml\n', True),
    ('[project\nname = "wgc"\n', False),
    ('[tool.x]\nextends = \n', False),
    ('[cluster-names\n', False),
])
def test_which_toml_is_a_placement(text: str, placement: bool) -> None:
    assert is_placement(text) is placement
