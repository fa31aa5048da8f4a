"""Placement warnings (W1xx): a placement that loads carries them on `placement.warnings`, and
`wgc compile` reports them without failing. W101: a tensor-parallel copy whose ranks are on
different hosts, whose all-reduces then cross the network every layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.placement.helpers import MODELS, PLACEMENTS, parse_file, rendered, stand_in, write
from wgc.compile import compile_program
from wgc.placement import load_placement

HOSTS = ('[cluster]\ndevice = "cpu"\nranks = {ranks}\n'
         '{hosts}'
         "[components]\nsnac = 0\n"
         "[components.llm]\nranks = {llm}\ntp = {tp}\n{more}"
         'engine = {{ kv_memory = "64MiB" }}\n')


def _host(name: str, address: str, ranks: str) -> str:
    return f'[[cluster.hosts]]\nname = "{name}"\naddress = "{address}"\nranks = {ranks}\n'


def test_a_tp_copy_across_two_hosts_warns_at_the_component_naming_both(tmp_path: Path) -> None:
    text = HOSTS.format(ranks=2, hosts=_host("a", "127.0.0.2", "0") + _host("b", "127.0.0.3", "1"),
                        llm="[0, 1]", tp=2, more="")
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    assert loaded is not None and diags == [], rendered(diags)  # a warning does not stop the load
    [w] = loaded.warnings
    line = text.splitlines().index("[components.llm]") + 1
    assert (w.code, w.severity, w.span.line, w.span.column) == ("W101", "warning", line, 13)
    assert "`llm` (tp = 2) spans hosts `a`, `b`" in w.message and "every layer" in w.message
    assert w.help == ("ranks 0, 1 form one copy of `llm`: put each copy's ranks on one host, or lower tp",)


def test_tp_copies_each_within_one_host_do_not_warn(tmp_path: Path) -> None:
    """Two tp = 2 copies, one per host, and the components of one rank each: no warning."""
    text = HOSTS.format(ranks=4, hosts=_host("a", "127.0.0.2", "[0, 1]") + _host("b", "127.0.0.3", "[2, 3]"),
                        llm='"0-3"', tp=2, more='routing = "least_loaded"\n')
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    assert loaded is not None, rendered(diags)
    assert loaded.component("llm").copies == ((0, 1), (2, 3))  # type: ignore[union-attr]
    assert loaded.warnings == ()


def test_data_parallel_copies_on_different_hosts_do_not_warn(tmp_path: Path) -> None:
    """tp = 1: each copy is one rank and all-reduces nothing, wherever the copies are."""
    text = HOSTS.format(ranks=2, hosts=_host("a", "127.0.0.2", "0") + _host("b", "127.0.0.3", "1"),
                        llm="[0, 1]", tp=1, more='routing = "least_loaded"\n')
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    assert loaded is not None, rendered(diags)
    assert loaded.warnings == ()


def test_one_warning_per_component_for_the_first_copy_across_hosts(tmp_path: Path) -> None:
    hosts = _host("a", "127.0.0.2", "0") + _host("b", "127.0.0.3", "[1, 2]") + _host("c", "127.0.0.4", "3")
    text = HOSTS.format(ranks=4, hosts=hosts, llm='"0-3"', tp=2, more='routing = "least_loaded"\n')
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    assert loaded is not None, rendered(diags)
    assert [(w.code, "hosts `a`, `b`:" in w.message) for w in loaded.warnings] == [("W101", True)]


def test_the_shipped_tp2_hosts_placement_warns_and_still_compiles() -> None:
    """orpheus-tp2-hosts.toml splits the LM across two loopback hosts on purpose (the CPU test of
    TP over Gloo): `wgc compile` writes its plan and reports the warning."""
    source = MODELS / "orpheus.walk"
    result = compile_program(str(source), source.read_text(encoding="utf-8"), str(PLACEMENTS / "orpheus-tp2-hosts.toml"))
    assert result.data is not None, [d.message for d in result.diagnostics]
    assert [(d.code, d.span.line) for d in result.diagnostics] == [("W101", 29)]
    assert "`node0`, `node1`" in result.diagnostics[0].message


@pytest.mark.parametrize(("placement", "model", "warned"), [
    ("orpheus-tp2-hosts.toml", "orpheus", "llm"),
    ("llama-tp2-hosts.toml", "llama", "lm"),
    ("bagel-tp2-hosts.toml", "bagel", "llm"),
    ("qwen3-omni-tp2-hosts.toml", "qwen3_omni", "thinker"),
    ("qwen3-omni-tp2-2hosts.toml", "qwen3_omni", None),  # its thinker's two ranks are on host gpu-a
])
def test_the_shipped_multi_host_placements_warn_for_the_copies_they_split(placement: str, model: str,
                                                                          warned: str | None) -> None:
    loaded, diags = load_placement(PLACEMENTS / placement, parse_file(MODELS / f"{model}.walk"))
    assert loaded is not None and diags == [], rendered(diags)
    assert [(w.code, w.message.split("`")[1]) for w in loaded.warnings] == ([("W101", warned)] if warned else [])
