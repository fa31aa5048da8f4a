"""Completion from tokens: right words in each context, also on text that does not parse."""

from __future__ import annotations

from pathlib import Path

from wgc.lsp.completion import complete, outline
from wgc.lsp.tokens import tokenize

ROOT = Path(__file__).resolve().parents[2]
BAGEL = (ROOT / "models" / "bagel.walk").read_text()


def labels_at(text: str, marker: str = "$") -> list[str]:
    """Completion labels where `marker` stands (the marker is removed)."""
    assert text.count(marker) == 1
    offset = text.index(marker)
    return [c.label for c in complete(text[:offset] + text[offset + 1:], offset)]


def in_walk(body_so_far: str) -> str:
    """bagel.walk with an unfinished walk appended: it does not parse."""
    return BAGEL + "\nwalk extra(img: image) {\n" + body_so_far


def test_outline_reads_declarations_from_tokens() -> None:
    names = outline(tokenize(BAGEL))
    assert names.params[:2] == ["max_tokens", "temperature"]
    assert names.components["llm"]["entry"][:2] == ["prefill_text", "prefill_vit"]
    assert names.components["llm"]["const"] == ["bos", "eos", "think_text", "think_image"]
    assert names.components["llm"]["label"] == ["main", "cfg_text", "cfg_img"]
    assert names.walks == ["prefill_text", "prefill_vit", "prefill_vae", "think_text", "think_image", "decode",
                           "image_gen"]
    assert names.eaches == ["prompt"]


def test_members_after_a_component_and_a_dot() -> None:
    got = labels_at(in_walk("    x = llm.$"))
    assert got[:6] == ["prefill_text", "prefill_vit", "prefill_vae", "decode", "init_latents", "velocity"]
    assert "eos" in got and "encode" not in got  # vit's entry is not llm's
    assert labels_at(in_walk("    x = llm.de$")) == got  # a typed prefix is left to the editor to filter


def test_request_fields_after_request_dot() -> None:
    assert set(labels_at(in_walk("    loop until request.$"))) == {"task", "parts", "inputs", "outputs", "think"}


def test_cache_labels_of_the_called_component() -> None:
    assert labels_at(in_walk("    v = llm.velocity(z, t, cache=$")) == ["main", "cfg_text", "cfg_img"]


def test_walk_body_offers_values_bound_before_the_cursor() -> None:
    got = labels_at(in_walk("    x = vit.encode(img)\n    $\n    late = 1\n"))
    assert "img" in got and "x" in got and "late" not in got
    assert "steps" in got and "llm" in got  # params and components
    assert "loop" in got and "send" in got and "model" not in got


def test_streams_after_send_arrow_and_recv() -> None:
    orpheus = (ROOT / "models" / "orpheus.walk").read_text()
    text = orpheus + "\nwalk extra() {\n    send tok -> $"
    assert labels_at(text) == ["codes"]
    assert labels_at(orpheus + "\nwalk extra() {\n    loop 3 {\n        c = recv $") == ["codes"]


def test_keywords_fixed_by_the_previous_word() -> None:
    assert labels_at(in_walk("    emit $")) == ["text", "audio", "image", "video", "action", "tensor"]
    assert labels_at("model m\nparam p: $") == ["int", "float", "bool", "str"]
    assert labels_at("model m\ncomponent c: x.Y engine $") == ["kv", "stateless"]
    assert "bf16" in labels_at("model m\ncomponent c: x.Y engine kv {\n    f(x: tensor[N; $")
    assert "tensor" in labels_at("model m\nwalk w(x: $")
    assert "tensor" not in labels_at(in_walk("    y = x[$"))  # indexing a value, not a type


def test_top_level_offers_declarations() -> None:
    assert labels_at(BAGEL + "\n$") == ["model", "import", "param", "component", "stream", "walk", "flow"]


def test_flow_offers_walks_and_flow_words() -> None:
    got = labels_at(BAGEL.replace("    image_gen -> done\n", "    image_gen -> done\n    decode -> $\n"))
    assert "image_gen" in got and "done" in got and "steps" not in got
    got = labels_at(BAGEL.replace("    image_gen -> done\n", "    image_gen -> done\n    $\n"))
    assert {"start", "each", "when", "prefill_text"} <= set(got)


def test_nothing_inside_comments_or_strings() -> None:
    assert labels_at(in_walk("    # llm.$")) == []
    assert labels_at(in_walk('    x = "llm.$')) == []
