"""The thinker against transformers 5.24 `qwen3_omni_moe` on the same tiny random weights (§2.6):
logits of a paged prefill and paged decode steps, batched over ragged requests; a text + image
(with deepstack) + audio prompt at `get_rope_index`'s positions, with the accept-layer hidden state
the prefill hands the talker."""

from __future__ import annotations

import torch
from torch import Tensor
from wgc.models.qwen3_omni.config import VocabMap
from wgc.models.qwen3_omni.thinker import Thinker
from wgc.runtime.components.base import Call

from tests.models.qwen3_omni.thinker_reference import forward, reference, tiny_thinker

TOL = dict(atol=1e-5, rtol=1e-5)  # float64 on both sides, but both take softmaxes and norms in float32


def record_logits(m: Thinker) -> list[Tensor]:
    seen: list[Tensor] = []
    m.model.lm_head.register_forward_hook(lambda _m, _i, out: seen.append(out.detach().clone()))
    return seen


def user_header(m: Thinker, text: str) -> list[int]:
    t = m.config.tokens
    return [t.im_start, t.user, t.newline, *text.encode()]


def reply_header(m: Thinker) -> list[int]:
    t = m.config.tokens
    return [t.im_end, t.newline, t.im_start, t.assistant, t.newline]


def reply(m: Thinker, requests: list[int], steps: int) -> list[list[int]]:
    """begin_reply then `steps` decode steps, greedy, all requests batched: each request's tokens."""
    toks = m.begin_reply([Call(r, "", (0.0, 1.0)) for r in requests])
    out = [[t] for t in toks]
    for _ in range(steps):
        toks = m.decode([Call(r, "", (t[-1], 0.0, 1.0)) for r, t in zip(requests, out)])
        for seq, t in zip(out, toks):
            seq.append(t)
    return out


def text_positions(n: int) -> Tensor:
    return torch.arange(n).view(1, 1, n).expand(3, 1, n)


def test_text_prefill_and_paged_decode() -> None:
    m = tiny_thinker(seed=3)  # pages of 4 tokens: every sequence spans several
    hf, vocab = reference(m), VocabMap(m.config)
    logits = record_logits(m)
    prompts = ["hi there", "a longer prompt, ok?"]
    rows = m.prefill_text([Call(i, "", (p,)) for i, p in enumerate(prompts)])
    replies = reply(m, [0, 1], steps=4)
    assert len(logits) == 5 and all(step.shape == (2, m.config.vocab) for step in logits)
    for i, prompt in enumerate(prompts):
        prefix = user_header(m, prompt)
        ids = [vocab.to_model(t) for t in [*prefix, *reply_header(m), *replies[i]]]
        embeds = hf.model.language_model.embed_tokens(torch.tensor(ids))  # [T, hidden]
        expected, _ = forward(hf, embeds, text_positions(len(ids)))  # [T, vocab]
        first = len(prefix) + len(reply_header(m)) - 1  # begin_reply's last row
        for k, step in enumerate(logits):
            torch.testing.assert_close(step[i].double(), expected[first + k], **TOL)
        assert [vocab.to_model(t) for t in replies[i][:4]] == expected[first:first + 4].argmax(-1).tolist()
        # the talker's rows of a text part: the input embeddings of its user-turn rows
        torch.testing.assert_close(rows[i], embeds[:len(prefix)], **TOL)


def test_multimodal_prompt_with_deepstack_and_accept_layer() -> None:
    m = tiny_thinker(seed=5)
    c, hf, vocab = m.config, reference(m), VocabMap(m.config)
    t = c.tokens
    logits = record_logits(m)
    gen = torch.Generator().manual_seed(0)
    image = torch.randn(6, c.hidden, generator=gen, dtype=torch.float64)  # grid_thw (1, 4, 6): 1 x 2 x 3 tokens
    deepstack = torch.randn(c.deepstack_layers, 6, c.hidden, generator=gen, dtype=torch.float64)
    clip = torch.randn(5, c.hidden, generator=gen, dtype=torch.float64)  # 40 mel frames -> 5 tokens
    m.prefill_text([Call(0, "", ("look: ",))])
    seen_image = m.prefill_embeds([Call(0, "", ({"embeds": image, "grid_thw": [1, 4, 6], "deepstack": deepstack},))])[0]
    seen_audio = m.prefill_embeds([Call(0, "", (clip,))])[0]
    m.prefill_text([Call(0, "", (" what?",))])
    replies = reply(m, [0], steps=2)[0]

    qwen = [*user_header(m, "look: "), t.vision_start, *[t.image] * 6, t.vision_end,
            t.audio_start, *[t.audio] * 5, t.audio_end, *b" what?", *reply_header(m), *replies]
    ids = torch.tensor([vocab.to_model(i) for i in qwen])
    img_at, aud_at = 10, 18  # first image row, first audio row
    position_ids, _ = hf.get_rope_index(ids[None], image_grid_thw=torch.tensor([[1, 4, 6]]),
                                        attention_mask=torch.ones(1, len(ids)), audio_seqlens=torch.tensor([40]))
    embeds = hf.model.language_model.embed_tokens(ids).clone()  # [T, hidden]
    embeds[img_at:img_at + 6], embeds[aud_at:aud_at + 5] = image, clip
    visual = torch.zeros(len(ids), dtype=torch.bool)
    visual[img_at:img_at + 6] = True
    expected, hidden_states = forward(hf, embeds, position_ids, visual, list(deepstack))
    first = len(qwen) - len(replies) - 1
    for k, step in enumerate(logits):
        torch.testing.assert_close(step[0].double(), expected[first + k], **TOL)
    assert [vocab.to_model(r) for r in replies[:2]] == expected[first:first + 2].argmax(-1).tolist()

    accept = hidden_states[c.accept_layer]  # [T, hidden]: before layer 0's deepstack addition (accept 1)
    for seen, at, n in ((seen_image, img_at, 6), (seen_audio, aud_at, 5)):
        mm = seen["multimodal"]
        assert mm.tolist() == [False] + [True] * n + [False]  # start marker, placeholders, end marker
        torch.testing.assert_close(seen["rows"][mm], accept[at:at + n], **TOL)
        torch.testing.assert_close(seen["rows"][~mm], embeds[[at - 1, at + n]], **TOL)
        torch.testing.assert_close(seen["positions"], (position_ids[:, 0, at - 1:at + n + 1] -
                                                       position_ids[:, 0, at - 1:at]).float())
    # the label's next position is the one transformers gives the text after the audio
    assert m.kv.seq(0, "main").position - len(b" what?") - len(reply_header(m)) - len(replies) + 1 == \
        int(position_ids[0, 0, aud_at + 6])
