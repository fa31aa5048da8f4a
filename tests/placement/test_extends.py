"""`extends`: relative resolution, merge rules, positions kept from the base, cycles rejected."""

from __future__ import annotations

from pathlib import Path

from tests.placement.helpers import rendered, stand_in, write
from wgc.placement import load_placement
from wgc.placement.tables import MAX_EXTENDS_DEPTH

BASE = """\
[cluster]
device = "cuda"
gpu = "H200"
ranks = 2

[defaults]
ranks = 0
engine = { kv_memory_fraction = 0.3, cuda_graph_buckets = [1, 2, 4] }

[components]
snac = 1
"""


def test_child_overrides_scalars_and_merges_tables(tmp_path: Path) -> None:
    write(tmp_path, "base/gpus.toml", BASE)
    child = write(tmp_path, "child.toml", 'extends = "base/gpus.toml"\n[defaults.engine]\nmax_batch = 8\n'
                  "cuda_graph_buckets = [1, 2]\n")
    loaded, diags = load_placement(child, stand_in("orpheus"))
    assert loaded is not None, rendered(diags)
    llm = loaded.component("llm")
    assert llm is not None
    assert llm.engine.kv_memory_fraction == 0.3  # kept from the base table
    assert llm.engine.cuda_graph_buckets == (1, 2)  # arrays are replaced whole
    assert llm.engine.max_batch == 8
    assert loaded.component("snac").ranks == (1,)  # type: ignore[union-attr]
    assert [Path(s).name for s in loaded.sources] == ["gpus.toml", "child.toml"]


def test_chain_of_bases_resolves_each_relative_to_its_own_file(tmp_path: Path) -> None:
    write(tmp_path, "a/b/root.toml", BASE)
    write(tmp_path, "a/mid.toml", 'extends = "b/root.toml"\n[cluster]\nranks = 3\n')
    top = write(tmp_path, "top.toml", 'extends = "a/mid.toml"\n[components]\nsnac = 2\n')
    loaded, diags = load_placement(top, stand_in("orpheus"))
    assert loaded is not None, rendered(diags)
    assert loaded.cluster.ranks == 3 and loaded.component("snac").ranks == (2,)  # type: ignore[union-attr]
    assert len(loaded.sources) == 3


def test_errors_in_base_values_point_into_the_base(tmp_path: Path) -> None:
    write(tmp_path, "base.toml", BASE.replace("snac = 1", "snac = 5"))
    child = write(tmp_path, "child.toml", 'extends = "base.toml"\n')
    _, diags = load_placement(child, stand_in("orpheus"))
    assert [(d.code, Path(d.span.file).name, d.span.line, d.span.column) for d in diags] == [
        ("P012", "base.toml", 11, 8)
    ]


def test_a_child_can_fix_a_base_value(tmp_path: Path) -> None:
    write(tmp_path, "base.toml", BASE.replace("snac = 1", "snac = 5"))
    child = write(tmp_path, "child.toml", 'extends = "base.toml"\n[components]\nsnac = 1\n')
    loaded, diags = load_placement(child, stand_in("orpheus"))
    assert loaded is not None and not diags, rendered(diags)
    assert loaded.component("snac").ranks == (1,)  # type: ignore[union-attr]  # the child's value, not 5
    assert loaded.cluster.ranks == 2  # the rest still from the base


def test_self_extension_is_a_cycle(tmp_path: Path) -> None:
    me = write(tmp_path, "me.toml", 'extends = "me.toml"\n')
    _, diags = load_placement(me, stand_in("orpheus"))
    assert [(d.code, d.span.line, d.span.column) for d in diags] == [("P006", 1, 11)]


def test_three_file_cycle_names_every_link(tmp_path: Path) -> None:
    for a, b in (("a", "b"), ("b", "c"), ("c", "a")):
        write(tmp_path, f"{a}.toml", f'extends = "{b}.toml"\n')
    _, diags = load_placement(tmp_path / "a.toml", stand_in("orpheus"))
    assert [d.code for d in diags] == ["P006"]
    assert Path(diags[0].span.file).name == "c.toml"
    assert [Path(n.span.file).name for n in diags[0].notes] == ["a.toml", "b.toml"]


def test_a_diamond_is_not_a_cycle(tmp_path: Path) -> None:
    """Two files may extend the same base; only a path back to itself is a cycle."""
    write(tmp_path, "base.toml", BASE)
    write(tmp_path, "left.toml", 'extends = "base.toml"\n')
    top = write(tmp_path, "top.toml", 'extends = "left.toml"\n')
    loaded, diags = load_placement(top, stand_in("orpheus"))
    assert loaded is not None and not diags, rendered(diags)
    assert [Path(s).name for s in loaded.sources] == ["base.toml", "left.toml", "top.toml"]
    assert loaded.cluster.ranks == 2 and loaded.component("snac").ranks == (1,)  # type: ignore[union-attr]


def test_too_deep_chain(tmp_path: Path) -> None:
    n = MAX_EXTENDS_DEPTH + 2
    for i in range(n):
        write(tmp_path, f"f{i}.toml", f'extends = "f{i + 1}.toml"\n')
    write(tmp_path, f"f{n}.toml", BASE)
    _, diags = load_placement(tmp_path / "f0.toml", stand_in("orpheus"))
    assert [d.code for d in diags] == ["P006"]
    assert "deeper than" in diags[0].message


def test_extends_must_be_a_string(tmp_path: Path) -> None:
    path = write(tmp_path, "p.toml", "extends = 3\n" + BASE)
    _, diags = load_placement(path, stand_in("orpheus"))
    assert [(d.code, d.span.line) for d in diags] == [("P003", 1)]


def test_syntax_error_in_a_base(tmp_path: Path) -> None:
    write(tmp_path, "base.toml", "[cluster\n")
    child = write(tmp_path, "child.toml", 'extends = "base.toml"\n')
    _, diags = load_placement(child, stand_in("orpheus"))
    assert [(d.code, Path(d.span.file).name) for d in diags] == [("P001", "base.toml")]


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(b"\xff\xfe[cluster]\n")
    _, diags = load_placement(path, stand_in("orpheus"))
    assert [d.code for d in diags] == ["P005"]
    _, diags = load_placement(tmp_path / "absent.toml", stand_in("orpheus"))
    assert [(d.code, d.span.line, d.span.column) for d in diags] == [("P005", 1, 1)]
