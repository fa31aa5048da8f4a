"""Each construct's run-time meaning, exactly, on toy components: one rank and several."""

from __future__ import annotations

from pathlib import Path

import pytest
from wgc.runtime.coordinator.request import RequestError, RequestSpec
from wgc.runtime.protocol.messages import Part

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement
from wgc.compile import compile_program

DECODE = """
model toyllm
import tests.runtime.toys as toy
param max_tokens: int = 8 in 1..100
param stop_at: int = 1000 in 0..1000
component llm: toy.Counter engine kv {
    prefill(prompt: text) -> token
    decode(prev: token) -> token
    history(x: token) -> tokens
}
walk prefill(prompt: text) -> token {
    tok = llm.prefill(prompt)
    emit text tok
    return tok
}
walk decode(first: token) {
    loop until tok == stop_at max max_tokens carry tok = first NOSPEC {
        tok = llm.decode(tok)
        emit text tok
    } yield terminal tok
    emit text llm.history(tok)
}
flow { start -> prefill -> decode -> done }
"""


def decode_program(nospec: bool) -> str:
    return DECODE.replace("NOSPEC", "nospec" if nospec else "")


@pytest.mark.parametrize("nospec", [False, True])
def test_dynamic_loop_stops_exactly_and_speculation_never_shows_the_wasted_step(tmp_path: Path, nospec: bool) -> None:
    plan = compile_text(tmp_path, decode_program(nospec), cpu_placement(1))
    cluster = ToyCluster(plan)
    out = cluster.run([RequestSpec(params={"stop_at": 6}, inputs={"prompt": "abc"})])
    text = next(iter(out.values()))["text"]
    assert text[:-1] == [3, 4, 5, 6]  # prefill 3, then decode until the token equals stop_at
    assert text[-1] == [3, 4, 5, 6]  # the KV history: the speculative step was rolled back
    decode_calls = sum(n for entry, n in cluster.component("llm").batches if entry == "decode")
    assert decode_calls == (3 if nospec else 4)  # speculation ran (and dropped) exactly one extra step
    assert not cluster.leftovers()


def test_dynamic_loop_bound_comes_from_each_requests_params(tmp_path: Path) -> None:
    plan = compile_text(tmp_path, decode_program(False), cpu_placement(1))
    cluster = ToyCluster(plan)
    out = cluster.run([RequestSpec(params={"max_tokens": n}, inputs={"prompt": "ab"}) for n in (1, 3, 50)])
    lengths = [len(o["text"]) - 2 for o in out.values()]  # minus the prefill token and the history
    assert lengths == [1, 3, 50]
    # Continuous batching: the three requests' decode steps ran together while all three were alive.
    sizes = [n for entry, n in cluster.component("llm").batches if entry == "decode"]
    assert sizes[0] == 3 and max(sizes) == 3 and sizes[-1] == 1
    counters = cluster.executors[0].counters()  # per entry, for /metrics: batches, items, compute time
    assert counters["llm.decode.calls"] == len(sizes) and counters["llm.decode.items"] == sum(sizes)
    assert counters["llm.decode.compute_us"] >= 0


def test_bad_params_are_rejected_before_anything_runs(tmp_path: Path) -> None:
    cluster = ToyCluster(compile_text(tmp_path, decode_program(False), cpu_placement(1)))
    with pytest.raises(RequestError, match="max_tokens"):
        cluster.submit(RequestSpec(params={"max_tokens": 1000}, inputs={"prompt": "x"}))
    with pytest.raises(RequestError, match="unknown param"):
        cluster.submit(RequestSpec(params={"max_tokenz": 3}, inputs={"prompt": "x"}))


GUIDANCE = """
model guide
import tests.runtime.toys as toy
param steps: int = 50 in 2..100
component llm: toy.Counter engine kv {
    velocity(z: scalar, t: scalar) -> scalar
    labels main, cfg_text, cfg_img
}
component mix: toy.Mixer engine stateless {
    step(z: scalar, a: scalar, b: scalar, c: scalar) -> scalar
}
walk gen() {
    loop steps - 1 as t carry z = 0 {
        parallel {
            branch main { a = llm.velocity(z, t, cache=main) }
            branch cfg_text { b = llm.velocity(z, t, cache=cfg_text) }
            branch cfg_img { c = llm.velocity(z, t, cache=cfg_img) }
        }
        z = mix.step(z, a, b, c)
    } yield terminal z
    emit tensor z
}
flow { start -> gen -> done }
"""
THREE_RANKS = cpu_placement(3, """
[components.llm]
ranks = [0, 1, 2]
routing = "mirror"
[walks.gen.branches]
main = [0]
cfg_text = [1]
cfg_img = [2]
""")


