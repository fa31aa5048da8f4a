"""Batched sampling: one call picks the next token of every row, on CPU and CUDA alike.

Per row, in Hugging Face's order: repetition penalty over the row's history; then greedy
(temperature 0: the argmax) or temperature, top-k, top-p, min-p (each on what the previous one
kept) and a draw. The kept set is defined by thresholds, so ties are treated alike: top-k keeps
every token scoring at least the k-th best; top-p keeps a token when the tokens strictly more
likely than it hold less than top_p of the (top-k renormalised) mass; min-p keeps a token at least
min_p times as likely as the best. The best token is always kept.

The draw is rejection sampling, which needs no sort of the vocabulary: a token is drawn by inverse
CDF from the whole (top-k renormalised) distribution, in token-id order, and accepted when it lies
in the kept set, one pass per attempt over the rows not yet settled. The first accepted draw is distributed exactly as the
renormalised kept set; an attempt succeeds with the kept set's mass (at least top_p when top-p is
what binds), so nearly every row settles on its first or second attempt. A row still unsettled
after `_ATTEMPTS` (a min-p that keeps little of a flat distribution) is ranked instead: a partial
ranking of its most likely tokens, widened only as far as its kept set reaches.

Attempt j of a row uses the uniform u(seed, step, j) (`uniforms.py`): it depends on the row's own
seed and step only, so a seeded request draws the same tokens whatever it is batched with. A row
without a seed takes a fresh one from `generator` (torch's default generator when None) and is not
reproducible. Greedy rows take no part in the draw.

The fixed cost a step is what matters at a batch of one (Orpheus at one stream: 0.42 ms a step
before, 0.08 ms now, V = 4,365): a row's uniform is computed only for the attempts it takes, in
Python integers; the penalty is one gather and one put through a flat index built in numpy. A
single sampled CPU row without top-k goes through `_sample_row`, the same floats in fewer kernels
(each is colder right after a forward than a repeated call shows).

A row's history is a plain token list (converted whole each call) or a `SeenTokens`, a caller's
per-sequence record of the distinct tokens seen, updated by what was appended since its last sync:
converting each row's whole history cost 0.35 ms a step at 16 rows of 1,250 tokens (Orpheus's
length), growing with it. Both give the same penalty (each distinct token once).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from wgc.runtime.engines.seen_tokens import History, SeenTokens
from wgc.runtime.engines.uniforms import row_key, row_uniform

_ATTEMPTS = 16  # rejection attempts before a row is ranked instead; the next uniform is the ranked draw's
# Attempts judged together in one pass over the vocabulary. On CPU one at a time: a [B, C, V]
# temporary falls out of cache (at B=16, V=4365 one attempt costs 0.14 ms, four together 1.8 ms),
# and stopping after the attempt that settles the last row is a plain branch. On CUDA four: a pass
# costs about the same at any C, and each check of "all settled" is a device sync. On CPU two when
# the pass is small (a row of Orpheus tiny's 4,365 tokens): its cost is then the ~10 kernels' fixed
# cost, and a second attempt in it saves the second pass a fifth of the rows need at top_p 0.8.
_ATTEMPTS_PER_PASS = {"cpu": 1, "cuda": 4}
_SMALL_PASS = 8192  # rows x vocabulary of a CPU pass that judges two attempts
_FIRST_WIDTH = 64  # the first ranked prefix tried; widened eightfold while some row's kept set may reach past it

@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. `top_k = 0`, `top_p = 1`, `min_p = 0` and a penalty of 1 are off."""

    temperature: float = 1.0  # 0: greedy
    top_k: int = 0  # keep the k most likely tokens
    top_p: float = 1.0  # keep the fewest most likely tokens whose probability reaches top_p
    min_p: float = 0.0  # keep tokens at least min_p times as likely as the most likely one
    repetition_penalty: float = 1.0  # HF: divide positive logits of seen tokens, multiply negative ones
    seed: int | None = None  # None: not reproducible
    stop_tokens: tuple[int, ...] = ()
    max_tokens: int | None = None  # None: no limit here (the model's context still is one)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_tokens", tuple(self.stop_tokens))
        rules = (
            (self.temperature >= 0, f"temperature must be at least 0, found {self.temperature}"),
            (self.top_k >= 0, f"top_k must be at least 0 (0 is off), found {self.top_k}"),
            (0 < self.top_p <= 1, f"top_p must be in (0, 1], found {self.top_p}"),
            (0 <= self.min_p <= 1, f"min_p must be in [0, 1], found {self.min_p}"),
            (self.repetition_penalty > 0, f"repetition_penalty must be above 0, found {self.repetition_penalty}"),
            (self.max_tokens is None or self.max_tokens >= 1, f"max_tokens must be at least 1, found {self.max_tokens}"),
        )
        for ok, message in rules:
            if not ok:
                raise ValueError(message)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _seen_ids(history: History) -> np.ndarray:
    """A row's penalised ids [N] int64: the state's distinct ids, or the plain history converted."""
    if isinstance(history, SeenTokens):
        return history.ids
    return np.fromiter(history, dtype=np.int64, count=len(history))


