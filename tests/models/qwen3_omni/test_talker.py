"""The talker against transformers 5.24 `qwen3_omni_moe` on the same tiny random weights (float64 on
both sides): the assistant prefix as `_get_talker_assistant_parts` builds it, one step's logits over
a user turn (text and multimodal rows) and the 9-position prefix, the code predictor greedy, and
whole greedy frame sequences (suppress list and repetition penalty 1.05 included) against
`talker.generate` as the whole model's `generate` calls it."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from wgc.models.qwen3_omni import talker_model as tm
from wgc.models.qwen3_omni.talker import Talker

from tests.models.qwen3_omni.talker_helpers import (
    WALK_EOS,
    call,
    hf_modeling,
    hf_parts,
    hf_talker,
    talker_spec,
    thinker_rows,
    tiny_talker,
)

SPEAKER = "Chelsie"


def _markers(hf, talker: Talker) -> tuple[Tensor, Tensor, Tensor]:
    """transformers' tts_bos / tts_eos / tts_pad embeds [1, 1, H] from the thinker rows the talker holds."""
    rows = talker.model.thinker_rows
    with torch.no_grad():
        proj = hf.text_projection(rows[[tm.ROW_TTS_BOS, tm.ROW_TTS_EOS, tm.ROW_TTS_PAD]][None])  # [1, 3, H]
    return proj[:, 0:1], proj[:, 1:2], proj[:, 2:3]


