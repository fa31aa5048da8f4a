"""Lowering passes on small programs and on the shipped models: what each pass must produce."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lower.golden_pairs import ROOT
from wgc.check import check_source
from wgc.compile import compile_program
from wgc.lang import ast
from wgc.lower.pipeline import PASSES, lower
from wgc.placement.load import load_placement
from wgc.plan import model as m
from wgc.plan.model import Plan


def compile_text(tmp_path: Path, source: str, placement: str) -> Plan:
    checked = check_source(source, "t.walk")
    assert checked.ok, [d.message for d in checked.diagnostics]
    place = tmp_path / "p.toml"
    place.write_text(placement)
    loaded, diags = load_placement(place, checked.program)
    assert loaded is not None, [d.message for d in diags]
    return lower(checked, loaded, "t.walk", "p.toml")


def compile_shipped(model: str, placement: str) -> Plan:
    source = ROOT / "models" / f"{model}.walk"
    checked = check_source(source.read_text(), f"models/{model}.walk")
    loaded, diags = load_placement(ROOT / "placements" / f"{placement}.toml", checked.program)
    assert loaded is not None, [d.message for d in diags]
    return lower(checked, loaded, f"models/{model}.walk", f"placements/{placement}.toml")


def instrs(plan: Plan, rank: int, walk: str) -> list[m.Instr]:
    for ws in plan.ranks[rank].schedules:
        if ws.walk == walk:
            return ws.instructions
    return []


CPU2 = """
[cluster]
device = "cpu"
ranks = 2
[defaults]
ranks = [0]
engine = { kv_memory = "64MiB" }
"""

GUIDED = """
model guided
import wgc.models.toy as toy
param steps: int = 4 in 2..8
component llm: toy.Llm engine kv {
    velocity(z: tensor[N, 4; f32], t: scalar) -> tensor[N, 4; f32]
    init() -> tensor[N, 4; f32]
    labels main, cfg
}
component mix: toy.Mix engine stateless {
    step(z: tensor[N, 4; f32], a: tensor[N, 4; f32], b: tensor[N, 4; f32]) -> tensor[N, 4; f32]
}
walk gen() {
    z = llm.init()
    loop steps as t carry z {
        parallel {
            a = llm.velocity(z, t, cache=main)
            b = llm.velocity(z, t, cache=cfg)
        }
        z = mix.step(z, a, b)
    } yield terminal z
    emit tensor z
}
flow { start -> gen -> done }
"""


def test_pass_list_is_named_and_ordered() -> None:
    names = [p.name for p in PASSES]
    assert names == ["build", "place", "fuse", "flatten", "comm", "flows", "kv", "partition", "liveness", "captures",
                     "assemble"]


def test_same_rank_branches_fuse_into_one_batched_run(tmp_path: Path) -> None:
    plan = compile_text(tmp_path, GUIDED, CPU2)
    runs = [i for i in instrs(plan, 0, "gen") if isinstance(i, m.Run) and i.entry == "velocity"]
    assert len(runs) == 1
    assert runs[0].labels == ["main", "cfg"] and runs[0].outputs == ["a", "b"]


def test_branches_pinned_to_different_ranks_stay_apart_with_transfers(tmp_path: Path) -> None:
    placement = CPU2 + """
[components.llm]
ranks = [0, 1]
routing = "mirror"
[walks.gen.branches]
a = [0]
b = [1]
"""
    plan = compile_text(tmp_path, GUIDED, placement)
    r0, r1 = instrs(plan, 0, "gen"), instrs(plan, 1, "gen")
    assert [i.labels for i in r0 if isinstance(i, m.Run) and i.entry == "velocity"] == [["main"]]
    assert [i.labels for i in r1 if isinstance(i, m.Run) and i.entry == "velocity"] == [["cfg"]]
    sends = [(i.value, i.tag) for i in r0 if isinstance(i, m.Send)]
    recvs = [(i.value, i.tag) for i in r1 if isinstance(i, m.Recv)]
    assert ("z", sends[0][1]) in sends and sends[0] in recvs  # the latent crosses every step
    back = [(i.value, i.tag) for i in r1 if isinstance(i, m.Send)]
    assert back and back[0][0] == "b" and back[0] in [(i.value, i.tag) for i in r0 if isinstance(i, m.Recv)]


def test_a_branch_on_another_rank_gets_its_inputs_before_the_local_branch_runs(tmp_path: Path) -> None:
    """The SEND of z is hoisted to the start of the step, before rank 0's own velocity: the two branches
    overlap (before, rank 0 ran its branch and only then sent the other its input)."""
    placement = CPU2 + """
