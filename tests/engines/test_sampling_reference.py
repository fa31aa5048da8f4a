"""The batched sampler against a plain one-row reference written here, token for token under the
same uniforms: the repetition penalty over the set of seen tokens, temperature, top-k, the top-p
nucleus and min-p computed from a full ranking in float64, and the draw by inverse CDF at
u(seed, step, attempt) from `uniforms` (the tensor version), rejected until it lands in the kept
set, then the ranked draw at attempt `_ATTEMPTS`. Also: `row_uniform` is `uniforms`'s column."""

from __future__ import annotations

import random

import pytest
import torch
from wgc.runtime.engines import sampling
from wgc.runtime.engines.sampling import SamplingParams, sample
from wgc.runtime.engines.uniforms import row_key, row_uniform, uniforms


def _penalized(row: torch.Tensor, history: list[int], penalty: float) -> torch.Tensor:
    """Hugging Face's penalty, token by token over the distinct seen ids (float32 like the logits)."""
    out = row.clone()
    factor = torch.tensor(penalty, dtype=torch.float32)
    for token in set(history):
        x = row[token]
        out[token] = x / factor if x > 0 else x * factor
    return out


def _kept_set(probs: list[float], p: SamplingParams) -> set[int]:
    """Tokens kept by top-p (the tokens strictly more likely than it hold less than top_p) and min-p,
    from a full ranking, masses summed in float64; the most likely token is always kept."""
    order = sorted(range(len(probs)), key=lambda t: -probs[t])
    best = probs[order[0]]
    kept = {order[0]}
    mass, above, previous = 0.0, 0.0, None
    for token in order:
        q = probs[token]
        if q != previous:  # a run of equal probabilities shares the mass above its first member
            above, previous = mass, q
        mass += q
        if q > 0.0 and (p.top_p >= 1 or above < p.top_p) and q >= p.min_p * best:
            kept.add(token)
    return kept


def _reference(logits: torch.Tensor, p: SamplingParams, history: list[int], step: int) -> int:
    """One row's token, step by step as the module docstring of sampling.py defines it."""
    row = logits.float()
    if p.repetition_penalty != 1.0:
        row = _penalized(row, history, p.repetition_penalty)
    if p.greedy:
        return int(row.argmax())
    row = row / torch.tensor(p.temperature, dtype=torch.float32)
    if 0 < p.top_k < row.shape[0]:
        kth = sorted(row.tolist(), reverse=True)[p.top_k - 1]
        row = row.masked_fill(row < kth, float("-inf"))
    probs = row.softmax(-1)  # float32, as the sampler's: its CDF is the same float64 sum
    cdf = probs.double().cumsum(-1)
    assert p.seed is not None
    u = uniforms([p.seed], [step], sampling._ATTEMPTS + 1, "cpu")[0].tolist()
    kept = _kept_set(probs.tolist(), p)
    for j in range(sampling._ATTEMPTS):
        candidate = min(int(torch.searchsorted(cdf, torch.tensor([u[j] * float(cdf[-1])], dtype=torch.float64),
                                               right=True)), row.shape[0] - 1)
        if candidate in kept:
            return candidate
    ranked = sorted(kept, key=lambda t: -float(probs[t]))  # the kept set in rank order
    weights = torch.tensor([float(probs[t]) for t in ranked], dtype=torch.float64)
    kept_cdf = (weights / weights.sum()).cumsum(-1)
    pick = int(torch.searchsorted(kept_cdf, torch.tensor([u[sampling._ATTEMPTS] * float(kept_cdf[-1])],
                                                         dtype=torch.float64), right=True))
    return ranked[min(pick, len(ranked) - 1)]


