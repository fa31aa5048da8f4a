"""Batched sampling: greedy, per-seed reproducibility whatever the batch, the kept sets of
top-k/top-p/min-p computed independently here, the draw's distribution, penalty, finishing."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import pytest
import torch
from wgc.runtime.engines.sampling import SamplingParams, finished, sample

VOCAB = 40


def _logits(seed: int, rows: int = 1, vocab: int = VOCAB, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * scale  # [rows, V]


@pytest.mark.parametrize("vocab", [7, 512, 8192])
def test_greedy_takes_the_first_of_equal_best_tokens_as_torch_argmax_does(vocab: int) -> None:
    logits = torch.randn(9, vocab, generator=torch.Generator().manual_seed(vocab))
    logits[2, 5] = logits[2, 3] = logits[2].max() + 1  # a tie: the first wins
    logits[4, :] = 0.5  # all equal: token 0
    greedy = [SamplingParams(temperature=0.0)] * 9
    tokens = sample(logits, greedy, [[]] * 9, [0] * 9)
    assert tokens.dtype == torch.int64 and tokens.tolist() == logits.argmax(-1).tolist()
    assert tokens[2] == 3 and tokens[4] == 0
    wide = torch.randn(9, 2 * vocab)[:, ::2]  # rows not contiguous
    assert sample(wide, greedy, [[]] * 9, [0] * 9).tolist() == wide.argmax(-1).tolist()


def test_greedy_is_the_argmax_and_mixes_with_sampled_rows() -> None:
    logits = _logits(0, rows=6)
    params = [SamplingParams(temperature=0.0) if i % 2 == 0 else SamplingParams(seed=i) for i in range(6)]
    tokens = sample(logits, params, [[]] * 6, [0] * 6)
    assert tokens.dtype == torch.int64 and tokens.shape == (6,)
    assert tokens[::2].tolist() == logits.argmax(-1)[::2].tolist()
    all_greedy = sample(logits, [SamplingParams(temperature=0.0, top_k=3)] * 6, [[]] * 6, [0] * 6)
    assert all_greedy.tolist() == logits.argmax(-1).tolist()


def _generate(row: int, batch: list[tuple[int, SamplingParams]], steps: int = 20) -> list[int]:
    """Row `row`'s tokens over `steps` steps when batched with `batch` (index: the row's logits stream)."""
    out = []
    for step in range(steps):
        logits = torch.cat([_logits(1000 * i + step) for i, _ in batch])  # [B, V]: each row's own stream
        tokens = sample(logits, [p for _, p in batch], [[]] * len(batch), [step] * len(batch))
        out.append(int(tokens[[i for i, _ in batch].index(row)]))
    return out


def test_a_seeded_row_draws_the_same_tokens_in_any_batch() -> None:
    mine = SamplingParams(temperature=0.9, top_k=20, top_p=0.95, min_p=0.02, seed=1234)
    others = [
        (1, SamplingParams(seed=7)),
        (2, SamplingParams(temperature=0.0)),
        (3, SamplingParams(temperature=1.5, top_p=0.5, seed=99)),
        (4, SamplingParams(top_k=2)),  # unseeded
        (5, SamplingParams(min_p=0.3, repetition_penalty=1.3, seed=5)),
    ]
    alone = _generate(0, [(0, mine)])
    assert _generate(0, [*others[:2], (0, mine), *others[2:]]) == alone
    assert _generate(0, [(0, mine), *reversed(others)]) == alone
    assert _generate(0, [others[3], (0, mine)]) == alone
    assert len(set(alone)) > 3  # it samples: not one token over and over
    other_seed = _generate(0, [(0, SamplingParams(temperature=0.9, top_k=20, top_p=0.95, min_p=0.02, seed=4321))])
    assert other_seed != alone


def _allowed(row: list[float], p: SamplingParams) -> set[int]:
    """The kept set, computed here in plain float64 Python: top-k, top-p of those, min-p."""
    z = [x / p.temperature for x in row]
    order = sorted(range(len(z)), key=lambda i: -z[i])
    kept = order[: p.top_k] if p.top_k else order
    top = max(z[i] for i in kept)
    weight = {i: math.exp(z[i] - top) for i in kept}
    total = sum(weight.values())
    prob = {i: w / total for i, w in weight.items()}
    if p.top_p < 1:
        nucleus, mass = [], 0.0
        for i in kept:
            if mass >= p.top_p:
                break
            nucleus.append(i)
            mass += prob[i]
        kept = nucleus
    return {i for i in kept if prob[i] >= p.min_p * prob[kept[0]]}


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(top_k=5),
        SamplingParams(top_k=1),
        SamplingParams(top_p=0.7),
        SamplingParams(top_p=0.2, temperature=2.0),
        SamplingParams(min_p=0.1),
        SamplingParams(min_p=0.5, temperature=3.0),
        SamplingParams(top_k=12, top_p=0.9, min_p=0.05, temperature=1.3),
    ],
    ids=["k5", "k1", "p0.7", "p0.2-T2", "min0.1", "min0.5-T3", "k-p-min"],
)
def test_filters_sample_only_inside_their_sets(params: SamplingParams) -> None:
    draws = 2000
    for trial in range(3):
        row = _logits(50 + trial)  # [1, V]
        allowed = _allowed(row[0].tolist(), params)
        assert 1 <= len(allowed) < VOCAB
        seeded = [replace(params, seed=trial * draws + i) for i in range(draws)]
        tokens = sample(row.expand(draws, VOCAB), seeded, [[]] * draws, [3] * draws)
        drawn = set(tokens.tolist())
        assert drawn <= allowed, sorted(drawn - allowed)
        assert len(drawn) > 1 or len(allowed) == 1


def test_draws_follow_the_tempered_softmax() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])  # [1, 6]
    temperature, draws = 0.8, 30000
    params = [SamplingParams(temperature=temperature, seed=77)] * draws
    tokens = sample(logits.expand(draws, 6), params, [[]] * draws, list(range(draws)))
    expected = torch.softmax(logits[0] / temperature, -1).tolist()
    counts = Counter(tokens.tolist())
    for token, p in enumerate(expected):
        assert abs(counts[token] / draws - p) < 4 * math.sqrt(p * (1 - p) / draws) + 1e-3, (token, counts, expected)


@pytest.mark.parametrize("path", ["rejection", "ranked"])
def test_filtered_draws_follow_the_renormalised_kept_set(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways of drawing — rejection against the whole distribution, and the ranked fallback a
    row takes when every attempt is rejected (forced here with no attempts) — sample the kept set
    with its renormalised probabilities, and never outside it."""
    from wgc.runtime.engines import sampling

    if path == "ranked":
        monkeypatch.setattr(sampling, "_ATTEMPTS", 0)
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])  # [1, 6]
    draws = 20000
    params = [SamplingParams(temperature=0.8, top_p=0.7, seed=5)] * draws
    tokens = sample(logits.expand(draws, 6), params, [[]] * draws, list(range(draws)))
    probs = torch.softmax(logits[0] / 0.8, -1)
    kept = sorted(_allowed(logits[0].tolist(), params[0]))
    assert kept == [0, 1]  # 0.55 + 0.16 reach 0.7
    expected = {t: float(probs[t] / probs[kept].sum()) for t in kept}
    counts = Counter(tokens.tolist())
    assert set(counts) == set(kept)
    for token, p in expected.items():
        assert abs(counts[token] / draws - p) < 4 * math.sqrt(p * (1 - p) / draws) + 1e-3, (token, counts, expected)


