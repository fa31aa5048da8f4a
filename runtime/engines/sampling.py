"""Batched sampling: one call picks the next token of every row, on CPU and CUDA alike.

Per row, in Hugging Face's order: repetition penalty over the row's history; then greedy
(temperature 0: the argmax) or temperature, top-k, top-p, min-p (each on what the previous one
kept; the most likely token is always kept) and a draw. Masks are computed for the whole batch at
once, from one sort of each row, never with a loop over the vocabulary.

The draw is the Gumbel-max trick: argmax(logits / T + g), g = -log(-log u), samples exactly from
softmax(logits / T) over the kept tokens. The uniform u of token v in a row is a counter-based
hash of (seed, step, v) done in integer tensor ops, identical on CPU and CUDA. It depends on the
row's own seed and step only, not on its position in the batch or on the other rows, so a seeded
request draws the same tokens whatever it is batched with. A row without a seed takes a fresh
one from `generator` (torch's default generator when None) and is not reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9


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


def finished(token: int, step: int, params: SamplingParams) -> Literal["stop", "length"] | None:
    """Why generation ends after `token`, the request's generated token number `step` (from 0)."""
    if token in params.stop_tokens:
        return "stop"
    if params.max_tokens is not None and step + 1 >= params.max_tokens:
        return "length"
    return None


def sample(logits: torch.Tensor, params: Sequence[SamplingParams], histories: Sequence[Sequence[int]],
           steps: Sequence[int], generator: torch.Generator | None = None) -> torch.Tensor:
    """The next token of each row: logits [B, V], one params, history and step per row → tokens [B] (int64)."""
    batch, vocab = logits.shape
    if not len(params) == len(histories) == len(steps) == batch:
        raise ValueError(f"{batch} rows but {len(params)} params, {len(histories)} histories, {len(steps)} steps")
    device = logits.device
    scores = _penalize(logits.float(), params, histories)  # [B, V] float32, a new tensor
    best = scores.argmax(-1)  # [B]
    greedy = [p.greedy for p in params]
    if all(greedy):
        return best
    temperature = torch.tensor([p.temperature or 1.0 for p in params], device=device)  # [B]
    scores = scores / temperature[:, None]  # [B, V]
    ranked = _rank_and_keep(scores, params)
    if ranked is None:  # nothing filtered: every token is a candidate
        tokens = torch.arange(vocab, dtype=torch.int64, device=device)[None, :]  # [1, V]
        drawn = (scores + _gumbel(params, steps, tokens, generator)).argmax(-1)  # [B]
    else:
        # Only kept tokens can win the Gumbel-max draw: noise for the first `width` ranks suffices
        # (each token's noise depends on its id alone, so the draw is the same as over the whole row).
        kept, order, width = ranked
        candidates = order[:, :width]  # [B, width] token ids in rank order
        noisy = kept[:, :width] + _gumbel(params, steps, candidates, generator)  # [B, width]
        drawn = candidates.gather(-1, noisy.argmax(-1, keepdim=True)).squeeze(-1)  # [B]
    return torch.where(torch.tensor(greedy, device=device), best, drawn)


def _penalize(scores: torch.Tensor, params: Sequence[SamplingParams],
              histories: Sequence[Sequence[int]]) -> torch.Tensor:
    rows: list[int] = []
    cols: list[int] = []
    for row, (p, history) in enumerate(zip(params, histories)):
        if p.repetition_penalty != 1.0 and history:
            rows.extend([row] * len(history))
            cols.extend(history)
    if not rows:
        return scores
    device = scores.device
    seen = torch.zeros(scores.shape, dtype=torch.bool, device=device)  # [B, V]
    seen[torch.tensor(rows, device=device), torch.tensor(cols, device=device)] = True
    penalty = torch.tensor([p.repetition_penalty for p in params], device=device)[:, None]  # [B, 1]
    return torch.where(seen, torch.where(scores > 0, scores / penalty, scores * penalty), scores)


def _rank_and_keep(scores: torch.Tensor,
                   params: Sequence[SamplingParams]) -> tuple[torch.Tensor, torch.Tensor, int] | None:
    """Top-k, then top-p of what top-k kept, then min-p, in rank order: (scores with -inf outside the
    kept set [B, V], token ids [B, V], the most tokens any row keeps); None when nothing filters."""
    batch, vocab = scores.shape
    top_k = [p.top_k if 0 < p.top_k < vocab else vocab for p in params]
    if all(k == vocab for k in top_k) and all(p.top_p >= 1 and p.min_p == 0 for p in params):
        return None
    device = scores.device
    k = torch.tensor(top_k, device=device)[:, None]  # [B, 1]
    top_p = torch.tensor([p.top_p for p in params], device=device)[:, None]  # [B, 1]
    min_p = torch.tensor([p.min_p for p in params], device=device)[:, None]  # [B, 1]
    ranked, order = scores.sort(dim=-1, descending=True, stable=True)  # [B, V] each
    keep = torch.arange(vocab, device=device)[None, :] < k  # [B, V]
    probs = ranked.masked_fill(~keep, float("-inf")).softmax(-1)  # [B, V], renormalised over top-k
    above = probs.cumsum(-1) - probs  # [B, V]: mass of the more likely tokens
    keep &= (above < top_p) | (top_p >= 1)
    keep &= probs >= min_p * probs[:, :1]  # the ratio to the best is the same after renormalising
    keep[:, 0] = True
    width = int(keep.sum(-1).max())  # kept tokens are a prefix of each row's ranking
    return ranked.masked_fill(~keep, float("-inf")), order, width


def _gumbel(params: Sequence[SamplingParams], steps: Sequence[int], tokens: torch.Tensor,
            generator: torch.Generator | None) -> torch.Tensor:
    """Gumbel noise for `tokens` ([B or 1, K] token ids): row b, token v is a function of (seed_b, step_b, v)."""
    device = tokens.device
    keys = [_row_key(_seed_of(p, generator), step) for p, step in zip(params, steps)]
    k1 = torch.tensor([a for a, _ in keys], dtype=torch.int64, device=device)[:, None]  # [B, 1]
    k2 = torch.tensor([b for _, b in keys], dtype=torch.int64, device=device)[:, None]  # [B, 1]
    bits = _hash32(_hash32(tokens ^ k1) ^ k2)  # [B, K] in [0, 2**32)
    uniform = ((bits >> 9).float() * 2 + 1) * 2.0**-24  # [B, V], odd multiples of 2**-24: in (0, 1)
    return -torch.log(-torch.log(uniform))


def _seed_of(p: SamplingParams, generator: torch.Generator | None) -> int:
    if p.seed is not None:
        return p.seed
    return int(torch.randint(0, 2**62, (), generator=generator))


def _row_key(seed: int, step: int) -> tuple[int, int]:
    if step < 0:
        raise ValueError(f"a step is a count of generated tokens, found {step}")
    seed &= 2**64 - 1
    key = _hash32_int(_hash32_int(seed & _MASK32) ^ (seed >> 32))
    key = _hash32_int(key ^ (step & _MASK32) ^ _hash32_int(step >> 32))
    return key, _hash32_int(key ^ _GOLDEN)


def _hash32_int(x: int) -> int:
    """lowbias32 (C. Wellons' hash prospector): a bijection on 32-bit integers."""
    x &= _MASK32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """`_hash32_int` over an int64 tensor of values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for x in [0, 2**32), in two 16-bit halves of c so that int64 never overflows."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _MASK32
