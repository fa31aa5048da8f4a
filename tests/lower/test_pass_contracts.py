"""The lowering passes' contracts: what each requires and produces, checked between passes, and
`fuse` optional in fact (every shipped pair compiles, verifies and runs on fake components without it).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from wgc.runtime.process.local import LocalCluster

from tests.lower.golden_pairs import PAIRS, ROOT, paths
from tests.runtime.test_runtime_vs_simulator import REQUESTS, _spec
from wgc.check import CheckResult, check_source
from wgc.compile import compile_program, verify_plan
from wgc.lower import pipeline
from wgc.lower.ir import Op, WalkIR, all_ops
from wgc.lower.pipeline import PASSES, LoweringOrderError, LowerState, check_order, lower
from wgc.lower.verify_ir import IRError
from wgc.placement.load import load_placement
from wgc.placement.schema import Placement
from wgc.plan import model as m
from wgc.plan.text import plan_text
from wgc.sim.request import make_request
from wgc.sim.simulator import simulate

NAMES = ["build", "place", "fuse", "flatten", "comm", "flows", "kv", "partition", "liveness", "captures", "assemble"]


def _checked_and_placed(model: str, placement: str) -> tuple[CheckResult, Placement]:
    source, place = paths(model, placement)
    checked = check_source((ROOT / source).read_text(), source)
    loaded, diags = load_placement(ROOT / place, checked.program)
    assert loaded is not None, [d.message for d in diags]
    return checked, loaded


# ---- the declared order ---------------------------------------------------------------------------


def test_the_pass_list_satisfies_every_declared_requirement() -> None:
    assert [p.name for p in PASSES] == NAMES
    check_order(PASSES)
    assert [p.name for p in PASSES if p.optional] == ["fuse"]


def test_a_pass_before_what_it_needs_is_refused_naming_the_property() -> None:
    by_name = {p.name: p for p in PASSES}
    comm_first = [by_name[n] for n in ["build", "place", "comm", "flatten"]]
    with pytest.raises(LoweringOrderError, match=r"`comm` requires \['flat'\]"):
        check_order(comm_first)
    with pytest.raises(LoweringOrderError, match="before `flatten`"):
        check_order([by_name[n] for n in ["build", "place", "flatten", "fuse"]])
    with pytest.raises(LoweringOrderError, match="no check knows"):
        check_order([replace(by_name["build"], produces=frozenset({"walkz"}))])


def test_only_optional_passes_can_be_skipped() -> None:
    checked, loaded = _checked_and_placed("orpheus", "cpu")
    with pytest.raises(ValueError, match="flatten"):
        lower(checked, loaded, "o.walk", "p.toml", skip={"flatten"})


def test_a_product_read_before_its_pass_ran_names_that_pass() -> None:
    checked, loaded = _checked_and_placed("orpheus", "cpu")
    state = LowerState(checked.program, checked.symbols, loaded, "o.walk", "p.toml")
    with pytest.raises(LoweringOrderError, match=r"`flows` was read before pass `flows` produced it"):
        _ = state.flows
    pipeline.pass_flows(state)
    assert state.flows  # now it is there


# ---- the verifier between passes ------------------------------------------------------------------


def test_a_pass_that_leaves_parallel_blocks_fails_at_that_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    checked, loaded = _checked_and_placed("bagel", "cpu")
    monkeypatch.setattr(pipeline, "flatten_walk", lambda walk: None)  # flatten forgets its job
    with pytest.raises(IRError, match=r"^flat: walk image_gen still has the parallel block of line \d+"):
        lower(checked, loaded, "b.walk", "p.toml")


def test_an_operation_left_without_a_rank_fails_the_placed_check(monkeypatch: pytest.MonkeyPatch) -> None:
    checked, loaded = _checked_and_placed("orpheus", "cpu")
    real = pipeline.place_walk

    def place_but_one(walk: WalkIR, placement: Placement) -> None:
        real(walk, placement)
        all_ops(walk.body)[0].ranks = []

    monkeypatch.setattr(pipeline, "place_walk", place_but_one)
    with pytest.raises(IRError, match=r"^placed: a \w+ of \w+ \(line \d+\) is on ranks \[\]"):
        lower(checked, loaded, "o.walk", "p.toml")


def test_a_read_after_free_fails_the_frees_check(monkeypatch: pytest.MonkeyPatch) -> None:
    checked, loaded = _checked_and_placed("orpheus", "cpu")
    real = pipeline.insert_frees

    def free_first(instrs: list[m.Instr], keep: set[str], inputs: list[str]) -> list[m.Instr]:
        """Every input freed before the walk's first instruction."""
        out = real(instrs, keep, inputs)
        return [m.Free(list(inputs), out[0].src), *out] if inputs else out

    monkeypatch.setattr(pipeline, "insert_frees", free_first)
    with pytest.raises(IRError, match=r"^frees: rank 0, \w+: instruction \d+ reads `\w+`, freed at 0"):
        lower(checked, loaded, "o.walk", "p.toml")


