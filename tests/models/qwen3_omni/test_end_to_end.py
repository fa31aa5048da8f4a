"""Qwen3-Omni end to end in process: models/qwen3_omni.walk compiled for placements/cpu.toml and
qwen3-omni-cpu2.toml (thinker on rank 0; talker and code2wav on rank 1), run on the tiny components.

Greedy, the reply and every codec frame equal transformers 5.24's whole-model `generate` on the same
weights (its audio-input bug worked around, models-wave2 §2.5), for a reply cut by `max_tokens` and
for one the thinker ends with <|im_end|>: every reply token reaches the talker (the last words too),
<|im_end|> never does, and neither end token reaches the client or code2wav. Streamed audio has
1920·N − 555 samples for N frames and equals one decode of all of them (docs/models/qwen3_omni.md).
"""

from __future__ import annotations

import pytest
import torch
from wgc.models.qwen3_omni.thinker import Thinker
from wgc.runtime.protocol.messages import Part

from tests.models.qwen3_omni.e2e_helpers import (
    GREEDY,
    PLACEMENTS,
    Endless,
    chat,
    clip,
    ends_after,
    frames_of,
    omni,
    parity_audio,
    parity_thinker,
    run,
)
from tests.models.qwen3_omni.talker_helpers import hf_generate, hf_omni, tiny_talker

REPLY = 6  # reply tokens when max_tokens cuts the reply
FRAMES = 30  # codec frames when talker_max_tokens cuts the speech: two left_context chunks
QUESTION = "what is it?"


def user_turn(thinker: Thinker, *middle: int) -> list[int]:
    t = thinker.config.tokens
    return [t.im_start, t.user, t.newline, *middle, t.im_end, t.newline, t.im_start, t.assistant, t.newline]


@pytest.mark.slow
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_audio_and_text_in_speech_out_equal_transformers_generate(placement: str) -> None:
    o = omni(placement, parity=True)
    samples = clip(1.0, seed=4)
    spec = chat(Part("audio", samples), Part("text", QUESTION), max_tokens=REPLY, talker_max_tokens=FRAMES, **GREEDY)
    request, out, cut = run(o, spec)

    thinker, enc = parity_thinker(), parity_audio()
    features = enc.features(samples)  # [128, F]: the processor's, bit for bit (test_audio.py)
    t = thinker.config.tokens
    ids = user_turn(thinker, t.audio_start, *[t.audio] * enc.config.tokens(features.shape[1]), t.audio_end,
                    *QUESTION.encode())
    model = hf_omni(thinker, tiny_talker(22), enc)
    reply, frames = hf_generate(model, thinker, ids, REPLY + 1, FRAMES + 1, input_features=features[None].double(),
                                feature_attention_mask=torch.ones(1, features.shape[1], dtype=torch.long))
    # transformers never feeds its talker the last token it samples: with one token more, its talker
    # reads the REPLY tokens ours emits and sends, and speaks FRAMES whole frames
    assert out["text"] == reply[:REPLY] and len(reply) == REPLY + 1 and t.im_end not in reply
    assert o["thinker"].fed[request] == out["text"]  # every reply token reached the talker
    assert frames_of(o, request) == frames and len(frames) == FRAMES
    assert sorted(cut) == ["talker_decode", "thinker_decode"]  # both bounds stopped their loops


@pytest.mark.slow
def test_a_reply_the_thinker_ends_reaches_the_talker_whole_and_im_end_never() -> None:
    prompt = "hi there"
    edit = ends_after(4, prompt)
    o = omni("qwen3-omni-cpu2.toml", parity=True, thinker_edit=edit)
    request, out, cut = run(o, chat(Part("text", prompt), max_tokens=20, talker_max_tokens=12, **GREEDY))

    thinker = parity_thinker(edit)
    model = hf_omni(thinker, tiny_talker(22))
    reply, frames = hf_generate(model, thinker, user_turn(thinker, *prompt.encode()), 20, 13)
    im_end = thinker.config.tokens.im_end
    assert reply[-1] == im_end and out["text"] == reply[:-1] and len(out["text"]) == 4
    assert o["thinker"].fed[request] == out["text"]  # <|im_end|> never fed, the last token fed
    assert frames_of(o, request) == frames and len(frames) == 12
    assert cut == ["talker_decode"]  # the thinker ended by itself


def test_streamed_audio_is_one_decode_of_every_frame() -> None:
    o = omni("qwen3-omni-cpu2.toml", talker=Endless)
    request, out, cut = run(o, chat(Part("text", "Hello, how are you?"), max_tokens=8, talker_max_tokens=60))
    frames = o["code2wav"].frames[request]
    assert len(frames) == 60 and "talker_decode" in cut  # the max bound stopped it, and the end says so
    chunks = out["audio"]
    assert [len(a) for a in chunks] == [1920 * 25 - 555, 1920 * 25, 1920 * 10]  # the last chunk: its new frames
    full = o["code2wav"].decode_frames(torch.stack(frames)[None])[0]  # one decode of all 60 frames
    streamed = torch.cat(chunks)
    assert streamed.shape == full.shape == (1920 * 60 - 555,)
    torch.testing.assert_close(streamed, full, atol=1e-5, rtol=0)
