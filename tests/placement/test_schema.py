"""What a placement means once loaded: rank forms, defaults, engine merging, pins, routing,
hosts, transport — and that no input, however broken, raises."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.placement.helpers import rendered, stand_in, write
from wgc.placement import Placement, load_placement

CPU2 = '[cluster]\ndevice = "cpu"\nranks = 4\n[defaults]\nranks = 0\nengine = { kv_memory = "64MiB" }\n'


def load(tmp_path: Path, text: str, model: str = "orpheus") -> Placement:
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in(model))
    assert loaded is not None, rendered(diags)
    return loaded


@pytest.mark.parametrize(("written", "ranks"), [("2", (2,)), ("[3, 1]", (3, 1)), ('"1-3"', (1, 2, 3))])
def test_rank_forms(tmp_path: Path, written: str, ranks: tuple[int, ...]) -> None:
    loaded = load(tmp_path, CPU2 + f'[components.snac]\nranks = {written}\nrouting = "round_robin"\n')
    assert loaded.component("snac").ranks == ranks  # type: ignore[union-attr]


def test_shorthand_component_ranks(tmp_path: Path) -> None:
    loaded = load(tmp_path, CPU2 + "[components]\nsnac = 3\n")
    assert loaded.component("snac").ranks == (3,)  # type: ignore[union-attr]


def test_placement_is_frozen_and_covers_every_component(tmp_path: Path) -> None:
    loaded = load(tmp_path, CPU2)
    assert [c.name for c in loaded.components] == ["llm", "snac"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.cluster.ranks = 9  # type: ignore[misc]


def test_engine_sizing_is_taken_whole_from_the_most_specific_table(tmp_path: Path) -> None:
    text = ('[cluster]\ndevice = "cuda"\ngpu = "H200"\nranks = 1\n[defaults]\nranks = 0\n'
            "engine = { kv_memory_fraction = 0.3, page_size = 32, max_batch = 4 }\n"
            '[components.llm]\nranks = 0\nengine = { kv_memory = "10GiB" }\n')
    llm = load(tmp_path, text).component("llm")
    assert llm is not None
    assert (llm.engine.kv_memory, llm.engine.kv_memory_fraction) == (10 * 2**30, None)
    assert (llm.engine.page_size, llm.engine.max_batch) == (32, 4)  # other keys come from the defaults


def test_kv_defaults_do_not_reach_stateless_components(tmp_path: Path) -> None:
    snac = load(tmp_path, CPU2).component("snac")
    assert snac is not None and snac.engine.kv_memory is None and snac.engine_kind == "stateless"


def test_defaults_for_engine_keys(tmp_path: Path) -> None:
    text = ('[cluster]\ndevice = "cuda"\ngpu = "H200"\nranks = 1\n[defaults]\nranks = 0\n'
            "engine = { kv_memory_fraction = 0.3, cuda_graph_buckets = [1, 4, 32] }\n")
    llm = load(tmp_path, text).component("llm")
    assert llm is not None and llm.engine.max_batch == 32 and llm.engine.page_size == 16


@pytest.mark.parametrize(("cluster", "engine", "budget"), [
    ('device = "cpu"', 'kv_memory = "64MiB"', 512),
    ('device = "cuda"\ngpu = "H200"', "kv_memory_fraction = 0.3", 8192),
    ('device = "cpu"', 'kv_memory = "64MiB", max_batch = 1024', 1024),  # a round of decodes must fit
])
def test_token_budget_default_follows_the_device(tmp_path: Path, cluster: str, engine: str, budget: int) -> None:
    text = f"[cluster]\n{cluster}\nranks = 1\n[defaults]\nranks = 0\nengine = {{ {engine} }}\n"
    llm = load(tmp_path, text).component("llm")
    assert llm is not None and llm.engine.token_budget == budget and llm.engine.prefix_caching is True


def test_token_budget_and_prefix_caching_override_key_by_key(tmp_path: Path) -> None:
    text = ('[cluster]\ndevice = "cpu"\nranks = 1\n[defaults]\nranks = 0\n'
            'engine = { kv_memory = "64MiB", token_budget = 64, prefix_caching = false }\n'
            "[components.llm]\nranks = 0\nengine = { token_budget = 2048 }\n")
    loaded = load(tmp_path, text)
    llm, snac = loaded.component("llm"), loaded.component("snac")
    assert llm is not None and (llm.engine.token_budget, llm.engine.prefix_caching) == (2048, False)
    assert snac is not None and (snac.engine.token_budget, snac.engine.prefix_caching) == (512, True)  # kv only


def test_all_calls_pinned_needs_no_routing(tmp_path: Path) -> None:
    text = CPU2 + "[components]\nllm = [0, 1]\n[walks.prefill.components]\nllm = 0\n[walks.decode.components]\nllm = 1\n"
    assert load(tmp_path, text).component("llm").routing is None  # type: ignore[union-attr]


def test_data_parallel_replicas_with_tp(tmp_path: Path) -> None:
    text = CPU2 + '[components.llm]\nranks = "0-3"\ntp = 2\nrouting = "least_loaded"\n'
    llm = load(tmp_path, text).component("llm")
    assert llm is not None and llm.copies == ((0, 1), (2, 3)) and llm.routing == "least_loaded"


def test_branch_pins_cover_a_walk_whose_only_calls_are_in_branches(tmp_path: Path) -> None:
    text = ('[cluster]\ndevice = "cpu"\nranks = 3\n[defaults]\nranks = 0\nengine = { kv_memory = "64MiB" }\n'
            '[components.llm]\nranks = [0, 1, 2]\nrouting = "mirror"\n'
            "[walks.image_gen.branches]\nmain = 0\ncfg_text = 1\ncfg_img = 2\n")
    gen = load(tmp_path, text, "bagel").walk("image_gen")
    assert gen is not None and [p.target for p in gen.branches] == ["main", "cfg_text", "cfg_img"]


def test_unpinned_init_call_still_needs_routing(tmp_path: Path) -> None:
    """image_gen calls llm.init_latents outside the branches: pinning the branches is not enough."""
    text = ('[cluster]\ndevice = "cpu"\nranks = 3\n[defaults]\nranks = 0\nengine = { kv_memory = "64MiB" }\n'
            "[components.llm]\nranks = [0, 1, 2]\n"
            "[walks.image_gen.branches]\nmain = 0\ncfg_text = 1\ncfg_img = 2\n")
    _, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("bagel"))
    assert [d.code for d in diags] == ["P017"]
    assert "`prefill_text`" in diags[0].help[0] and "`image_gen`" in diags[0].help[0]


def test_hosts_and_transport(tmp_path: Path) -> None:
    text = ('[cluster]\ndevice = "cuda"\ngpu = "H100"\nranks = 4\n'
            '[[cluster.hosts]]\nname = "a"\naddress = "10.0.0.1"\nranks = "0-1"\n'
            '[[cluster.hosts]]\nname = "b"\naddress = "10.0.0.2"\nranks = [2, 3]\n'
            "[defaults]\nranks = 0\nengine = { kv_memory_fraction = 0.3 }\n"
            '[transport]\ninter_host = "zmq"\nport = 31000\n')
    loaded = load(tmp_path, text)
    assert [(h.name, h.ranks) for h in loaded.cluster.hosts] == [("a", (0, 1)), ("b", (2, 3))]
    assert (loaded.transport.intra_host, loaded.transport.inter_host, loaded.transport.port) == ("cuda_ipc", "zmq", 31000)


def test_defaults_without_hosts_and_transport(tmp_path: Path) -> None:
    loaded = load(tmp_path, CPU2)
    assert [(h.name, h.ranks) for h in loaded.cluster.hosts] == [("localhost", (0, 1, 2, 3))]
    assert (loaded.transport.intra_host, loaded.transport.inter_host, loaded.transport.bind) == ("shm", "gloo", "127.0.0.1")


def test_explicit_memory_overrides_the_gpu_table(tmp_path: Path) -> None:
    text = '[cluster]\ndevice = "cuda"\ngpu = "H100"\nmemory = "94GB"\nranks = 1\n[defaults]\nranks = 0\n'
    text += "engine = { kv_memory_fraction = 0.2 }\n"
    cluster = load(tmp_path, text).cluster
    assert (cluster.memory, cluster.memory_source) == (94 * 10**9, "cluster.memory")


def test_model_names_compare_without_case_or_separators(tmp_path: Path) -> None:
    assert load(tmp_path, 'model = "Orpheus"\n' + CPU2).model == "Orpheus"


def test_every_unknown_key_is_reported_at_once(tmp_path: Path) -> None:
    text = CPU2 + "colour = 1\n[components.llm]\nranks = 0\ntpp = 2\n[transport]\nbnd = 1\n"
    _, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    assert [(d.code, d.span.line) for d in diags] == [("P002", 7), ("P002", 10), ("P002", 12)]
    assert diags[1].help[0] == "did you mean `tp`?" and diags[2].help[0] == "did you mean `bind`?"


TOML_ISH = st.lists(
    st.sampled_from([
        "[cluster]", 'device = "cpu"', 'device = "cuda"', "ranks = 2", "ranks = -1", 'gpu = "H100"',
        "[defaults]", "ranks = 0", "ranks = [0, 0]", 'engine = { kv_memory = "1MiB" }', "[components.llm]",
        "tp = 0", "tp = 2", 'routing = "x"', "[components.llm.engine]", "kv_memory_fraction = 2",
        "cuda_graph_buckets = [4, 1]", "[walks.decode.components]", "llm = 5", "[walks.x]", "[[cluster.hosts]]",
        'name = "h"', "[streams.codes]", "capacity = 1", "dims = 3", "[transport]", 'intra_host = "nccl"',
        'extends = "p.toml"', "[", "= 1", "x = [", '"', "llm = { ranks = 1 }", "[components]", "snac = \"1-0\"",
    ]),
    max_size=14,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(TOML_ISH, st.sampled_from(["orpheus", "bagel", "qwen3_omni"]))
def test_no_input_raises(tmp_path: Path, lines: list[str], model: str) -> None:
    path = write(tmp_path, "p.toml", "\n".join(lines) + "\n")
    placement, diags = load_placement(path, stand_in(model))
    assert (placement is None) == bool(diags)
    for d in diags:
        assert d.code.startswith("P") and d.span.line >= 1 and d.span.column >= 1