@pytest.mark.parametrize("placement", ["one rank", "three ranks"])
def test_guidance_branches_over_49_iterations(tmp_path: Path, placement: str) -> None:
    plan = compile_text(tmp_path, GUIDANCE, cpu_placement(1) if placement == "one rank" else THREE_RANKS)
    cluster = ToyCluster(plan)
    out = cluster.run([RequestSpec(), RequestSpec(params={"steps": 3})])
    # z += (1 + t) + (10 + t) + (100 + t) for t in 0..steps-2
    expected = [sum(111 + 3 * t for t in range(steps - 1)) for steps in (50, 3)]
    assert [o["tensor"] for o in out.values()] == [[expected[0]], [expected[1]]]
    if placement == "one rank":  # the three branches ran as one batched call per step
        sizes = [n for entry, n in cluster.component("llm").batches if entry == "velocity"]
        assert sizes[0] == 6 and len(sizes) == 49
    else:  # each rank computed only its own branch
        for rank in range(3):
            assert sum(n for e, n in cluster.component("llm", rank).batches if e == "velocity") == 49 + 2
    assert not cluster.leftovers()


SLIDING = """
model sliding
import tests.runtime.toys as toy
param n: int = 10 in 1..100
component llm: toy.Counter engine kv {
    decode(prev: token) -> token
}
component mix: toy.Mixer engine stateless {
    chunk(c: token[4]) -> tokens
}
stream codes: token from llm to mix sliding(window=4, stride=2) at_end drop
walk decode() {
    loop n carry tok = 0 {
        tok = llm.decode(tok)
        send tok -> codes
    }
}
walk speak(c: token[4]) on codes {
    emit text mix.chunk(c)
}
flow { start -> decode -> done }
"""


