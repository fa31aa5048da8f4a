"""The last layer past its attention runs at the rows a forward samples alone (LlamaBlock.forward_at):
the logits are bitwise those of every row through every layer, then the sampled rows picked, for
prompts of several lengths, a prompt in chunks, decode rows beside a new prompt in one mixed forward,
the decode steps after, and the dense (cache-free) forward; and it does run at those rows alone."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor
from wgc.models.layers import LlamaModel
from wgc.models.llama import ChatModel
from wgc.runtime.engines.kv_types import Write

from tests.models.llama.helpers import lm_spec


def model(every_row: bool = False) -> ChatModel:
    lm = ChatModel(lm_spec(page_size=4), 0, "cpu", preset="tiny")
    if every_row:  # the forward before: every layer at every row, then the sampled rows picked
        inner = lm.model

        def full_then_pick(x: Tensor, positions: Tensor, kv: Any = None, at: Tensor | None = None) -> Tensor:
            h = LlamaModel.hidden_states(inner, x, positions, kv)  # [..., N, hidden]
            return h if at is None else h.index_select(h.dim() - 2, at)

        inner.hidden_states = full_then_pick  # type: ignore[method-assign]
    return lm


def ids(seed: int, n: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return [256, *torch.randint(0, 256, (n - 1,), generator=gen).tolist()]


def both(steps: list[list[Any]]) -> None:
    """Each step's forward on a model of each kind: the same logits, bit for bit."""
    ours, before = model(), model(every_row=True)
    for i, items in enumerate(steps):
        got, want = ours.forward(items), before.forward(items)
        assert got.shape == want.shape and torch.equal(got, want), f"step {i}"


def test_prompts_of_several_lengths_and_their_decode_steps() -> None:
    prompts = [ids(1, 13), ids(2, 5), ids(3, 13), ids(4, 1)]
    both([[(r, "default", p) for r, p in enumerate(prompts)],
          *[[(r, "default", [7 + s + r]) for r in range(len(prompts))] for s in range(3)]])


def test_a_prompt_in_chunks_and_a_mixed_forward() -> None:
    long, short = ids(5, 11), ids(6, 6)
    both([[(0, "default", ids(7, 9)), (1, "default", ids(8, 3))],
          [Write(2, "default", long, len(long), 4)],  # a chunk of 4: a row sampled and dropped
          [(0, "default", [5]), (1, "default", [6]), Write(2, "default", long, len(long), 0),
           (3, "default", short)],  # decode rows beside a prompt's last chunk and a whole prompt
          [(r, "default", [9]) for r in range(4)]])


def test_the_dense_forward_at_some_positions() -> None:
    lm = model().model
    tokens = torch.tensor([ids(9, 12), ids(10, 12)])  # [B, T]
    positions = torch.arange(12).expand(2, 12)
    at = torch.tensor([3, 11])
    with torch.no_grad():
        got = lm(tokens, positions, None, logits_at=at)  # [B, 2, vocab]
        want = lm(tokens, positions, None)[:, at]
    assert torch.equal(got, want)


@pytest.mark.parametrize("rows", [[13], [13, 5, 1]])
def test_the_last_layer_past_its_attention_sees_the_sampled_rows_alone(rows: list[int]) -> None:
    lm = model()
    seen: dict[str, list[int]] = {"first": [], "last": []}
    layers = lm.model.layers
    for name, layer in (("first", layers[0]), ("last", layers[-1])):
        layer.mlp.register_forward_pre_hook(lambda _m, args, n=name: seen[n].append(args[0].shape[0]))
    lm.forward([(r, "default", ids(r, n)) for r, n in enumerate(rows)])
    assert seen == {"first": [sum(rows)], "last": [len(rows)]}
