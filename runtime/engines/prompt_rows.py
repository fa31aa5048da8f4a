"""Which rows of one forward are prompt tokens: the CPU products take oneDNN for those, MKL for the rest.

Why: on CPU a small weight's product (under cpu_linear.MIN_PACKED_WEIGHT: the 0.7M Llama's, Orpheus
tiny's) goes through MKL's sgemm, padded for batch invariance, because oneDNN's fixed cost of ~10 us a
call is more than such a product at the few rows of a decode batch. At a prompt's rows it is the other
way round: on an AMD EPYC a 1,024-row product of the 0.7M shapes ran 2.2x faster through oneDNN
(739 against 339 us for q/k/v), and the prefill of 32 prompts of 32 tokens 25-30% faster in all.

Each kernel is batch-invariant on its own (a row's bits do not depend on how many rows share the
product), but the two give a row different bits, so which one a row takes must depend on the row
alone, never on what it is batched with. The rule: a token written by an input of more than one token
(a prompt, chunked or not: `Write.count > 1`) is a prompt row; a one-token input (every decode step,
and a one-token prompt) is not. A prompt row then takes oneDNN whatever shares its forward — decodes
beside it in a mixed step, other prompts, a chunk of any size under any budget — and a decode row MKL.

A family's forward says it with `prompt_rows(kinds)` around the model call (PagedLlama._dynamic); the
products (cpu_linear.small_linear) split only a product over exactly the forward's token rows (a
layer's), so a head over the sampled rows alone, or any product outside such a forward, is unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class PromptRows:
    """The prompt rows of a forward of `rows` token rows, and the others (None: every row is a prompt's)."""

    rows: int
    prompt: slice | Tensor  # a contiguous run as a slice (a view), else the row indices [P] int64
    other: slice | Tensor | None


_ACTIVE = threading.local()  # the forward running on this thread (a worker may run others elsewhere)


def current() -> PromptRows | None:
    return getattr(_ACTIVE, "rows", None)


def split_of(kinds: Sequence[bool]) -> PromptRows | None:
    """kinds[i]: row i is a prompt token. None when no row is (every product as before)."""
    rows = len(kinds)
    prompt = [i for i, k in enumerate(kinds) if k]
    if not prompt:
        return None
    first, last = prompt[0], prompt[-1] + 1
    if last - first == len(prompt):  # one run: the usual mixed step, decodes first and prompts after them
        if first == 0 or last == rows:
            other = None if first == 0 and last == rows else slice(last, rows) if first == 0 else slice(0, first)
            return PromptRows(rows, slice(first, last), other)
        return PromptRows(rows, slice(first, last), _other_rows(kinds))
    return PromptRows(rows, torch.tensor(prompt, dtype=torch.int64), _other_rows(kinds))


def _other_rows(kinds: Sequence[bool]) -> Tensor:
    return torch.tensor([i for i, k in enumerate(kinds) if not k], dtype=torch.int64)  # [rows - P]


@contextmanager
def prompt_rows(kinds: Sequence[bool]) -> Iterator[None]:
    """Within: the products over len(kinds) rows on this thread take oneDNN at the prompt rows."""
    saved = current()
    _ACTIVE.rows = split_of(kinds)
    try:
        yield
    finally:
        _ACTIVE.rows = saved


def kinds_of(split: PromptRows) -> list[bool]:
    """The split back as one flag a row (row i is a prompt token)."""
    kinds = [False] * split.rows
    prompt = split.prompt
    for i in range(split.rows)[prompt] if isinstance(prompt, slice) else prompt.tolist():
        kinds[i] = True
    return kinds


@contextmanager
def narrowed(rows: Tensor) -> Iterator[None]:
    """Within: the products over len(rows) rows take the kernels the forward's rows `rows` [R] took
    (a model's last layer past its attention, run at the rows it samples alone: llama.py). Outside a
    forward that splits its rows, nothing changes."""
    split = current()
    if split is None:
        yield
        return
    kinds = kinds_of(split)
    with prompt_rows([kinds[i] for i in rows.tolist()]):
        yield