@pytest.mark.parametrize(("n", "ranks"), [(10, 1), (11, 1), (3, 1), (10, 2)])
def test_sliding_stream_fires_one_walk_per_window(tmp_path: Path, n: int, ranks: int) -> None:
    extra = "" if ranks == 1 else "[components.mix]\nranks = [1]\n"
    cluster = ToyCluster(compile_text(tmp_path, SLIDING, cpu_placement(ranks, extra)))
    out = cluster.run([RequestSpec(params={"n": n})])
    windows = next(iter(out.values())).get("text", [])
    tokens = list(range(1, n + 1))
    expected = [tokens[i * 2:i * 2 + 4] for i in range(0 if n < 4 else 1 + (n - 4) // 2)]
    assert windows == expected
    assert not cluster.leftovers()


LEFT_CONTEXT = """
model left_context
import tests.runtime.toys as toy
param n: int = 10 in 1..100
component llm: toy.Counter engine kv {
    decode(prev: token) -> token
}
component mix: toy.Mixer engine stateless {
    chunk(c: token[_]) -> tokens
}
stream codes: token from llm to mix left_context(left=3, chunk=2) at_end drop capacity CAPACITY
walk decode() {
    loop n carry tok = 0 {
        tok = llm.decode(tok)
        send tok -> codes
    }
}
walk speak(c: token[_]) on codes {
    emit text mix.chunk(c)
}
flow { start -> decode -> done }
"""


@pytest.mark.parametrize(("ranks", "in_placement"), [(1, False), (2, False), (2, True)])
def test_a_left_context_stream_runs_with_capacity_its_chunk_as_its_context_is_already_consumed(
        tmp_path: Path, ranks: int, in_placement: bool) -> None:
    source, place = tmp_path / "t.walk", tmp_path / "p.toml"
    source.write_text(LEFT_CONTEXT.replace(" capacity CAPACITY", "" if in_placement else " capacity 2"))
    extra = "" if ranks == 1 else "[components.mix]\nranks = [1]\n"
    place.write_text(cpu_placement(ranks, extra + ("[streams.codes]\ncapacity = 2\n" if in_placement else "")))
    result = compile_program(str(source), source.read_text(), str(place))  # the simulator runs it too
    assert result.plan is not None and result.data is not None, [d.message for d in result.diagnostics]
    cluster = ToyCluster(result.plan)
    out = cluster.run([RequestSpec(params={"n": 9})])
    chunks = next(iter(out.values()))["text"]
    tokens = list(range(1, 10))
    assert chunks == [tokens[max(0, j * 2 - 3):(j + 1) * 2] for j in range(4)]  # 2 new items, up to 3 before
    assert not cluster.leftovers()


OMNI = """
model omni
import tests.runtime.toys as toy
param max_tokens: int = 6 in 1..100
param talker_max: int = 50 in 1..100
component thinker: toy.Counter engine kv {
    prefill(prompt: text) -> token
    decode(prev: token) -> token
}
component talker: toy.Mixer engine stateless {
    frame(h: token) -> token
    chunk(c: token[_]) -> audio
}
stream hidden: token from thinker to talker fixed(1) after_end continue
stream frames: token from talker to talker left_context(left=2, chunk=2) at_end flush
walk prefill(prompt: text) -> token {
    tok = thinker.prefill(prompt)
    return tok
}
walk thinker_decode(first: token) {
    loop max_tokens carry tok = first {
        emit text tok
        send tok -> hidden
        tok = thinker.decode(tok)
    }
}
walk talker_decode() {
    loop until f == -10 max talker_max carry f = 0 {
        h = recv hidden
        f = talker.frame(h)
        send f -> frames
    }
}
walk speak(c: token[_]) on frames {
    emit audio talker.chunk(c)
}
flow thinker { start -> prefill -> thinker_decode -> done }
flow talker when "audio" in request.outputs { start -> talker_decode -> done }
"""


@pytest.mark.parametrize("ranks", [1, 2])
def test_three_flows_two_streams_one_continuing_after_its_producer(tmp_path: Path, ranks: int) -> None:
    extra = "" if ranks == 1 else "[components.talker]\nranks = [1]\n"
    cluster = ToyCluster(compile_text(tmp_path, OMNI, cpu_placement(ranks, extra)))
    out = cluster.run([RequestSpec(inputs={"prompt": "abcd"}, output_modalities=["text", "audio"]),
                       RequestSpec(inputs={"prompt": "ab"}, output_modalities=["text"])])
    with_audio, text_only = out.values()
    assert with_audio["text"] == [4, 5, 6, 7, 8, 9]
    # The talker reads 6 tokens, then an empty item after the thinker ended (frame -10) and stops.
    frames = [40, 50, 60, 70, 80, 90, -10]
    chunks = [frames[max(0, j * 2 - 2):(j + 1) * 2] for j in range(4)]
    assert with_audio["audio"] == chunks
    assert text_only == {"text": [2, 3, 4, 5, 6, 7]}  # no talker flow: `hidden` has no reader
    assert not cluster.leftovers()


ROLLOUT = """
model rollout
import tests.runtime.toys as toy
param horizon: int = 4 in 1..16
component ac: toy.Mixer engine stateless {
    add(x: scalar, t: scalar) -> scalar
}
walk rollout() {
    loop until t + 1 >= horizon max horizon as t carry x = 100 nospec {
        x = ac.add(x, t)
    } yield accumulated x as xs
    emit tensor xs
}
flow { start -> rollout -> done }
"""


def test_accumulated_rollout_with_per_request_horizons_in_one_batch(tmp_path: Path) -> None:
    cluster = ToyCluster(compile_text(tmp_path, ROLLOUT, cpu_placement(1)))
    out = cluster.run([RequestSpec(params={"horizon": h}) for h in (2, 3, 5)])
    def expected(h: int) -> list[int]:
        xs, x = [], 100
        for t in range(h):
            x += t
            xs.append(x)
        return xs
    assert [o["tensor"] for o in out.values()] == [[expected(2)], [expected(3)], [expected(5)]]
    sizes = [n for _, n in cluster.component("ac").batches]
    assert sizes[:2] == [3, 3] and sizes[2] == 2  # requests leave the batch as their horizon ends


ZERO_TRIP = """
model zero_trip
import tests.runtime.toys as toy
param n: int = 0 in 0..200
component mix: toy.Mixer engine stateless {
    add(a: scalar, b: scalar) -> scalar
}
walk count() {
    loop n as i {
        emit tensor mix.add(100, i)
    }
    emit tensor 7
}
flow { start -> count -> done }
"""


@pytest.mark.parametrize("n", [0, 3])
def test_a_loop_whose_bound_may_be_zero_compiles_and_runs_that_many_times(tmp_path: Path, n: int) -> None:
    source, place = tmp_path / "t.walk", tmp_path / "p.toml"
    source.write_text(ZERO_TRIP)
    place.write_text(cpu_placement(1))
    result = compile_program(str(source), ZERO_TRIP, str(place))
    assert result.data is not None and result.plan is not None, [d.message for d in result.diagnostics]
    cluster = ToyCluster(result.plan)
    out = cluster.run([RequestSpec(params={"n": n})])
    assert next(iter(out.values()))["tensor"] == [100 + i for i in range(n)] + [7]
    assert not cluster.leftovers()


def test_a_chain_of_walks_on_one_rank_makes_no_coordinator_round_trip(tmp_path: Path) -> None:
    chain = """
model chain
import tests.runtime.toys as toy
component llm: toy.Counter engine kv {
    decode(prev: token) -> token
}
""" + "\n".join(
        f"walk w{i}(x: token) -> token {{\n    y = llm.decode(x)\n    return y\n}}" for i in range(10)
    ) + "\nwalk last(x: token) {\n    emit text x\n}\nflow { start -> " + " -> ".join(
        f"w{i}" for i in range(10)) + " -> last -> done }\n"
    cluster = ToyCluster(compile_text(tmp_path, chain, cpu_placement(1)))
    out = cluster.run([RequestSpec(inputs={"x": 0})])
    assert next(iter(out.values())) == {"text": [10]}
    # Messages the coordinator received: the one output and the flow's end. Nothing per walk.
    assert cluster.coordinator.coordinator_messages == 2


def test_two_hundred_requests_with_a_third_cancelled_leave_nothing_behind(tmp_path: Path) -> None:
    import random

    rng = random.Random(7)
    cluster = ToyCluster(compile_text(tmp_path, SLIDING, cpu_placement(2, "[components.mix]\nranks = [1]\n")))
    ids = [cluster.submit(RequestSpec(params={"n": rng.randint(5, 60)})) for _ in range(200)]
    doomed = set(rng.sample(ids, len(ids) // 3))
    pending = sorted(doomed)
    while pending:
        cluster.pump(limit=rng.randint(1, 400))
        for _ in range(rng.randint(1, 5)):
            if pending:
                cluster.coordinator.cancel(pending.pop(rng.randrange(len(pending))))
    cluster.pump()
    events = cluster.take_events()
    ended = {e.request: e.kind for e in events if e.kind in ("done", "cancelled", "error")}
    assert set(ended) == set(ids)
    assert all(ended[i] in ("done", "cancelled") for i in ids)
    assert all(ended[i] == "done" for i in ids if i not in doomed)
    assert not cluster.leftovers()
    assert not cluster.coordinator.live


PARTS = """
model parts
import tests.runtime.toys as toy
component llm: toy.Counter engine kv {
    prefill(prompt: text) -> token
    see(img: image) -> token
    history(x: token) -> tokens
}
walk text_part(t: text) {
    llm.prefill(t)
}
walk image_part(i: image) {
    llm.see(i)
}
walk answer() {
    emit text llm.history(0)
}
flow {
    start -> prompt
    each prompt: part in request.parts {
        text -> text_part
        image -> image_part
    }
    prompt -> answer -> done
}
"""


def test_each_block_runs_the_prompt_parts_in_order(tmp_path: Path) -> None:
    cluster = ToyCluster(compile_text(tmp_path, PARTS, cpu_placement(1)))
    parts = [Part("text", "hello"), Part("image", "xy"), Part("text", "abc")]
    out = cluster.run([RequestSpec(parts=parts)])
    assert next(iter(out.values())) == {"text": [[5, 2, 3]]}


def test_a_request_naming_what_the_plan_cannot_take_is_refused_with_the_allowed_values(tmp_path: Path) -> None:
    cluster = ToyCluster(compile_text(tmp_path, PARTS, cpu_placement(1)))
    parts = [Part("text", "hello")]
    refused = {"parts[1]: unknown part kind `audio` (this model takes parts of kind: image, text)":
               RequestSpec(parts=[Part("text", "a"), Part("audio", "b")]),
               "inputs: unknown input `prompt` (this model takes no named inputs)":
               RequestSpec(parts=parts, inputs={"prompt": "a"}),
               "outputs: unknown modality `image` (this model emits: text)":
               RequestSpec(parts=parts, output_modalities=["text", "image"])}
    for message, spec in refused.items():
        with pytest.raises(RequestError) as err:
            cluster.submit(spec)
        assert str(err.value) == message
    program = PARTS.replace("image -> image_part", "_ -> image_part")  # `_` takes every kind the language has
    cluster = ToyCluster(compile_text(tmp_path, program, cpu_placement(1)))
    with pytest.raises(RequestError, match=r"^parts\[0\]: unknown part kind `smell` \(this model takes parts "
                                           r"of kind: audio, image, text, video\)$"):
        cluster.submit(RequestSpec(parts=[Part("smell", "a")]))
    assert not cluster.coordinator.live