def test_a_one_lane_batched_call_fails_the_fused_check(monkeypatch: pytest.MonkeyPatch) -> None:
    checked, loaded = _checked_and_placed("bagel", "cpu")
    real = pipeline.fuse_walk

    def fuse_and_wrap(walk: WalkIR) -> None:
        real(walk)
        op = next(o for o in all_ops(walk.body) if o.kind == "run" and not o.lanes) if walk.name == "image_gen" else None
        if op is not None:
            op.lanes = [Op("run", op.src, component=op.component, entry=op.entry, ranks=op.ranks)]

    monkeypatch.setattr(pipeline, "fuse_walk", fuse_and_wrap)
    with pytest.raises(IRError, match=r"^fused: a batched call of image_gen"):
        lower(checked, loaded, "b.walk", "p.toml")


# ---- fuse is optional -----------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "placement"), PAIRS, ids=[f"{m}-{p}" for m, p in PAIRS])
def test_without_fuse_every_pair_compiles_verifies_and_runs_as_with_it(model: str, placement: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    source, place = paths(model, placement)
    text = (ROOT / source).read_text()
    fused = compile_program(source, text, place).plan
    unfused = compile_program(source, text, place, skip_passes={"fuse"})
    assert unfused.plan is not None and unfused.data is not None, [d.message for d in unfused.diagnostics]
    assert verify_plan(unfused.plan) == []  # the simulator runs every rank's schedule clean
    assert fused is not None
    requests = [make_request(**kw) for kw in REQUESTS.get(model, [{}])]
    expected = [simulate(fused, r) for r in requests]
    assert [simulate(unfused.plan, r) for r in requests] == expected
    assert list(LocalCluster(unfused.plan).run([_spec(r) for r in requests]).values()) == expected


def test_fuse_is_what_merges_bagel_guidance_branches() -> None:
    """With fuse, BAGEL's three guidance velocities on one rank are one RUN of three lanes; without it, three."""
    checked, loaded = _checked_and_placed("bagel", "cpu")

    def velocity_runs(plan: m.Plan) -> list[int]:
        return [len(i.labels) for ws in plan.ranks[0].schedules if ws.walk == "image_gen"
                for i in ws.instructions if isinstance(i, m.Run) and i.entry == "velocity"]

    with_fuse = lower(checked, loaded, "b.walk", "p.toml")
    without = lower(checked, loaded, "b.walk", "p.toml", skip={"fuse"})
    assert velocity_runs(with_fuse) == [3] and velocity_runs(without) == [1, 1, 1]
    assert plan_text(with_fuse) != plan_text(without)


# ---- the docs say the same order ------------------------------------------------------------------


@pytest.mark.parametrize("doc", ["docs/architecture.md", "README.md", "wgc/lower/pipeline.py"])
def test_the_docs_list_the_passes_in_the_code_s_order(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    if doc == "README.md":
        found = re.search(r"runs named passes — ([a-z, \n]+) —", text)
        assert found is not None
        named = [w.strip() for w in found.group(1).replace("\n", " ").split(",")]
    else:
        arrows = next(line for line in text.splitlines() if "→ assemble" in line)
        named = [w.strip() for w in arrows.split("→")]
        named = named[named.index("build", 2 if doc.endswith(".md") else 0):named.index("assemble") + 1]
    assert named == NAMES, doc


def test_every_model_file_is_in_a_compiled_pair() -> None:
    assert {p.stem for p in (ROOT / "models").glob("*.walk")} == {model for model, _ in PAIRS}