@pytest.mark.parametrize("path", ["rejection", "ranked"])
def test_tied_tokens_at_the_boundary_are_kept_alike(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thresholds, not ranks: tokens 1 and 2 score the same, so top-k 2 and top-p 0.5 keep both."""
    from wgc.runtime.engines import sampling

    if path == "ranked":
        monkeypatch.setattr(sampling, "_ATTEMPTS", 0)
    logits = torch.tensor([[3.0, 1.0, 1.0, -2.0]])
    draws = 3000
    for params in (SamplingParams(top_k=2), SamplingParams(top_p=0.9)):
        seeded = [replace(params, seed=i) for i in range(draws)]
        drawn = set(sample(logits.expand(draws, 4), seeded, [[]] * draws, [0] * draws).tolist())
        assert drawn == {0, 1, 2}, (params, drawn)


def test_repetition_penalty_as_in_hugging_face() -> None:
    greedy = SamplingParams(temperature=0.0, repetition_penalty=2.0)
    positive = torch.tensor([[2.0, 1.5, 0.1, -0.5]])  # seen token 0: 2.0 / 2 = 1.0 < 1.5
    assert sample(positive, [greedy], [[0]], [0]).tolist() == [1]
    negative = torch.tensor([[-1.0, -1.5, -4.0, -3.0]])  # seen token 0: -1.0 * 2 = -2.0 < -1.5
    assert sample(negative, [greedy], [[0, 0, 2]], [0]).tolist() == [1]
    assert sample(positive, [greedy], [[2, 3]], [0]).tolist() == [0]  # others seen: 0 stays best
    assert sample(positive, [SamplingParams(temperature=0.0)], [[0]], [0]).tolist() == [0]  # no penalty
    both = torch.cat([positive, positive])  # [2, 4]: the penalty is per row
    rows = [greedy, SamplingParams(temperature=0.0, repetition_penalty=1.2)]
    assert sample(both, rows, [[0], [0]], [0, 0]).tolist() == [1, 0]  # 2.0 / 1.2 > 1.5


def test_finishing_on_stop_tokens_and_length() -> None:
    p = SamplingParams(stop_tokens=[2, 9], max_tokens=3)
    assert p.stop_tokens == (2, 9)
    assert finished(5, 0, p) is None
    assert finished(9, 0, p) == "stop"
    assert finished(5, 2, p) == "length"
    assert finished(2, 2, p) == "stop"  # a stop token on the last step is a stop
    assert finished(5, 10_000, SamplingParams()) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", -0.1), ("top_k", -1), ("top_p", 0.0), ("top_p", 1.5), ("min_p", 2.0),
     ("repetition_penalty", 0.0), ("max_tokens", 0)],
)
def test_bad_params_are_rejected_with_a_message(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_shapes_must_agree() -> None:
    with pytest.raises(ValueError, match="2 rows"):
        sample(_logits(0, rows=2), [SamplingParams()], [[]], [0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_draws_the_same_tokens_as_cpu() -> None:
    logits = _logits(3, rows=64, vocab=1000)  # [64, 1000]
    params = [SamplingParams(temperature=0.8, top_p=0.9, top_k=50 * (i % 3), seed=i) for i in range(64)]
    histories, steps = [[i, i + 1] for i in range(64)], list(range(64))
    cpu = sample(logits, params, histories, steps)
    gpu = sample(logits.cuda(), params, histories, steps)
    assert gpu.device.type == "cuda" and gpu.cpu().tolist() == cpu.tolist()


def test_kept_sets_are_exact_however_far_the_ranking_must_reach() -> None:
    """The ranking stops at the prefix the kept sets need; rows whose sets reach further (a flat row
    under top_p 0.95, a large top_k, a small min_p) widen it, up to a sort of the whole vocabulary.
    Every row's kept set must equal the plain reference, whatever its batch-mates force."""
    from wgc.runtime.engines.sampling import _mask_top_k, _rank_and_keep

    vocab = 4096
    gen = torch.Generator().manual_seed(7)
    peaked = torch.randn(4, vocab, generator=gen) * 6
    flat = torch.randn(4, vocab, generator=gen) * 0.05
    logits = torch.cat([peaked, flat])  # [8, V]
    batches = [
        [SamplingParams(top_p=0.8)] * 4 + [SamplingParams(top_p=0.3)] * 4,  # flat rows keep ~1,200
        [SamplingParams(top_k=40)] * 8,
        [SamplingParams(min_p=0.2, temperature=1.0)] * 4 + [SamplingParams(min_p=0.999)] * 4,
        [SamplingParams(top_p=0.95, top_k=700)] * 4 + [SamplingParams(top_p=0.95)] * 4,  # needs the full sort
        [SamplingParams(top_k=3)] * 4 + [SamplingParams(top_k=1500, top_p=0.99)] * 4,
    ]
    for params in batches:
        top_p = torch.tensor([p.top_p for p in params])
        min_p = torch.tensor([p.min_p for p in params])
        kept_scores, order = _rank_and_keep(_mask_top_k(logits.clone(), params), top_p, min_p)
        for row, p in enumerate(params):
            kept = {int(order[row, i]) for i in range(order.shape[1]) if kept_scores[row, i] > float("-inf")}
            assert kept == _allowed(logits[row].tolist(), p), (row, p)
