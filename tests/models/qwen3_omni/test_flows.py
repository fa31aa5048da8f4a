"""Qwen3-Omni's three flows on the tiny components (the thinker's, the talker's, and code2wav's `speak`
fired by the `frames` stream): a text-only request runs only the thinker; a speech request runs all
three; an end token that comes first never reaches the client, the talker or code2wav; the talker's
`max` bound stops a talker that never emits its EOS and the request's end says so; cancelling
mid-speech frees every KV page and stream buffer on both ranks."""

from __future__ import annotations

import pytest
from wgc.runtime.protocol.messages import Part

from tests.models.qwen3_omni.e2e_helpers import (
    GREEDY,
    PLACEMENTS,
    Endless,
    Mute,
    chat,
    clip,
    ends_after,
    leftovers,
    omni,
    run,
)

TALKER_ENTRIES = ("prefill", "last_prefill", "decode")


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_text_only_request_runs_only_the_thinker(placement: str) -> None:
    o = omni(placement)
    _, out, cut = run(o, chat(Part("audio", clip(0.5)), Part("text", "hi"), speech=False, max_tokens=5))
    assert set(out) == {"text"} and len(out["text"]) == 5 and cut == ["thinker_decode"]
    assert o.calls("thinker", "decode") == 5 and o.calls("audio_enc", "encode") == 1
    assert all(o.calls("talker", entry) == 0 for entry in TALKER_ENTRIES)  # the talker flow never started
    assert o.calls("code2wav", "decode") == 0 and o["talker"].stats["forwards"] == 0


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_speech_request_runs_all_three_flows(placement: str) -> None:
    o = omni(placement, talker=Endless)
    _, out, _ = run(o, chat(Part("text", "hi"), Part("audio", clip(0.5)), max_tokens=5, talker_max_tokens=30))
    assert len(out["text"]) == 5 and sum(len(a) for a in out["audio"]) == 1920 * 30 - 555
    assert o.calls("thinker", "decode") == 5
    assert o.calls("talker", "prefill") == 2 and o.calls("talker", "last_prefill") == 1  # one per part, the prefix
    assert o.calls("talker", "decode") == 30 and o.calls("code2wav", "decode") == 2


def test_a_first_reply_token_that_is_im_end_is_never_emitted_nor_spoken() -> None:
    prompt = "hi there"
    o = omni("qwen3-omni-cpu2.toml", parity=True, talker=Endless, thinker_edit=ends_after(0, prompt))
    request, out, cut = run(o, chat(Part("text", prompt), talker_max_tokens=4, **GREEDY))
    assert "text" not in out and o.calls("thinker", "decode") == 0  # thinker_decode never ran
    assert request not in o["thinker"].fed  # nothing of the reply reached the talker
    assert sum(len(a) for a in out["audio"]) == 1920 * 4 - 555 and cut == ["talker_decode"]  # tts_eos, then pads


def test_a_first_frame_that_is_the_codec_eos_never_reaches_code2wav() -> None:
    o = omni("qwen3-omni-cpu2.toml", talker=Mute)
    _, out, cut = run(o, chat(Part("text", "hi"), max_tokens=3))
    assert len(out["text"]) == 3 and "audio" not in out
    assert o.calls("talker", "last_prefill") == 1 and o.calls("talker", "decode") == 0
    assert o.calls("code2wav", "decode") == 0 and cut == ["thinker_decode"]  # the talker ended by itself


def test_the_talker_max_bound_stops_a_talker_that_never_ends_and_the_end_says_so() -> None:
    o = omni("qwen3-omni-cpu2.toml", talker=Endless)
    request, out, cut = run(o, chat(Part("text", "hi"), max_tokens=2, talker_max_tokens=7))
    assert len(o["code2wav"].frames[request]) == 7 and sum(len(a) for a in out["audio"]) == 1920 * 7 - 555
    assert sorted(cut) == ["talker_decode", "thinker_decode"]  # each loop stopped at its bound


def test_cancelling_mid_speech_frees_every_page_and_buffer_on_both_ranks() -> None:
    o = omni("qwen3-omni-cpu2.toml", talker=Endless, rounds=1)
    c = o.cluster
    request = c.submit(chat(Part("text", "tell me a long story"), max_tokens=200, talker_max_tokens=2000))
    audio = 0
    while audio == 0:
        c.pump(limit=20)
        audio += sum(1 for e in c.take_events() if e.kind == "output" and e.output.modality == "audio")
    spoken = o["talker"].stats["frames_out"]
    assert 25 <= spoken < 2000 and o["talker"].counters()["kv_pages_used"] > 0  # mid-speech
    assert o["thinker"].counters()["kv_pages_used"] > 0
    c.coordinator.cancel(request)
    c.pump()
    assert [e.kind for e in c.take_events() if e.kind != "output"] == ["cancelled"]
    assert not leftovers(o)  # no instance, state, mail, stream end, KV page or label left on either rank
    assert o["talker"].stats["frames_out"] < 2000