[components.llm]
ranks = [0, 1]
routing = "mirror"
[walks.gen.branches]
a = [0]
b = [1]
"""
    r0 = instrs(compile_text(tmp_path, GUIDED, placement), 0, "gen")
    send_z = next(k for k, i in enumerate(r0) if isinstance(i, m.Send) and i.value == "z")
    local = next(k for k, i in enumerate(r0) if isinstance(i, m.Run) and i.entry == "velocity")
    assert send_z < local


def test_every_send_has_a_matching_recv_in_the_same_order(tmp_path: Path) -> None:
    for model, placement in [("bagel", "cpu3"), ("orpheus", "orpheus-pd"), ("qwen3_omni", "2xh200")]:
        plan = compile_shipped(model, placement)
        for walk in plan.walks:
            for a in plan.ranks:
                for b in plan.ranks:
                    sent = [i.tag for i in instrs(plan, a.rank, walk.name)
                            if isinstance(i, (m.Send, m.KvSend)) and i.peer == b.rank]
                    got = [i.tag for i in instrs(plan, b.rank, walk.name)
                           if isinstance(i, (m.Recv, m.KvRecv)) and i.peer == a.rank]
                    assert sent == got, (model, placement, walk.name, a.rank, b.rank)


def test_prefill_decode_split_ships_the_kv_cache() -> None:
    plan = compile_shipped("orpheus", "orpheus-pd")
    assert any(isinstance(i, m.KvSend) and i.peer == 1 for i in instrs(plan, 0, "prefill"))
    assert any(isinstance(i, m.KvRecv) and i.peer == 0 for i in instrs(plan, 1, "prefill"))
    assert not any(isinstance(i, m.Run) for i in instrs(plan, 0, "decode"))


def test_dynamic_loop_stop_reaches_every_rank_in_the_loop(tmp_path: Path) -> None:
    plan = compile_shipped("bagel", "cpu3")
    for rank in plan.ranks:
        body = instrs(plan, rank.rank, "decode")
        ends = [i for i in body if isinstance(i, m.EndLoop)]
        if not ends:
            continue
        stop = ends[0].stop
        assert stop is not None
        assert any((isinstance(i, m.Eval) and i.output == stop) or (isinstance(i, m.Recv) and i.value == stop)
                   for i in body)


def test_values_are_freed_after_their_last_use_and_never_read_after(tmp_path: Path) -> None:
    plan = compile_text(tmp_path, GUIDED, CPU2)
    body = instrs(plan, 0, "gen")
    freed_at = {name: i for i, ins in enumerate(body) if isinstance(ins, m.Free) for name in ins.values}
    assert "a" in freed_at and "b" in freed_at  # per-iteration values die inside the loop body
    loop_end = next(i for i, ins in enumerate(body) if isinstance(ins, m.EndLoop))
    assert freed_at["a"] < loop_end
    assert freed_at["z"] > loop_end  # the carried latent lives through the loop


def test_walk_ends_with_next_on_the_rank_that_holds_its_result() -> None:
    plan = compile_shipped("orpheus", "orpheus-pd")
    spec = next(w for w in plan.walks if w.name == "prefill")
    last = instrs(plan, spec.end_rank, "prefill")[-1]
    assert isinstance(last, m.Next) and last.result == "tok"


def test_cuda_placement_gets_capture_specs_and_cpu_none() -> None:
    gpu = compile_shipped("orpheus", "1xh200")
    cpu = compile_shipped("orpheus", "cpu")
    assert gpu.captures and all(c.buckets for c in gpu.captures)
    runs = [i for i in instrs(gpu, 0, "decode") if isinstance(i, m.Run)]
    assert runs and all(r.graph_id >= 0 for r in runs)
    assert not cpu.captures


# What the source text at an instruction's position starts with, by instruction kind.
_SOURCE_STARTS = {m.Loop: "loop", m.EndLoop: "loop", m.Emit: "emit", m.Push: "send", m.Pop: "recv", m.Fork: "fork"}


def _source_at(lines: list[str], src: m.Src) -> str:
    if src.line == src.end_line:
        return lines[src.line - 1][src.column - 1:src.end_column - 1]
    return "\n".join([lines[src.line - 1][src.column - 1:], *lines[src.line:src.end_line - 1],
                      lines[src.end_line - 1][:src.end_column - 1]])


@pytest.mark.parametrize(("model", "placement"), [("bagel", "cpu"), ("bagel", "cpu3"), ("orpheus", "cpu"),
                                                  ("orpheus", "orpheus-pd"), ("pi05", "cpu"),
                                                  ("qwen3_omni", "cpu"), ("vjepa2_ac", "cpu")])
def test_every_instruction_points_at_the_source_it_came_from(model: str, placement: str) -> None:
    plan = compile_shipped(model, placement)
    text = (ROOT / "models" / f"{model}.walk").read_text()
    lines = text.split("\n")
    program = check_source(text, f"{model}.walk").program
    assert program is not None
    walks = {d.name: d.span for d in program.decls if isinstance(d, ast.Walk)}
    checked: set[str] = set()
    for rank in plan.ranks:
        for ws in rank.schedules:
            walk = walks[ws.walk]
            inside = ((walk.line, walk.column), (walk.end_line, walk.end_column))
            for ins in ws.instructions:
                where = ((ins.src.line, ins.src.column), (ins.src.end_line, ins.src.end_column))
                assert inside[0] <= where[0] <= where[1] <= inside[1], (ws.walk, ins)  # within its walk
                text = _source_at(lines, ins.src)
                assert text.strip(), (ws.walk, ins)
                if isinstance(ins, m.Next):
                    assert where == inside, (ws.walk, ins)  # the walk's whole declaration
                elif isinstance(ins, m.Run):
                    assert text.startswith(f"{ins.component}.{ins.entry}("), (ws.walk, ins, text)
                elif type(ins) in _SOURCE_STARTS:
                    assert text.startswith(_SOURCE_STARTS[type(ins)]), (ws.walk, ins, text)
                checked.add(type(ins).__name__)
    assert {"Run", "Next", "Free"} <= checked


ZERO_TRIP = """
model zero_trip
import wgc.models.toy as toy
param n: int = 0 in 0..200
component mix: toy.Mix engine stateless {
    add(a: scalar, b: scalar) -> scalar
}
walk count(x: scalar) {
    loop n as i {
        emit tensor mix.add(x, i)
    }
    emit tensor x
}
flow { start -> count -> done }
"""


def test_a_loop_index_dies_inside_the_body_so_a_zero_trip_loop_verifies(tmp_path: Path) -> None:
    source, place = tmp_path / "t.walk", tmp_path / "p.toml"
    source.write_text(ZERO_TRIP)
    place.write_text(CPU2)
    result = compile_program(str(source), ZERO_TRIP, str(place))
    assert result.data is not None, [d.message for d in result.diagnostics]
    body = instrs(result.plan, 0, "count")
    loop_end = next(i for i, ins in enumerate(body) if isinstance(ins, m.EndLoop))
    freed_at = {name: i for i, ins in enumerate(body) if isinstance(ins, m.Free) for name in ins.values}
    assert freed_at["i"] < loop_end  # the index is written afresh by each iteration, and by none when n == 0


def test_engine_settings_reach_the_component_specs(tmp_path: Path) -> None:
    placement = CPU2.replace('engine = { kv_memory = "64MiB" }',
                             'engine = { kv_memory = "64MiB", token_budget = 96, prefix_caching = false }')
    specs = {c.name: c.settings for c in compile_text(tmp_path, GUIDED, placement).components}
    assert (specs["llm"]["token_budget"], specs["llm"]["prefix_caching"]) == (96, False)
    assert (specs["mix"]["token_budget"], specs["mix"]["prefix_caching"]) == (512, True)  # always written
    gpu = {c.name: c.settings for c in compile_shipped("orpheus", "1xh200").components}
    assert (gpu["llm"]["token_budget"], gpu["llm"]["prefix_caching"]) == (8192, True)