def finished(token: int, step: int, params: SamplingParams) -> Literal["stop", "length"] | None:
    """Why generation ends after `token`, the request's generated token number `step` (from 0)."""
    if token in params.stop_tokens:
        return "stop"
    if params.max_tokens is not None and step + 1 >= params.max_tokens:
        return "length"
    return None


def sample(logits: torch.Tensor, params: Sequence[SamplingParams], histories: Sequence[History],
           steps: Sequence[int], generator: torch.Generator | None = None) -> torch.Tensor:
    """The next token of each row: logits [B, V], one params, history (a token list or a
    `SeenTokens`) and step per row → tokens [B] (int64)."""
    batch, vocab = logits.shape
    if not len(params) == len(histories) == len(steps) == batch:
        raise ValueError(f"{batch} rows but {len(params)} params, {len(histories)} histories, {len(steps)} steps")
    device = logits.device
    if batch == 1 and device.type == "cpu" and not params[0].greedy and not 0 < params[0].top_k < vocab:
        return _sample_row(logits.float(), params[0], histories[0], steps[0], generator)
    scores = _penalize(logits.float(), params, histories)  # [B, V] float32, a new tensor
    greedy = [p.greedy for p in params]
    if all(greedy):
        return _argmax(scores)
    best = _argmax(scores) if any(greedy) else None  # [B]
    scores = _mask_top_k(scores / _column([p.temperature or 1.0 for p in params], device), params)  # [B, V]
    probs = scores.softmax(-1)  # [B, V], renormalised over top-k
    keys = [row_key(_seed_of(p, generator), step) for p, step in zip(params, steps)]
    sampled = [i for i, g in enumerate(greedy) if not g]
    drawn = _draw_by_rejection(probs, keys, params, sampled)
    unsettled = [i for i in sampled if drawn[i] < 0]
    if unsettled:
        rows = torch.tensor(unsettled, device=device)
        top_p = torch.tensor([params[i].top_p for i in unsettled], device=device)  # [R]
        min_p = torch.tensor([params[i].min_p for i in unsettled], device=device)  # [R]
        draw = torch.tensor([row_uniform(keys[i], _ATTEMPTS) for i in unsettled], dtype=torch.float64, device=device)
        for i, token in zip(unsettled, _draw_ranked(scores[rows], top_p, min_p, draw).tolist()):
            drawn[i] = token
    tokens = torch.tensor(drawn, device=device)
    return tokens if best is None else torch.where(torch.tensor(greedy, device=device), best, tokens)


def _argmax(scores: torch.Tensor) -> torch.Tensor:
    """Each row's best token, the first of equal ones: [B, V] -> [B] int64. On CPU numpy's, which
    scans a row as one vectorised pass, where torch's CPU argmax over the last axis took 340 us at
    [32, 8192] (the 34M shape's greedy batch of 32: 1% of its decode step) against numpy's 14, and 23
    against 2 at [32, 512] (an Intel Xeon)."""
    if scores.device.type == "cpu":
        return torch.from_numpy(scores.detach().numpy().argmax(-1))
    return scores.argmax(-1)