def _hf_inputs(hf, talker: Talker, user: Tensor, mm: Tensor, reply: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """transformers' talker input (user part with its close, then the assistant prefix), the trailing
    text part and tts_pad, built by the whole model's own methods."""
    parts = hf_parts(hf, talker)
    rows = talker.model.thinker_rows
    user_rows = torch.cat([user.double(), rows[[tm.ROW_IM_END, tm.ROW_NEWLINE]]])[None]  # [1, L, D]
    user_mm = torch.cat([mm, torch.zeros(2, dtype=torch.bool)])[None]  # [1, L]
    cls = hf_modeling.Qwen3OmniMoeForConditionalGeneration
    with torch.no_grad():
        user_part = cls._get_talker_user_parts(parts, 0, user_rows.shape[1], user_mm, user_rows, user_rows)
        header = rows[[tm.ROW_IM_START, tm.ROW_ASSISTANT, tm.ROW_NEWLINE]]
        assistant = torch.cat([header, reply.double()])[None]  # [1, 3 + R, D]
        bos, eos, pad = _markers(hf, talker)
        speaker = talker.config.speaker_id(SPEAKER)
        prefix, _, trailing = cls._get_talker_assistant_parts(parts, 0, assistant.shape[1], speaker, assistant,
                                                              pad, bos, eos)
    return torch.cat([user_part, prefix], dim=1), trailing, pad


def _prompt(seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """A user turn of 7 rows (rows 3 and 4 multimodal: accept-layer states) and a reply of 3 tokens."""
    user = thinker_rows(7, seed)
    mm = torch.zeros(7, dtype=torch.bool)
    mm[3:5] = True
    return user, mm, thinker_rows(3, seed + 1)


def test_prefix_rows_match_transformers() -> None:
    talker = tiny_talker(1)
    hf = hf_talker(talker)
    user, mm, reply = _prompt(3)
    full, trailing, _ = _hf_inputs(hf, talker, user, mm, reply)
    with torch.no_grad():
        ours = talker.prefix_rows(talker.model.marker_rows(), reply[0].double(), talker.config.speaker_id(SPEAKER))
    assert ours.shape == (11, talker.config.hidden)
    torch.testing.assert_close(ours, full[0, -11:], atol=1e-12, rtol=1e-12)  # close + 9-position prefix
    assert trailing.shape[1] == 3  # reply tokens 2 and 3, then tts_eos: what decode's text parts give


def _capture_logits(talker: Talker) -> list[Tensor]:
    seen: list[Tensor] = []
    talker.model.codec_head.register_forward_hook(lambda _m, _i, out: seen.append(out.detach().clone()))
    return seen


def test_one_step_with_the_prefix_matches_transformers() -> None:
    talker = tiny_talker(2)
    hf = hf_talker(talker)
    user, mm, reply = _prompt(5)
    full, _, _ = _hf_inputs(hf, talker, user, mm, reply)
    logits = _capture_logits(talker)
    assert talker.prefill([call(1, {"rows": user, "multimodal": mm})]) == [None]
    frame = talker.last_prefill([call(1, reply[:1], SPEAKER, 0.0, 50, 1.05)])[0]
    with torch.no_grad():
        want = hf(inputs_embeds=full, attention_mask=torch.ones(full.shape[:2], dtype=torch.long)).logits[0, -1]
    torch.testing.assert_close(logits[0][0], want, atol=1e-10, rtol=1e-10)
    allowed = want.clone()
    allowed[talker.suppress] = float("-inf")
    assert int(frame[0]) == int(allowed.argmax())
    assert frame.shape == (16,) and frame.dtype == torch.int64


def test_code_predictor_greedy_matches_transformers() -> None:
    """Several frames at once (one batch, one dense cache) against transformers' nested generate per frame."""
    talker = tiny_talker(3)
    hf = hf_talker(talker)
    gen = torch.Generator().manual_seed(0)
    frames = 4
    hidden = torch.randn(frames, talker.config.hidden, generator=gen, dtype=torch.float64)
    c0 = torch.randint(0, talker.config.predictor.vocab, (frames,), generator=gen)
    with torch.no_grad():
        first = talker.model.model.codec_embedding(c0)
        ours = talker.model.code_predictor.generate(hidden, first, lambda _j, logits: logits.argmax(-1))
        for f in range(frames):
            embeds = torch.stack([hidden[f], first[f]])[None]  # [1, 2, H]
            want = hf.code_predictor.generate(inputs_embeds=embeds, max_new_tokens=15, do_sample=False)
            assert ours[f].tolist() == want[0, -15:].tolist()
    assert len({tuple(r) for r in ours.tolist()}) == frames  # the frames differ: a real comparison


@pytest.mark.parametrize(("seed", "penalty"), [(4, 1.05), (5, 1.3)])
def test_greedy_frames_match_transformers_generate(seed: int, penalty: float) -> None:
    """Reply tokens, then tts_eos, then tts_pad as the text parts; the suppress list (without it these
    weights pick specials at once) and the repetition penalty (1.3 changes seed 5's codes from frame 4 on)."""
    talker = tiny_talker(seed)
    hf = hf_talker(talker)
    user, mm, reply = _prompt(seed + 10)
    full, trailing, pad = _hf_inputs(hf, talker, user, mm, reply)
    steps = 9
    c = talker.config
    suppressed = [i for i in c.suppressed() if i != c.codec_eos]
    with torch.no_grad():
        out = hf.generate(inputs_embeds=full, trailing_text_hidden=trailing, tts_pad_embed=pad,
                          attention_mask=torch.ones(full.shape[:2], dtype=torch.long), max_new_tokens=steps,
                          do_sample=False, repetition_penalty=penalty, suppress_tokens=suppressed,
                          eos_token_id=c.codec_eos, output_hidden_states=True, return_dict_in_generate=True)
    want = [h[-1][0].tolist() for h in out.hidden_states if h[-1] is not None]  # complete frames
    heads = out.sequences[0].tolist()

    talker.prefill([call(1, {"rows": user, "multimodal": mm})])
    frame = talker.last_prefill([call(1, reply[:1], SPEAKER, 0.0, 50, penalty)])[0]
    got = [frame]
    texts = [reply[1:2], reply[2:3]] + [None] * steps
    while len(got) < len(heads) and int(got[-1][0]) != WALK_EOS:
        got.append(talker.decode([call(1, got[-1], texts[len(got) - 1], 0.0, 50, penalty)])[0])
    assert [int(f[0]) for f in got] == [WALK_EOS if h == c.codec_eos else h for h in heads]
    assert [f.tolist() for f in got[:len(want)]] == want
    assert len(want) >= 4  # past the reply (3 tokens) into tts_eos and tts_pad


def test_the_constructor_without_weights_takes_its_thinker_rows_from_the_tiny_thinker() -> None:
    """A worker process builds a component with its plain constructor: with no weights its seven thinker
    rows must be the tiny thinker component's embeddings, or frames drift from the reference."""
    from wgc.models.qwen3_omni.talker import Talker
    from wgc.models.qwen3_omni.thinker import Thinker

    from tests.models.qwen3_omni.thinker_reference import spec as thinker_spec

    talker = Talker(talker_spec(), 0, "cpu")
    thinker = Thinker(thinker_spec(), 0, "cpu")
    ids = torch.tensor(talker.model.config.thinker.rows())
    expected = thinker.model.model.embed_tokens.weight.detach().index_select(0, ids)
    torch.testing.assert_close(talker.model.thinker_rows, expected.to(talker.model.thinker_rows.dtype))