def _random_case(rng: random.Random, trial: int) -> tuple[torch.Tensor, list[SamplingParams], list[list[int]], list[int]]:
    batch = rng.choice([1, 1, 2, 3, 8])
    vocab = rng.choice([6, 40, 300, 1200])
    logits = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(trial)) * rng.choice([0.3, 1.0, 3.0, 8.0])
    params = [SamplingParams(temperature=rng.choice([0.0, 0.6, 1.0, 1.7]), top_k=rng.choice([0, 0, 3, 50]),
                             top_p=rng.choice([1.0, 0.8, 0.8, 0.3, 0.95]), min_p=rng.choice([0.0, 0.0, 0.05, 0.4]),
                             repetition_penalty=rng.choice([1.0, 1.3, 1.3, 0.7]), seed=rng.randrange(2**63))
              for _ in range(batch)]
    histories = [[rng.randrange(vocab) for _ in range(rng.randrange(0, 3 * vocab // 2))] for _ in range(batch)]
    return logits, params, histories, [rng.randrange(5000) for _ in range(batch)]


@pytest.mark.parametrize("attempts", [sampling._ATTEMPTS, 1, 0], ids=["rejection", "one-attempt", "ranked"])
def test_batched_sampler_draws_the_reference_token(attempts: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row of random batches (mixed greedy, penalised, top-k/top-p/min-p rows) draws the
    token the one-row reference draws from the same uniforms; with one attempt or none, rows fall
    back to the ranked draw, which must agree too."""
    monkeypatch.setattr(sampling, "_ATTEMPTS", attempts)
    rng = random.Random(attempts)
    compared = 0
    for trial in range(100):
        logits, params, histories, steps = _random_case(rng, trial)
        tokens = sample(logits, params, histories, steps).tolist()
        for row, (p, history, step) in enumerate(zip(params, histories, steps)):
            assert tokens[row] == _reference(logits[row], p, history, step), (trial, row, p)
            compared += 1
    assert compared > 200


def test_a_penalised_sampled_row_at_orpheus_settings_matches_over_many_steps() -> None:
    """Orpheus's settings (temperature 0.6, top_p 0.8, penalty 1.3) on a 4,365-token vocabulary, a
    history growing by the drawn token each step: 200 steps, the reference's tokens every step."""
    gen = torch.Generator().manual_seed(11)
    p = SamplingParams(temperature=0.6, top_p=0.8, repetition_penalty=1.3, seed=2024)
    history = list(range(256, 300))
    for step in range(200):
        logits = torch.randn(1, 4365, generator=gen) * 2.0
        token = int(sample(logits, [p], [history], [step])[0])
        assert token == _reference(logits[0], p, history, step), step
        history.append(token)
    assert len(set(history[44:])) > 50  # it samples, across the vocabulary


def test_row_uniform_is_the_column_of_uniforms() -> None:
    seeds, steps = [0, 1, 2**62 + 5, 2**63 - 1], [0, 7, 3, 2**40]
    block = uniforms(seeds, steps, 20, "cpu")  # [4, 20] float64
    for b, (seed, step) in enumerate(zip(seeds, steps)):
        key = row_key(seed, step)
        assert [row_uniform(key, j) for j in range(20)] == block[b].tolist()


def test_a_row_alone_draws_what_it_draws_in_a_batch() -> None:
    """One CPU row without top-k takes its own path (`_sample_row`: numpy for the exact parts);
    it must draw, over random rows and steps, the token the batched path gives that row beside
    two others, and the one-row reference's."""
    rng = random.Random(3)
    for trial in range(200):
        vocab = rng.choice([6, 300, 4365])
        logits = torch.randn(3, vocab, generator=torch.Generator().manual_seed(trial)) * rng.choice([0.3, 2.0, 6.0])
        params = [SamplingParams(temperature=rng.choice([0.6, 1.0, 1.7]), top_p=rng.choice([1.0, 0.8, 0.3]),
                                 min_p=rng.choice([0.0, 0.0, 0.1]), repetition_penalty=rng.choice([1.0, 1.3, 0.7]),
                                 seed=rng.randrange(2**63)) for _ in range(3)]
        histories = [[rng.randrange(vocab) for _ in range(rng.randrange(0, 40))] for _ in range(3)]
        steps = [rng.randrange(5000) for _ in range(3)]
        batched = sample(logits, params, histories, steps).tolist()
        alone = int(sample(logits[:1], params[:1], histories[:1], steps[:1])[0])
        assert alone == batched[0] == _reference(logits[0], params[0], histories[0], steps[0]), (trial, params[0])