def _sample_row(logits: torch.Tensor, p: SamplingParams, history: History, step: int,
                generator: torch.Generator | None) -> torch.Tensor:
    """`sample` of one sampled CPU row without top-k (Orpheus at one stream), the same floats in
    fewer kernels: after a forward, each kernel the step has not used costs several microseconds
    more than when warm, which made the batched path's ~30 kernels 0.2-0.3 ms of a ~2 ms token.
    The exact parts run in numpy on the row (the penalty, the temperature, the inverse-CDF search:
    float32 and float64 operations IEEE rounds alike), the rest are the batched path's own kernels
    on the same shapes (softmax, the float64 cumulative sum, the mass above each candidate), so a
    row draws the same token alone as in any batch."""
    row = logits[0].detach().numpy().copy()  # [V] float32 (a caller's forward may have kept autograd on)
    if p.repetition_penalty != 1.0 and len(history):
        ids = _seen_ids(history)
        seen = row[ids]
        factor = np.float32(p.repetition_penalty)
        row[ids] = np.where(seen > 0, seen / factor, seen * factor)
    row /= np.float32(p.temperature)
    scores = torch.from_numpy(row)[None]  # [1, V]
    probs = scores.softmax(-1)  # [1, V]
    cdf = probs.cumsum(-1, dtype=torch.float64)[0].numpy()  # [V] float64
    chances_of = probs[0].numpy()
    vocab, total = row.shape[0], float(cdf[-1])
    key = row_key(_seed_of(p, generator), step)
    top_p = float(np.float32(p.top_p))  # as the batched path compares: the bound in float32
    floor = np.float32(p.min_p) * chances_of.max() if p.min_p > 0 else None
    per_pass = 2 if vocab <= _SMALL_PASS else 1
    for first in range(0, _ATTEMPTS, per_pass):
        attempts = range(first, min(first + per_pass, _ATTEMPTS))
        candidates = np.minimum(np.searchsorted(cdf, [row_uniform(key, j) * total for j in attempts], side="right"),
                                vocab - 1)  # [C]
        chances = chances_of[candidates]  # [C] float32
        accept = [True] * len(candidates) if floor is None else (chances >= floor).tolist()
        if p.top_p < 1:
            c = torch.from_numpy(chances)[None]  # [1, C]
            above = (probs[:, None, :] * (probs[:, None, :] > c[:, :, None])).sum(-1)[0].tolist()  # [C]
            accept = [a and m < top_p for a, m in zip(accept, above)]
        if True in accept:
            return torch.tensor([int(candidates[accept.index(True)])])
    draw = torch.tensor([row_uniform(key, _ATTEMPTS)], dtype=torch.float64)
    return _draw_ranked(scores, torch.tensor([p.top_p]), torch.tensor([p.min_p]), draw)


