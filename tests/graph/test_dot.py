"""DOT output of every shipped model: well-formed, and drawing what the issue asks for."""

from __future__ import annotations

import pytest

from tests.graph.helpers import CASES, case_id, checked, clusters_labelled, dot, walk_cluster
from wgc.lang import ast


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_dot_parses_and_every_edge_joins_declared_nodes(case: tuple[str, str | None]) -> None:
    d = dot(*case)  # the reader raises on unbalanced braces, stray text or an undeclared endpoint
    assert d.name == case[0]
    assert d.nodes and d.visible_edges()


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_one_cluster_per_walk_labelled_with_its_signature(case: tuple[str, str | None]) -> None:
    d = dot(*case)
    program = checked(case[0]).program
    assert program is not None
    walks = program.of(ast.Walk)
    assert len(clusters_labelled(d, "walk ")) == len(walks)
    for w in walks:
        name = walk_cluster(d, w.name)
        assert d.clusters[name].parent is None
        assert all(a.name + ": " in d.clusters[name].attrs["label"] for a in w.args)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_one_cluster_per_flow(case: tuple[str, str | None]) -> None:
    d = dot(*case)
    program = checked(case[0]).program
    assert program is not None
    assert len(clusters_labelled(d, "flow")) == len(program.of(ast.Flow))


def test_bagel_image_gen_loop_is_a_cluster_with_its_bound_and_yield() -> None:
    d = dot("bagel")
    gen = walk_cluster(d, "image_gen")
    (loop,) = [c for c in d.children(gen) if c.attrs["label"].startswith("loop ")]
    assert loop.attrs["label"].splitlines() == ["loop steps - 1 as i carry z", "yield terminal z"]
    assert loop.attrs["style"] == "bold"
    labels = {d.label(n).splitlines()[0] for n in d.cluster_nodes(loop.name)}
    assert {"combine.timestep", "combine.step", "llm.velocity [main]"} <= labels


def test_dynamic_loop_label_names_condition_and_max() -> None:
    d = dot("orpheus")
    (loop,) = [c for c in d.children(walk_cluster(d, "decode")) if c.attrs["label"].startswith("loop")]
    assert loop.attrs["label"] == "loop until tok == llm.eos max max_tokens - 1 carry tok = first"


def test_accumulated_yield_is_on_the_loop_label() -> None:
    d = dot("vjepa2_ac")
    (loop,) = [c for c in d.children(walk_cluster(d, "rollout")) if c.attrs["label"].startswith("loop")]
    assert loop.attrs["label"].splitlines()[-1] == "yield accumulated z as rollout"


def test_bagel_branches_are_three_side_by_side_clusters() -> None:
    d = dot("bagel")
    (parallel,) = clusters_labelled(d, "parallel")
    branches = d.children(parallel)
    assert [b.attrs["label"] for b in branches] == ["branch main", "branch cfg_text", "branch cfg_img"]
    (row,) = d.clusters[parallel].same_rank
    assert row == [b.nodes[0] for b in branches]  # one rank, in source order
    assert [d.label(n) for n in row] == ["llm.velocity [main]", "llm.velocity [cfg_text]", "llm.velocity [cfg_img]"]


def test_orpheus_stream_is_a_dashed_edge_labelled_with_its_policy() -> None:
    d = dot("orpheus")
    streams = [e for e in d.visible_edges() if "sliding(window=28, stride=7)" in e[2].get("label", "")]
    assert streams and all(e[2]["style"] == "dashed" for e in streams)
    assert all(e[2]["label"] == "codes: sliding(window=28, stride=7) at_end drop" for e in streams)
    # from both send sites (prefill's and decode's llm call) to the chunk of the stream-fired walk
    assert sorted(d.label(e[0]) for e in streams) == ["llm.decode", "llm.prefill"]
    assert {d.label(e[1]) for e in streams} == {"chunk: token[28]"}


def test_qwen_streams_reach_recv_sites_with_their_policies() -> None:
    labels = {e[2]["label"] for e in dot("qwen3_omni").visible_edges() if e[2].get("style") == "dashed"}
    assert labels == {"hidden: fixed(1) at_end flush after_end continue",
                      "frames: left_context(left=25, chunk=25) at_end flush"}


def test_emit_is_a_sink_node_with_its_modality() -> None:
    d = dot("orpheus")
    (emit,) = [n for n in d.nodes if d.label(n) == "emit audio"]
    assert [d.label(e[0]) for e in d.edges if e[1] == emit] == ["snac.decode"]
    assert not [e for e in d.edges if e[0] == emit]


def test_data_edges_follow_named_values_and_loop_carries() -> None:
    d = dot("bagel")
    by_label = {(d.label(a), d.label(b), attrs.get("label")): attrs for a, b, attrs in d.visible_edges()}
    assert ("vit.encode", "llm.prefill_vit [main]", "x") in by_label
    assert ("llm.velocity [cfg_img]", "combine.step", "v_img") in by_label
    back = by_label[("combine.step", "llm.velocity [main]", "z")]  # the next iteration's latents
    assert back["constraint"] == "false"


def test_flow_edges_carry_conditions_in_the_order_tried() -> None:
    d = dot("bagel")
    flow_labels = {(d.label(a), d.label(b)): attrs.get("label", "") for a, b, attrs in d.visible_edges()}
    assert flow_labels[("decode", "image_gen")] == '1. "image" in request.outputs'
    assert flow_labels[("decode", "done")] == "2. otherwise"
    head = "each prompt: part in request.parts"
    assert flow_labels[(head, "prefill_vae")] == '2. image when "image" in request.outputs'


def test_cpu3_colours_differ_by_rank() -> None:
    d = dot("bagel", "cpu3.toml")
    fills = {d.label(n): a.get("fillcolor") for n, a in d.nodes.items()}
    branch_fills = [fills[f"llm.velocity [{b}]\nrank {r}"] for r, b in enumerate(("main", "cfg_text", "cfg_img"))]
    assert len(set(branch_fills)) == 3
    assert fills["vit.encode\nrank 0"] == branch_fills[0]
    # the mirrored LLM's unpinned calls run on every copy: first rank's colour, every rank listed
    assert fills["llm.init_latents\nranks 0, 1, 2"] == branch_fills[0]
    (legend,) = clusters_labelled(d, "placement cpu3.toml")
    swatches = d.clusters[legend].nodes
    assert [d.label(n) for n in swatches] == ["rank 0", "rank 1", "rank 2"]
    assert [d.nodes[n]["fillcolor"] for n in swatches] == branch_fills


def test_2xh200_thinker_and_talker_differ() -> None:
    d = dot("qwen3_omni", "2xh200.toml")
    fills = {d.label(n).splitlines()[0]: a.get("fillcolor") for n, a in d.nodes.items()}
    assert fills["thinker.decode"] != fills["talker.decode"]
    assert fills["talker.decode"] == fills["code2wav.decode"]


def test_without_a_placement_nothing_is_coloured_by_rank() -> None:
    d = dot("bagel")
    assert not clusters_labelled(d, "placement")
    assert {a.get("fillcolor") for a in d.nodes.values() if a.get("shape") == "box"} <= {"white", None}
