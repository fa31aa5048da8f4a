"""The talker fed by the real tiny thinker component, as models/qwen3_omni.walk wires them (each
prefill part's rows, the reply tokens' `talker_input`, the stream's empty items after the thinker
ends), against transformers 5.24's whole-model `generate` (greedy thinker and talker, speaker,
suppress list, repetition penalty 1.05) on the same tiny weights: the reply and every codec frame."""

from __future__ import annotations

import torch
from torch import Tensor
from wgc.models.qwen3_omni.config import VocabMap

from tests.models.qwen3_omni import thinker_reference as tr
from tests.models.qwen3_omni.talker_helpers import (
    WALK_EOS,
    call,
    hf_config,
    hf_configs,
    hf_modeling,
    hf_talker,
    tiny_talker,
)

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
    talker = tiny_talker(22)
    tokens, vmap = thinker.config.tokens, VocabMap(thinker.config)
    ids = [tokens.im_start, tokens.user, tokens.newline, *prompt.encode(), tokens.im_end, tokens.newline,
           tokens.im_start, tokens.assistant, tokens.newline]  # what the thinker writes, as Qwen ids
    config = hf_configs.Qwen3OmniMoeConfig(
        thinker_config=tr.hf_config(thinker.config).to_dict(), talker_config=hf_config(talker.config).to_dict(),
        code2wav_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                         "num_key_value_heads": 2, "intermediate_size": 64, "codebook_size": 64, "decoder_dim": 32},
        **{f"{name}_token_id": vmap.to_model(getattr(tokens, name))
           for name in ("im_start", "im_end", "tts_pad", "tts_bos", "tts_eos", "system", "user", "assistant")})
    for part in (config.thinker_config, config.thinker_config.text_config, config.talker_config,
                 config.talker_config.text_config):
        part._attn_implementation = "eager"
        part._experts_implementation = "eager"
    model = hf_modeling.Qwen3OmniMoeForConditionalGeneration(config).double().eval()
    model.thinker = tr.reference(thinker).double()
    model.talker = hf_talker(talker)
    codes: list[Tensor] = []
    model.code2wav.chunked_decode = lambda c, **_: codes.append(c) or torch.zeros(1, 1, 1)
    with torch.no_grad():
        seq, _ = model.generate(input_ids=torch.tensor([[vmap.to_model(i) for i in ids]]), speaker="Ethan",
                                thinker_max_new_tokens=REPLY + 1, thinker_do_sample=False,
                                thinker_eos_token_id=vmap.to_model(tokens.im_end), talker_do_sample=False,
                                talker_max_new_tokens=FRAMES)
    reply = [vmap.from_model(t) for t in seq[0, len(ids):].tolist()]
    return reply, codes[0][0].T.tolist()  # the frames code2wav gets: [16, n] -> n frames


def test_talker_after_the_thinker_matches_transformers_generate() -> None:
    prompt = "hi there"
    reply, frames = _ours(prompt)
    want_reply, want_frames = _theirs(prompt)
    assert reply == want_reply
    assert [f.tolist() for f in frames[:len(want_frames)]] == want_frames
    assert len(want_frames) >= REPLY + 1  # the reply's rows, tts_eos and tts_pad all reached the talker
