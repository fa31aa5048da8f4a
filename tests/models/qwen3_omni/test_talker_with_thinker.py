"""The talker fed by the real tiny thinker component, as models/qwen3_omni.walk wires them (each
prefill part's rows, the reply tokens' `talker_input`, the stream's empty items after the thinker
ends), against transformers 5.24's whole-model `generate` (greedy thinker and talker, speaker,
suppress list, repetition penalty 1.05) on the same tiny weights: the reply and every codec frame."""

from __future__ import annotations

from torch import Tensor

from tests.models.qwen3_omni import thinker_reference as tr
from tests.models.qwen3_omni.talker_helpers import WALK_EOS, call, hf_generate, hf_omni, tiny_talker

REPLY = 5  # reply tokens the talker reads (the thinker samples one more, never sent: the walk's loop)
FRAMES = 9  # codebook-0 codes transformers samples; all but the last come with their residual codes


def _ours(prompt: str) -> tuple[list[int], list[Tensor]]:
    thinker = tr.tiny_thinker(21)
    talker = tiny_talker(22)
    talker.model.load_thinker_rows(thinker.model.model.embed_tokens.weight)
    args = ("Ethan", 0.0, 50, 1.05)
    talker.prefill([call(1, thinker.prefill_text([call(1, prompt)])[0])])
    reply = [thinker.begin_reply([call(1, 0.0, 1.0)])[0]]
    rows = []
    for _ in range(REPLY):
        rows.append(thinker.talker_input([call(1, reply[-1])])[0])
        reply.append(thinker.decode([call(1, reply[-1], 0.0, 1.0)])[0])
    frames = [talker.last_prefill([call(1, rows[0], *args)])[0]]
    while len(frames) < FRAMES and int(frames[-1][0]) != WALK_EOS:
        text = rows[len(frames)] if len(frames) < len(rows) else None
        frames.append(talker.decode([call(1, frames[-1], text, *args[1:])])[0])
    return reply, frames


def _theirs(prompt: str) -> tuple[list[int], list[list[int]]]:
    thinker = tr.tiny_thinker(21)
    t = thinker.config.tokens
    ids = [t.im_start, t.user, t.newline, *prompt.encode(), t.im_end, t.newline,
           t.im_start, t.assistant, t.newline]  # what the thinker writes
    return hf_generate(hf_omni(thinker, tiny_talker(22)), thinker, ids, REPLY + 1, FRAMES)


def test_talker_after_the_thinker_matches_transformers_generate() -> None:
    prompt = "hi there"
    reply, frames = _ours(prompt)
    want_reply, want_frames = _theirs(prompt)
    assert reply == want_reply
    assert [f.tolist() for f in frames[:len(want_frames)]] == want_frames
    assert len(want_frames) >= REPLY + 1  # the reply's rows, tts_eos and tts_pad all reached the talker
