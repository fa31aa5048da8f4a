"""A decode step (one token a row) projects every row without an index of the rows' last tokens
(paged_llama._dynamic): each row's logits are still its own sequence's, equal to a prefill of the
same tokens; a step mixing a prompt with decode rows still projects only each row's last token."""

from __future__ import annotations

import torch
from wgc.models.llama import ChatModel

from tests.models.llama.helpers import lm_spec


def test_decode_rows_are_their_own_sequences_and_mixed_steps_pick_last_tokens() -> None:
    lm = ChatModel(lm_spec(page_size=4), 0, "cpu", preset="tiny")
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (3, 9, 5)]
    nxt = [11, 22, 33]
    lm.forward([(r, "main", p) for r, p in enumerate(prompts)])
    decoded = lm.forward([(r, "main", [t]) for r, t in enumerate(nxt)])  # [3, vocab], the decode path
    whole = lm.forward([(10 + r, "main", [*p, t]) for r, (p, t) in enumerate(zip(prompts, nxt))])  # [3, vocab]
    assert decoded.shape == whole.shape == (3, lm.config.llama.vocab)
    torch.testing.assert_close(decoded, whole, atol=1e-5, rtol=0)
    mixed = lm.forward([(20, "main", [*prompts[1], nxt[1]]), (0, "main", [44])])  # a prompt and a decode row
    alone = lm.forward([(21, "main", [*prompts[1], nxt[1]])])
    assert mixed.shape == (2, lm.config.llama.vocab)
    torch.testing.assert_close(mixed[:1], alone, atol=1e-5, rtol=0)
    for r in (0, 1, 2, 10, 11, 12, 20, 21):
        lm.release(r)
