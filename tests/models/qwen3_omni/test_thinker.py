"""The thinker component's own rules: the chat framing and what the talker is handed, chunked and
batched calls, bad media inputs, the config's checkpoint ids and the tiny vocabulary's map."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from wgc.models.layers.tokenizer import byte_tokenizer
from wgc.models.qwen3_omni import chat
from wgc.models.qwen3_omni.config import ThinkerConfig, Tokens, VocabMap
from wgc.runtime.components.base import PARTIAL, Call, CallError

from tests.models.qwen3_omni.thinker_reference import tiny_thinker


def test_system_turn_gives_the_talker_nothing_and_the_user_turn_opens_once() -> None:
    m = tiny_thinker()
    t = m.config.tokens
    system = m.prefill_text([Call(0, "", ("<|im_start|>system\nbe brief<|im_end|>\n",))])[0]
    assert system["rows"].shape == (0, m.config.hidden) and system["open_user"] is False  # no user turn yet
    first = m.prefill_text([Call(0, "", ("hello",))])[0]
    second = m.prefill_text([Call(0, "", (" again",))])[0]
    torch.testing.assert_close(first, m._embed([t.im_start, t.user, t.newline, *b"hello"]))
    torch.testing.assert_close(second, m._embed(list(b" again")))  # the turn is open: no second header
    m.begin_reply([Call(0, "", (0.0, 1.0))])
    system_ids = 1 + len("system\nbe brief") + 1 + 1  # <|im_start|> ... <|im_end|> \n
    assert m.kv.length(0, "main") == system_ids + 3 + 5 + 6 + 5  # user header, hello, " again", close + header


def test_a_part_that_closes_its_user_turn_tells_the_talker() -> None:
    """A client-templated turn ends with its own <|im_end|>: the talker must not write a second close."""
    m = tiny_thinker()
    t = m.config.tokens
    names = {getattr(t, name): text for name, text in chat.SPECIAL_NAMES.items()}
    m.tokenizer = byte_tokenizer({**names, t.user: "user"})  # the role a word, as Qwen's tokenizer has it
    closed = m.prefill_text([Call(0, "", ("<|im_start|>user\nhi<|im_end|>\n",))])[0]
    assert closed["open_user"] is False
    torch.testing.assert_close(closed["rows"], m._embed([t.im_start, t.user, *b"\nhi", t.im_end, t.newline]))
    reopened = m.prefill_text([Call(0, "", ("more",))])[0]  # a part after it opens a new user turn
    torch.testing.assert_close(reopened, m._embed([t.im_start, t.user, t.newline, *b"more"]))


def test_chunked_prefill_equals_one_write() -> None:
    whole, chunked = tiny_thinker(seed=1), tiny_thinker(seed=1)
    prompt = "a prompt long enough for several chunks"
    expected = whole.prefill_text([Call(0, "", (prompt,))])[0]
    rounds = 0
    out: Any = PARTIAL
    while out is PARTIAL:
        out = chunked.prefill_text([Call(0, "", (prompt,), budget=5)])[0]
        rounds += 1
    assert rounds == -(-(len(prompt) + 3) // 5)
    torch.testing.assert_close(out, expected)
    replies = [m.begin_reply([Call(0, "", (0.0, 1.0))]) for m in (whole, chunked)]
    assert replies[0] == replies[1]


def test_a_request_samples_the_same_alone_and_batched() -> None:
    prompts = ["first request", "the second, longer request"]

    def run(m: Any, requests: list[int]) -> list[list[int]]:
        m.prefill_text([Call(r, "", (prompts[r],)) for r in requests])
        toks = [[t] for t in m.begin_reply([Call(r, "", (0.9, 0.9)) for r in requests])]
        for _ in range(5):
            for seq, t in zip(toks, m.decode([Call(r, "", (s[-1], 0.9, 0.9)) for r, s in zip(requests, toks)])):
                seq.append(t)
        return toks

    batched = run(tiny_thinker(seed=2), [0, 1])
    assert batched == [run(tiny_thinker(seed=2), [r])[0] for r in (0, 1)]


def test_talker_input_is_the_input_embedding_and_writes_nothing() -> None:
    m = tiny_thinker()
    m.prefill_text([Call(0, "", ("hi",))])
    tok = m.begin_reply([Call(0, "", (0.0, 1.0))])[0]
    length = m.kv.length(0, "main")
    rows = m.talker_input([Call(0, "", (tok,)), Call(0, "", (151645,))])
    assert [r.shape for r in rows] == [(1, m.config.hidden)] * 2
    torch.testing.assert_close(torch.cat(rows), m._embed([tok, 151645]))
    assert m.kv.length(0, "main") == length and m.demands("talker_input", [Call(0, "", (tok,))]) is None


def test_media_needs_a_user_turn_and_sets_the_next_position() -> None:
    m = tiny_thinker()
    x = {"embeds": torch.randn(6, 64), "kind": "video", "grid_thw": [3, 4, 2], "second_per_grid": 2.0}
    seen = m.prefill_embeds([Call(0, "", (x,))])[0]
    assert seen["multimodal"].tolist() == [False] * 4 + [True] * 6 + [False]  # header, start, rows, end
    frames = seen["positions"][0, 4:10].unique().tolist()
    assert frames == [4.0, 30.0, 56.0]  # 2 s per temporal patch x 13 positions a second
    assert m.kv.seq(0, "main").position == 58 and m.kv.length(0, "main") == 11


@pytest.mark.parametrize(("x", "field"), [
    ("not media", "`x` must be a tensor"),
    ({"embeds": torch.randn(4, 63), "grid_thw": [1, 4, 4]}, "embeds must be a tensor \\[N, 64\\]"),
    ({"embeds": torch.randn(4, 64)}, "grid_thw must be 3 ints"),
    ({"embeds": torch.randn(4, 64), "grid_thw": [1, 4, 8]}, "makes 8 tokens, but embeds has 4 rows"),
    ({"embeds": torch.randn(4, 64), "grid_thw": [1, 4, 4], "deepstack": torch.randn(2, 3, 64)}, "deepstack must be"),
    ({"embeds": torch.randn(4, 64), "kind": "sound"}, "kind 'sound' is not one of"),
])
def test_bad_media_fails_only_its_call_naming_the_field(x: Any, field: str) -> None:
    m = tiny_thinker()
    with pytest.raises(CallError, match=field) as err:
        m.prefill_embeds([Call(7, "", (x,))])
    assert err.value.request == 7 and m.kv.seq(7, "main") is None


def test_checkpoint_ids_not_class_defaults() -> None:
    config = {"im_start_token_id": 151644, "tts_pad_token_id": 151671,
              "thinker_config": {"audio_token_id": 151675, "audio_start_token_id": 151669, "image_token_id": 151655,
                                 "position_id_per_seconds": 13,
                                 "vision_config": {"spatial_merge_size": 2, "deepstack_visual_indexes": [8, 16, 24]},
                                 "text_config": {"vocab_size": 152064, "hidden_size": 2048, "num_hidden_layers": 48,
                                                 "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                                                 "num_experts": 128, "num_experts_per_tok": 8,
                                                 "moe_intermediate_size": 768,
                                                 "rope_scaling": {"mrope_section": [24, 20, 20], "interleaved": True},
                                                 "rope_theta": 1000000}},
              "talker_config": {"accept_hidden_layer": 24}}
    c = ThinkerConfig.from_checkpoint(config)
    assert c == replace(ThinkerConfig.preset("30b"), name="checkpoint")
    assert (c.tokens.audio, c.tokens.audio_start, c.accept_layer, c.position_per_second) == (151675, 151669, 24, 13)
    assert Tokens.from_checkpoint({"thinker_config": {"audio_token_id": 1}}).audio == 1


def test_tiny_vocabulary_maps_specials_both_ways() -> None:
    c = ThinkerConfig.preset("tiny")
    vocab = VocabMap(c)
    specials = c.tokens.specials()
    assert [vocab.to_model(t) for t in specials] == list(range(497, 512))
    assert [vocab.from_model(i) for i in range(497, 512)] == list(specials)
    assert vocab.to_model(10) == 10 and vocab.from_model(300) == 300  # bytes and unnamed ids are themselves
    with pytest.raises(ValueError, match="no id in the tiny vocabulary"):
        vocab.to_model(151000)
    assert VocabMap(ThinkerConfig.preset("30b")).to_model(151645) == 151645


def test_release_frees_every_page() -> None:
    m = tiny_thinker()
    m.prefill_text([Call(0, "", ("some text",))])
    m.prefill_embeds([Call(0, "", (torch.randn(3, 64),))])
    m.release(0)
    assert m.kv.pages.used_pages == 0 and m.kv.seq(0, "main") is None and not m._parts