def _mask_top_k(scores: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """-inf below each row's k-th best score (ties with it stay); rows without top-k untouched."""
    vocab = scores.shape[-1]
    top_k = [p.top_k if 0 < p.top_k < vocab else 0 for p in params]
    if not any(top_k):
        return scores
    device = scores.device
    best = scores.topk(max(top_k), dim=-1).values  # [B, K], descending
    k = torch.tensor(top_k, device=device)  # [B]
    kth = best.gather(-1, (k - 1).clamp(min=0)[:, None])  # [B, 1]
    kth = torch.where(k[:, None] > 0, kth, torch.full_like(kth, float("-inf")))
    return scores.masked_fill(scores < kth, float("-inf"))


def _draw_by_rejection(probs: torch.Tensor, keys: Sequence[tuple[int, int]], params: Sequence[SamplingParams],
                       rows: list[int]) -> list[int]:
    """Per row of `rows`, the first candidate draw (inverse CDF of `probs` at uniform u(key, j), j = 0,
    1, ...) that is in the kept set; -1 for a row none of `_ATTEMPTS` draws settled, and for rows
    not in `rows`. Each pass judges the rows still unsettled, nothing else: one pass nearly always."""
    vocab = probs.shape[-1]
    device = probs.device
    drawn = [-1] * len(keys)
    cdf = probs.cumsum(-1, dtype=torch.float64)  # [B, V]; float64 so that tiny probabilities keep their width
    first = 0
    while rows and first < _ATTEMPTS:
        per_pass = _ATTEMPTS_PER_PASS.get(device.type, 1)
        if device.type == "cpu" and len(rows) * vocab <= _SMALL_PASS:
            per_pass = 2
        attempts = range(first, min(first + per_pass, _ATTEMPTS))
        first = attempts.stop
        pick = None if len(rows) == len(keys) else torch.tensor(rows, device=device)
        p = probs if pick is None else probs[pick]  # [R, V]
        c = cdf if pick is None else cdf[pick]  # [R, V]
        draws = torch.tensor([[row_uniform(keys[i], j) for j in attempts] for i in rows], dtype=torch.float64,
                             device=device)  # [R, C]
        candidates = torch.searchsorted(c, draws * c[:, -1:], right=True).clamp_(max=vocab - 1)  # [R, C]
        accept = _kept(p, p.gather(-1, candidates), [params[i] for i in rows])  # [R, C]
        waiting = []
        for i, row_accept, row_candidates in zip(rows, accept.tolist(), candidates.tolist()):
            if True in row_accept:
                drawn[i] = row_candidates[row_accept.index(True)]  # its first accepted candidate
            else:
                waiting.append(i)
        rows = waiting
    return drawn


def _kept(probs: torch.Tensor, chances: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Whether each candidate (its probability in `chances` [R, C]) is in its row's kept set: top-p
    (the tokens strictly more likely than it hold less than top_p) and min-p → bool [R, C]."""
    device = probs.device
    accept = torch.ones_like(chances, dtype=torch.bool)
    if any(p.min_p > 0 for p in params):
        min_p = _column([p.min_p for p in params], device)
        accept &= chances >= min_p * probs.max(-1, keepdim=True).values
    top_p = [p.top_p for p in params]
    if any(t < 1 for t in top_p):  # the mass of the tokens strictly more likely than each candidate
        above = (probs[:, None, :] * (probs[:, None, :] > chances[:, :, None])).sum(-1)  # [R, C]
        nucleus = above < _column(top_p, device)
        accept &= nucleus if all(t < 1 for t in top_p) else nucleus | (_column(top_p, device) >= 1)
    return accept


def _column(values: list[float], device: torch.device) -> float | torch.Tensor:
    """Per-row values as an operand against [B, ...] float32 rows: one Python number when every row's
    is the same (one kernel fewer; torch casts it to float32, as the [B, 1] float32 tensor holds it)."""
    if all(v == values[0] for v in values):
        return values[0]
    return torch.tensor(values, device=device)[:, None]  # [B, 1] float32


def _draw_ranked(scores: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor,
                 draw: torch.Tensor) -> torch.Tensor:
    """The rows rejection did not settle: rank their likeliest tokens as far as the kept sets reach,
    then draw by inverse CDF over each kept set (`draw` [B] uniforms) → tokens [B]."""
    kept, order = _rank_and_keep(scores, top_p, min_p)  # [B, W] each
    cdf = kept.softmax(-1).double().cumsum(-1)  # [B, W], renormalised over the kept set
    pick = torch.searchsorted(cdf, (draw * cdf[:, -1])[:, None], right=True).clamp_(max=kept.shape[-1] - 1)
    return order.gather(-1, pick)[:, 0]


def _penalize(scores: torch.Tensor, params: Sequence[SamplingParams],
              histories: Sequence[History]) -> torch.Tensor:
    """Hugging Face's repetition penalty: each seen token's logit divided by the row's penalty when
    positive, multiplied when not (a token seen twice is penalised once) → a new [B, V] tensor."""
    counts = [len(h) if p.repetition_penalty != 1.0 else 0 for p, h in zip(params, histories)]
    total = sum(counts)
    if not total:
        return scores
    # Only the seen entries change: gather them by flat index, penalise, put them back (repeats
    # write one value). The indices are built in numpy (torch.tensor on a list of thousands of ints
    # costs 10x more) and the gather and put go through a flat view: two kernels, no row index.
    device, vocab = scores.device, scores.shape[-1]
    rows = [i for i, n in enumerate(counts) if n]
    if any(isinstance(histories[i], SeenTokens) for i in rows):
        flat = np.concatenate([_seen_ids(histories[i]) for i in rows])  # a new array: `+=` below is safe
    else:
        flat = np.fromiter(itertools.chain.from_iterable(histories[i] for i in rows), dtype=np.int64, count=total)
    lengths = [counts[i] for i in rows]
    if rows != [0]:
        flat += np.repeat(np.asarray(rows, dtype=np.int64) * vocab, lengths)
    penalty = np.repeat(np.asarray([params[i].repetition_penalty for i in rows], dtype=np.float32), lengths)
    index = torch.from_numpy(flat).to(device)  # [N]
    factor = torch.from_numpy(penalty).to(device)  # [N] float32, one per entry
    scores = scores.clone(memory_format=torch.contiguous_format)  # `logits.float()` may be the caller's own tensor
    entries = scores.view(-1)
    seen = entries.index_select(0, index)
    entries.index_put_((index,), torch.where(seen > 0, seen / factor, seen * factor))
    return scores


def _rank_and_keep(scores: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-p then min-p over scores already masked by top-k, in rank order: (scores with -inf outside
    the kept set [B, W], token ids [B, W]) for a prefix of W ranks that holds every kept token.

    A partial top-W ranking costs a fraction of a full sort of the vocabulary; rows whose kept set
    may reach past the prefix widen it eightfold, and the full sort is the last resort."""
    vocab = scores.shape[-1]
    row_lse = scores.logsumexp(-1, keepdim=True)  # [B, 1]
    width = min(vocab, _FIRST_WIDTH)
    while True:
        if width >= vocab:
            ranked, order = scores.sort(dim=-1, descending=True, stable=True)  # [B, V] each
        else:
            ranked, order = scores.topk(width, dim=-1)  # [B, W] each, most likely first
        probs = (ranked - row_lse).exp()  # [B, W]
        before = probs.cumsum(-1) - probs  # [B, W]: mass of the tokens ranked before
        # Ties count as equals, as in rejection sampling: a token's mass "above" is that of the
        # tokens strictly more likely, i.e. of the ranks before its run of equal scores.
        new_run = torch.ones_like(ranked, dtype=torch.bool)  # [B, W]: the rank starts a run of equal scores
        new_run[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
        rank = torch.arange(ranked.shape[-1], device=ranked.device)[None, :]
        run_start = torch.where(new_run, rank, 0).cummax(-1).values  # [B, W]
        above = before.gather(-1, run_start)  # [B, W]
        keep = (above < top_p[:, None]) | (top_p[:, None] >= 1)
        keep &= probs >= min_p[:, None] * probs[:, :1]
        keep[:, 0] = True
        unranked_dropped = (
            (ranked[:, -1] == float("-inf"))  # top-k masked everything past the prefix
            | ((top_p < 1) & (probs.sum(-1) >= top_p))  # the prefix already holds top_p of the mass
            | ((min_p > 0) & (probs[:, -1] < min_p * probs[:, 0]))  # its last token already fails min-p
        )
        if width >= vocab or bool(unranked_dropped.all()):
            return ranked.masked_fill(~keep, float("-inf")), order
        width *= 8


def _seed_of(p: SamplingParams, generator: torch.Generator | None) -> int:
    if p.seed is not None:
        return p.seed
    return int(torch.randint(0, 2**62, (), generator=generator))
