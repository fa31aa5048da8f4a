"""The reference interpreter on small programs, against call sequences written out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.check import check_source
from wgc.semantics.mock import MockEngine, mock_input, small
from wgc.sim.driver import LoopPolicy
from wgc.sim.errors import RequestError
from wgc.sim.program import ProgramFacts, facts
from wgc.sim.reference import run_reference
from wgc.sim.request import make_request

PROGRAMS = Path(__file__).parent / "programs"


def program(name: str) -> ProgramFacts:
    path = PROGRAMS / f"{name}.walk"
    checked = check_source(path.read_text(), str(path))
    assert checked.ok, checked.diagnostics
    return facts(checked)


def engine(p: ProgramFacts) -> MockEngine:
    return MockEngine(p.components)


def test_fixed_loop_terminal_and_dynamic_loop_accumulated() -> None:
    p = program("loops")
    e = engine(p)
    e.call("llm", "prefill", [mock_input("prompt")])
    z = e.call("f", "init", [])
    for i in range(3):
        z = e.call("f", "step", [z, i + 1])
    toks, tok = [], 1
    for _ in range(40):
        tok = e.call("llm", "decode", [tok])
        toks.append(tok)
        if tok == 5:
            break
    assert run_reference(p, make_request()) == {"tensor": [z, toks]}


def test_params_and_named_inputs_change_the_run() -> None:
    p = program("loops")
    base = run_reference(p, make_request())
    assert run_reference(p, make_request(params={"steps": 4}))["tensor"][0] != base["tensor"][0]
    assert run_reference(p, make_request(named={"prompt": 12}))["tensor"][1] != base["tensor"][1]


def test_loop_cap_and_forced_iterations() -> None:
    p = program("loops")
    assert len(run_reference(p, make_request(), LoopPolicy(cap=2))["tensor"][1]) <= 2
    assert len(run_reference(p, make_request(), LoopPolicy(cap=30, ignore_stop=True))["tensor"][1]) == 30


def test_parallel_branches_with_labels_and_fork() -> None:
    p = program("branches")
    e = engine(p)
    prompt = mock_input("prompt")
    e.fork("llm", "cfg", "main")
    e.call("llm", "prefill", [prompt], "main")
    a = e.call("llm", "velocity", [1], "main")
    b = e.call("llm", "velocity", [1], "cfg")
    c = e.call("llm", "velocity", [2], "main")
    assert run_reference(p, make_request()) == {"tensor": [e.call("mix", "combine", [a, b, c])]}


def test_each_block_flow() -> None:
    p = program("each")
    req = make_request(["text", "image", "text"], outputs=["image"], task="close")
    (_, p0), (_, p1), (_, p2) = req.parts
    kept = small("enc", "keep", [p1])
    want = [small("enc", "text", [p0]), small("enc", "image", [kept]), small("enc", "text", [p2]), 100]
    assert run_reference(p, req) == {"tensor": want}
    plain = make_request(["text", "image", "text"], outputs=["text"])
    assert run_reference(p, plain) == {"tensor": [want[0], small("enc", "image", [p1]), want[2]]}
    assert run_reference(p, make_request(["audio"])) == {}


def test_two_concurrent_flows_through_a_bounded_stream() -> None:
    p = program("flows")
    e = engine(p)
    toks, t = [], 2
    for _ in range(5):
        t = e.call("a", "step", [t])
        toks.append(t)
    audio = [e.call("b", "step", [h]) for h in [*toks, None, None]]  # after_end continue: empty items
    assert run_reference(p, make_request(outputs=["text", "audio"])) == {"text": toks, "audio": audio}


def test_bounded_stream_without_a_reader_does_not_block() -> None:
    """The reading flow does not start: the stream is abandoned and the producer runs on."""
    p = program("flows")
    assert len(run_reference(p, make_request(outputs=["text"]))["text"]) == 5


def test_each_policy_by_consumer_walk_and_by_recv() -> None:
    p = program("streams")
    items = [small("g", "make", [i]) for i in range(8)]
    out = run_reference(p, make_request(params={"n": 8}))
    text = out["text"]
    fixed = [x for x in text if isinstance(x, list) and len(x) == 2]
    sliding = [x for x in text if isinstance(x, list) and len(x) == 3]
    single = [x for x in text if not isinstance(x, list)]
    assert fixed == [items[0:2], items[2:4], items[4:6], items[6:8]]
    assert sliding == [items[0:3], items[2:5], items[4:7], [items[6], items[7], None]]
    stop = next((i for i, x in enumerate(items) if x == 99 % 13), None)
    assert single == (items + [None] * 9)[:9 if stop is None else stop + 1]
    contexts = [items[0:2], items[1:4], items[3:6], items[5:8]]
    assert out["audio"] == [small("sink", "audio", [c]) for c in contexts]


def test_recv_after_the_end() -> None:
    p = program("streams")  # 7 items make exactly 3 sliding windows; read_b takes 4
    with pytest.raises(RequestError, match="walk `read_b`: recv from stream `b` after it ended"):
        run_reference(p, make_request(params={"n": 7}))


def test_program_deadlock() -> None:
    text = (PROGRAMS / "flows.walk").read_text().replace("flow second when", "flow second_never when false and")
    text = text.replace("    start -> lead -> done", "    start -> lead -> follow -> done")
    checked = check_source(text, "deadlock.walk")
    assert checked.ok, checked.diagnostics
    with pytest.raises(RequestError, match="deadlock: walk `lead`: send to full stream `hand`"):
        run_reference(checked, make_request(outputs=["audio"]))


def test_unchecked_programs_are_refused() -> None:
    with pytest.raises(ValueError, match="checked programs only"):
        run_reference(check_source("model x\nflow { start -> nowhere -> done }"), make_request())
