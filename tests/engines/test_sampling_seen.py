"""`SeenTokens`, the per-sequence distinct seen tokens the repetition penalty reads: it holds exactly
set(history) under every way a history changes (appends, a prefill's many tokens, a step undone in
place, another list from a restore, fork or import), `sample` draws the same tokens from it as from
the full histories over a long penalised run with rollbacks and a swapped-out list, and Orpheus's
language model draws the same with it as with full histories through checkpoint/restore rollbacks
and a preemption and resume."""

from __future__ import annotations

import random

import pytest
import torch
from wgc.models.orpheus import LanguageModel
from wgc.runtime.components.base import Call
from wgc.runtime.engines.sampling import SamplingParams, sample
from wgc.runtime.engines.seen_tokens import SeenTokens

from tests.models.orpheus.helpers import llm_spec

ORPHEUS = (0.6, 0.8, 1.3)  # temperature, top_p, repetition penalty
DEFAULT = "default"


def _assert_follows(seen: SeenTokens, tokens: list[int]) -> None:
    ids = seen.sync(tokens).ids.tolist()
    assert len(ids) == len(set(ids)) == len(seen)
    assert set(ids) == set(tokens)


def test_seen_tokens_follow_appends_cuts_and_replaced_lists() -> None:
    seen = SeenTokens()
    tokens = [5, 7, 5, 9] + list(range(100, 300))  # a prefill: many at once, repeats, past the first buffer
    _assert_follows(seen, tokens)
    for t in (7, 400, 401, 400):  # decode steps
        tokens.append(t)
        _assert_follows(seen, tokens)
    del tokens[-3:]  # a step undone in place: 401 and 400 are gone
    _assert_follows(seen, tokens)
    assert 401 not in seen.ids.tolist()
    tokens.append(402)  # undone, then a different step to the same length
    n = len(tokens)
    del tokens[-1]
    tokens.append(403)
    assert len(tokens) == n
    _assert_follows(seen, tokens)
    restored = tokens[:10]  # a checkpoint restored: another list, shorter
    _assert_follows(seen, restored)
    forked = list(restored) + [999]  # a fork or an import: another list, equal up to its end
    _assert_follows(seen, forked)
    _assert_follows(seen, [])


def _orpheus_like_run(steps: int, rows: int, vocab: int, stateful: bool) -> list[list[int]]:
    """Tokens drawn over `steps` penalised steps of `rows` rows on a fixed random logit stream, with
    rollbacks in place, checkpoints restored as other lists and a resumed (re-imported) row."""
    gen = torch.Generator().manual_seed(3)
    rng = random.Random(5)
    params = [SamplingParams(temperature=0.6, top_p=0.8, repetition_penalty=1.3, seed=100 + r) for r in range(rows)]
    histories = [[rng.randrange(vocab) for _ in range(rng.randrange(20, 60))] for _ in range(rows)]
    states = [SeenTokens() for _ in range(rows)]
    drawn: list[list[int]] = [[] for _ in range(rows)]
    for step in range(steps):
        # a peaked stream over a small set of likely tokens, so repeats (and the penalty) matter
        logits = torch.randn(rows, vocab, generator=gen) * 0.5
        logits[:, :64] += 4.0
        given = [s.sync(h) for s, h in zip(states, histories)] if stateful else histories
        tokens = sample(logits, params, given, [len(d) for d in drawn]).tolist()
        for r, t in enumerate(tokens):
            histories[r].append(t)
            drawn[r].append(t)
        if step % 37 == 36:  # a speculative step undone in place: the last tokens are cut
            r = step % rows
            del histories[r][-3:]
        if step % 53 == 52:  # a checkpoint restored: an earlier copy of the history
            r = (step // 53) % rows
            histories[r] = list(histories[r][:-4])
        if step == steps // 2:  # preempted and resumed on another rank: the same tokens, a new list
            histories[0] = [int(t) for t in histories[0]]
    return drawn


def test_sample_draws_the_same_from_seen_tokens_as_from_full_histories() -> None:
    with_state = _orpheus_like_run(steps=400, rows=16, vocab=4365, stateful=True)
    plain = _orpheus_like_run(steps=400, rows=16, vocab=4365, stateful=False)
    assert with_state == plain


def test_a_single_row_draws_the_same_from_seen_tokens() -> None:
    """One sampled CPU row goes through `sample`'s one-row path, which reads the state too."""
    assert _orpheus_like_run(steps=150, rows=1, vocab=4365, stateful=True) == \
        _orpheus_like_run(steps=150, rows=1, vocab=4365, stateful=False)


def _full_history(request: int, label: str, tokens: list[int] | None, p: SamplingParams) -> list[int]:
    return list(tokens or []) if p.repetition_penalty != 1.0 else []


def _script(lm: LanguageModel, requests: list[int]) -> dict[int, list[int]]:
    """Prefill, decode, speculate three steps ahead and restore (twice), preempt and resume, decode."""
    out = {r: [t] for r, t in zip(requests, lm.prefill([Call(r, "", ("hello there", "tara", *ORPHEUS))
                                                          for r in requests]))}

    def decode(n: int) -> None:
        for _ in range(n):
            tokens = lm.decode([Call(r, "", (out[r][-1], *ORPHEUS)) for r in requests])
            for r, t in zip(requests, tokens):
                out[r].append(t)

    for _ in range(2):
        decode(8)
        marks = {r: lm.checkpoint(r, DEFAULT) for r in requests}
        last = {r: out[r][-1] for r in requests}
        for _ in range(3):  # ahead, fed its own draws (they enter the history), then rolled back
            tokens = lm.decode([Call(r, "", (last[r], *ORPHEUS)) for r in requests])
            last = dict(zip(requests, tokens))
        for r in requests:
            lm.restore(r, DEFAULT, marks[r])
    decode(6)
    lm.preempt(requests[0])
    decode(20)
    return out


def test_orpheus_draws_the_same_with_seen_tokens_through_rollbacks_and_a_resume(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lm = LanguageModel.tiny(llm_spec(page_size=4), 0, "cpu")
    requests = [3, 4, 5, 6]
    with_state = _script(lm, requests)
    assert lm._seen  # the penalised sequences were followed by their state
    for r in requests:
        lm.release(r)
    assert not lm._seen
    monkeypatch.setattr(lm, "_history", _full_history)
    plain = _script(lm, requests)
    assert with_state == plain
