"""A plan edited and re-hashed (every checksum holds) with a broken internal reference: refused on
load, by `wgc run` and `wgc inspect` alike, in one line naming the place (wgc/plan/check.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from wgc.compile import compile_program
from wgc.plan.check import first_problem
from wgc.plan.file import PlanFileError, decode_plan, encode_plan, load_plan
from wgc.plan.model import EParam, EReq, KvSend, Plan, Push, Run, Transition

ROOT = Path(__file__).resolve().parents[2]
replace = msgspec.structs.replace


def _compiled(model: str, placement: str) -> Plan:
    source = ROOT / "models" / f"{model}.walk"
    result = compile_program(str(source), source.read_text(), str(ROOT / "placements" / placement))
    assert result.data is not None
    return decode_plan(result.data)[1]


@pytest.fixture(scope="module")
def orpheus() -> Plan:
    return _compiled("orpheus", "orpheus-pd.toml")  # two ranks: sends, streams across ranks


def _edit_first(plan: Plan, kind: type, change: Callable[[object], object]) -> tuple[Plan, str, int]:
    """`plan` with its first instruction of `kind` changed; also the walk and the instruction index."""
    for r, rank in enumerate(plan.ranks):
        for s, schedule in enumerate(rank.schedules):
            for i, ins in enumerate(schedule.instructions):
                if isinstance(ins, kind):
                    instructions = [*schedule.instructions]
                    instructions[i] = change(ins)
                    schedules = [*rank.schedules]
                    schedules[s] = replace(schedule, instructions=instructions)
                    ranks = [*plan.ranks]
                    ranks[r] = replace(rank, schedules=schedules)
                    return replace(plan, ranks=ranks), schedule.walk, i
    raise AssertionError(f"no {kind.__name__} in the plan")


def _run_component(plan: Plan) -> tuple[Plan, str]:
    edited, walk, i = _edit_first(plan, Run, lambda ins: replace(ins, component="llmx"))
    return edited, f"walk `{walk}`, instruction {i} (RUN) names component `llmx`, which the plan does not declare"


def _run_entry(plan: Plan) -> tuple[Plan, str]:
    edited, _, _ = _edit_first(plan, Run, lambda ins: replace(ins, entry="nope"))
    return edited, ".`nope`, an entry the component does not have"


def _push_stream(plan: Plan) -> tuple[Plan, str]:
    edited, _, _ = _edit_first(plan, Push, lambda ins: replace(ins, stream="kodes"))
    return edited, "(PUSH) names stream `kodes`, which the plan does not declare"


def _stream_renamed(plan: Plan) -> tuple[Plan, str]:
    return (replace(plan, streams=[replace(s, name="other") for s in plan.streams]),
            "walk `snac_chunk` is fired by stream `codes`, which the plan does not declare")


def _kv_send_peer(plan: Plan) -> tuple[Plan, str]:
    edited, _, _ = _edit_first(plan, KvSend, lambda ins: replace(ins, peer=7))
    return edited, "(KVSEND) names peer rank 7, but the plan has ranks 0..1"


def _flow_walk(plan: Plan) -> tuple[Plan, str]:
    flow = plan.flows[0]
    transitions = {**flow.transitions, "start": [Transition("prefil", None)]}
    return (replace(plan, flows=[replace(flow, transitions=transitions), *plan.flows[1:]]),
            "goes from `start` to `prefil`, which is neither a walk nor an each-block")


def _param_field(plan: Plan) -> tuple[Plan, str]:
    edited, _, _ = _edit_first(plan, Run, lambda ins: replace(ins, args=[[EParam("tempo")] + lane[1:] for lane in ins.args]))
    return edited, "reads param `tempo`, which the plan does not declare"


def _request_field(plan: Plan) -> tuple[Plan, str]:
    edited, _, _ = _edit_first(plan, Run, lambda ins: replace(ins, args=[[EReq("secret")] + lane[1:] for lane in ins.args]))
    return edited, "reads request field `secret`"


def _walk_rank(plan: Plan) -> tuple[Plan, str]:
    walk = replace(plan.walks[0], ranks=[0, 5])
    return replace(plan, walks=[walk, *plan.walks[1:]]), f"walk `{walk.name}` names rank 5, but the plan has ranks 0..1"


def _consumer_walk(plan: Plan) -> tuple[Plan, str]:
    stream = replace(plan.streams[0], consumer_walk="snac_chunks")
    return replace(plan, streams=[stream]), "stream `codes` fires walk `snac_chunks`, which the plan does not declare"


def _component_rank(plan: Plan) -> tuple[Plan, str]:
    comps = [replace(c, ranks=[3]) if c.name == "snac" else c for c in plan.components]
    return replace(plan, components=comps), "component `snac` is placed on rank 3, but the plan has ranks 0..1"


def _odd_name(plan: Plan) -> tuple[Plan, str]:
    edited, _, _ = _edit_first(plan, Push, lambda ins: replace(ins, stream="a\nb"))
    return edited, "names stream 'a\\nb', which the plan does not declare"


BREAKS = [_run_component, _run_entry, _push_stream, _stream_renamed, _kv_send_peer, _flow_walk, _param_field, _request_field,
          _walk_rank, _consumer_walk, _component_rank, _odd_name]


def test_every_shipped_plan_has_sound_references(orpheus: Plan) -> None:
    assert first_problem(orpheus) is None
    for model, placement in (("bagel", "cpu3.toml"), ("qwen3_omni", "2xh200.toml"), ("pi05", "1xh100.toml")):
        assert first_problem(_compiled(model, placement)) is None, model


@pytest.mark.parametrize("breaks", BREAKS, ids=lambda f: f.__name__.strip("_"))
def test_a_rehashed_plan_with_a_broken_reference_is_refused_on_load(tmp_path: Path, orpheus: Plan,
                                                                    breaks: Callable[[Plan], tuple[Plan, str]]) -> None:
    edited, text = breaks(orpheus)
    path = tmp_path / "edited.plan"
    path.write_bytes(encode_plan(edited, "", ""))  # every hash recomputed: only the references are wrong
    with pytest.raises(PlanFileError) as caught:
        load_plan(path)
    err = caught.value
    assert err.kind == "invalid" and "\n" not in str(err), str(err)
    assert str(err).startswith(f"{path}: plan body is invalid: ") and text in str(err), str(err)


@pytest.mark.parametrize("command", [["run", "--fake", "--request", "{}"], ["inspect"]])
def test_wgc_run_and_inspect_refuse_it_in_one_line(tmp_path: Path, orpheus: Plan, command: list[str]) -> None:
    edited, text = _run_component(orpheus)
    path = tmp_path / "edited.plan"
    path.write_bytes(encode_plan(edited, "", ""))
    done = subprocess.run([sys.executable, "-m", "wgc", command[0], str(path), *command[1:]], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and text in done.stderr and "Traceback" not in done.stderr, done.stderr
