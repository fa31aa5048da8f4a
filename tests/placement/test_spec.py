"""The schema (wgc/placement/spec.py) as the one description of a placement: every key it defines
is documented with its default, the reader applies each struct's keys and nothing else, and
`[cluster]` is read before any rank set wherever it is written."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.placement.helpers import ROOT, rendered, stand_in, write
from wgc.placement import load_placement
from wgc.placement.spec import (
    ClusterTable,
    ComponentTable,
    DefaultsTable,
    EngineTable,
    HostTable,
    ServeTable,
    StreamTable,
    Table,
    TopTable,
    TransportTable,
    WalkTable,
    default,
)

DOC = (ROOT / "docs" / "placement.md").read_text(encoding="utf-8")

# Each struct and the headings of docs/placement.md that document its keys.
SECTIONS: dict[type[Table], tuple[str, ...]] = {
    TopTable: ("### Top level",),
    ClusterTable: ("### `[cluster]`",),
    HostTable: ("### `[[cluster.hosts]]`",),
    DefaultsTable: ("### `[defaults]`",),
    ComponentTable: ("### `[components.NAME]`",),
    EngineTable: ("### `[components.NAME.engine]` and `[defaults.engine]`",),
    WalkTable: ("### `[walks.WALK.components]`", "### `[walks.WALK.branches]`"),
    StreamTable: ("### `[streams.STREAM]`",),
    TransportTable: ("### `[transport]`",),
    ServeTable: ("### `[serve]`",),
}


def _section(heading: str) -> str:
    start = DOC.index(heading + "\n")
    end = re.compile(r"\n##+ ").search(DOC, start + len(heading))
    return DOC[start : end.start() if end else len(DOC)]


def _keys(struct: type[Table]) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(struct) if f.metadata]


@pytest.mark.parametrize("struct", SECTIONS, ids=lambda s: s.__name__)
def test_every_key_of_the_schema_is_documented_in_its_section(struct: type[Table]) -> None:
    text = "".join(_section(h) for h in SECTIONS[struct])
    missing = [f.name for f in _keys(struct) if not re.search(rf"`{f.name}`|\.{f.name}\]`", text)]
    assert not missing, f"{struct.__name__}: keys not in docs/placement.md: {missing}"


def _shown(value: object) -> str:
    """A default as the docs write it: `true`, `[]`, 16."""
    if isinstance(value, bool):
        return str(value).lower()
    return "[]" if value == () else str(value)


@pytest.mark.parametrize("struct", SECTIONS, ids=lambda s: s.__name__)
def test_every_default_of_the_schema_is_the_documented_one(struct: type[Table]) -> None:
    text = "".join(_section(h) for h in SECTIONS[struct])
    for f in _keys(struct):
        if f.metadata["default"] is None:
            continue
        row = next(line for line in text.splitlines() if line.startswith(f"| `{f.name}` |"))
        assert re.search(rf"(^|[\s`(|]){re.escape(_shown(default(struct, f.name)))}([\s`)|]|$)", row), (f.name, row)


def test_every_struct_is_documented() -> None:
    structs = {v for v in vars(__import__("wgc.placement.spec", fromlist=["*"])).values()
               if isinstance(v, type) and issubclass(v, Table) and v is not Table}
    assert structs == set(SECTIONS)


def test_the_cluster_is_read_before_rank_sets_written_above_it(tmp_path: Path) -> None:
    text = ('[components.llm]\nranks = 0\nengine = { kv_memory = "64MiB" }\n[components.snac]\nranks = 5\n'
            '[cluster]\ndevice = "cpu"\nranks = 2\n')
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    assert loaded is None
    assert [(d.code, d.span.line, d.span.column) for d in diags] == [("P012", 5, 9)], rendered(diags)
    assert "the cluster has ranks 0..1" in diags[0].message


def test_given_values_override_the_schema_defaults_and_absent_ones_take_them(tmp_path: Path) -> None:
    base = '[cluster]\ndevice = "cpu"\nranks = 1\n[defaults]\nranks = 0\nengine = { kv_memory = "64MiB" }\n'
    plain, diags = load_placement(write(tmp_path, "a.toml", base), stand_in("orpheus"))
    assert plain is not None, rendered(diags)
    llm = plain.component("llm")
    assert llm is not None
    assert (llm.engine.page_size, llm.engine.prefix_caching) == (default(EngineTable, "page_size"), True)
    assert (plain.transport.bind, plain.transport.port) == ("127.0.0.1", default(TransportTable, "port"))
    given, diags = load_placement(write(tmp_path, "b.toml", base.replace('"64MiB"', '"64MiB", page_size = 32')
                                        + '[transport]\nport = 29700\nbind = ""\n'), stand_in("orpheus"))
    assert given is not None, rendered(diags)
    assert given.component("llm").engine.page_size == 32  # type: ignore[union-attr]
    assert (given.transport.bind, given.transport.port) == ("127.0.0.1", 29700)  # an empty bind is not given


BASE = '[cluster]\ndevice = "cpu"\nranks = 1\n[defaults]\nranks = 0\nengine = { kv_memory = "64MiB" }\n'
# Each struct, and a placement (for the orpheus stand-in) with an unknown key `zzz` in its table.
UNKNOWN_KEY_IN: dict[type[Table], str] = {
    TopTable: "zzz = 1\n" + BASE,
    ClusterTable: BASE.replace("ranks = 1\n", "ranks = 1\nzzz = 1\n"),
    HostTable: BASE + '[[cluster.hosts]]\nname = "a"\nranks = 0\nzzz = 1\n',
    DefaultsTable: BASE + "zzz = 1\n",
    ComponentTable: BASE + "[components.snac]\nranks = 0\nzzz = 1\n",
    EngineTable: BASE + '[components.llm]\nranks = 0\n[components.llm.engine]\nkv_memory = "64MiB"\nzzz = 1\n',
    WalkTable: BASE + "[walks.decode]\nzzz = 1\n",
    StreamTable: BASE + "[streams.codes]\nzzz = 1\n",
    TransportTable: BASE + "[transport]\nzzz = 1\n",
    ServeTable: BASE + "[serve]\nzzz = 1\n",
}


@pytest.mark.parametrize("struct", UNKNOWN_KEY_IN, ids=lambda s: s.__name__)
def test_each_table_is_read_by_its_struct(tmp_path: Path, struct: type[Table]) -> None:
    """An unknown key is refused where it is written, and the help lists exactly that struct's keys."""
    text = UNKNOWN_KEY_IN[struct]
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    assert loaded is None
    line = text.splitlines().index("zzz = 1") + 1
    assert [(d.code, d.span.line) for d in diags] == [("P002", line)], rendered(diags)
    assert diags[0].help[-1].endswith(" are: " + ", ".join(f.name for f in _keys(struct)))
