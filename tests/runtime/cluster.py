"""Compiling small programs for runtime tests, and running them on toy components in one process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wgc.runtime.components.base import Component, load_class
from wgc.runtime.process.local import LocalCluster

from wgc.check import check_source
from wgc.lower.pipeline import lower
from wgc.placement.load import load_placement
from wgc.plan.model import ComponentSpec, Plan


def cpu_placement(ranks: int, extra: str = "") -> str:
    return f"""
[cluster]
device = "cpu"
ranks = {ranks}
[defaults]
ranks = [0]
engine = {{ kv_memory = "64MiB" }}
{extra}
"""


def compile_text(tmp_path: Path, source: str, placement: str) -> Plan:
    checked = check_source(source, "t.walk")
    assert checked.ok, [f"{d.span}: {d.message}" for d in checked.diagnostics if d.is_error]
    place = tmp_path / "p.toml"
    place.write_text(placement)
    loaded, diags = load_placement(place, checked.program)
    assert loaded is not None, [d.message for d in diags]
    return lower(checked, loaded, "t.walk", "p.toml")


class ToyCluster(LocalCluster):
    """A LocalCluster whose components are the real classes the program names (tests/runtime/toys.py)."""

    def __init__(self, plan: Plan) -> None:
        self.made: list[Component] = []

        def factory(spec: ComponentSpec, rank: int) -> Component:
            comp = load_class(spec.cls)(spec, rank, "cpu")
            self.made.append(comp)
            return comp

        super().__init__(plan, factory, fake_inputs=False)

    def component(self, name: str, rank: int = 0) -> Component:
        return next(c for c in self.made if c.spec.name == name and c.rank == rank)

    def leftovers(self) -> dict[int, dict[str, int]]:
        """Per rank, every counter that should be zero once no request is in flight and is not."""
        out = {}
        for ex in self.executors:
            counters = ex.counters()
            keys = ["instances", "requests", "mailbox", "stream_ends"]
            keys += [k for k in counters if k.endswith(".requests")]
            bad = {k: counters[k] for k in keys if counters.get(k)}
            if ex.states:
                bad["states"] = len(ex.states)
            if ex.ready:
                bad["queued"] = len(ex.ready)
            if bad:
                out[ex.rank] = bad
        return out


def outputs_by_request(cluster: LocalCluster, ids: list[int]) -> dict[int, list[Any]]:
    """Run the cluster dry; every request's output values in order (no request may fail)."""
    cluster.pump()
    out: dict[int, list[Any]] = {i: [] for i in ids}
    for e in cluster.take_events():
        assert e.kind != "error", e.error
        if e.kind == "output" and e.output is not None:
            out[e.request].append(e.output.value)
    return out
