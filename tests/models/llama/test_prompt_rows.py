"""A CPU forward takes oneDNN for its prompt rows and MKL for its one-token rows
(runtime/engines/prompt_rows.py), so a row's kernel must depend on the row alone: each input's logits
here are bitwise the same alone, beside other prompts (of its length or not), beside decode rows in one
mixed forward, and whatever the one-token inputs beside it."""

from __future__ import annotations

import pytest
import torch
from wgc.models.llama import ChatModel
from wgc.runtime.components.base import Call
from wgc.runtime.engines import cpu_linear
from wgc.runtime.engines.kv_types import Write

from tests.models.llama.helpers import lm_spec

pytestmark = pytest.mark.skipif(not cpu_linear.packed_available(), reason="this torch has no oneDNN")


def model() -> ChatModel:
    return ChatModel(lm_spec(page_size=4), 0, "cpu", preset="tiny")


def ids(seed: int, n: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return [256, *torch.randint(0, 256, (n - 1,), generator=gen).tolist()]


def test_an_inputs_logits_do_not_depend_on_what_shares_its_forward() -> None:
    first, second, one, other = ids(1, 13), ids(2, 13), ids(3, 1), ids(4, 7)
    alone = {name: model().forward([(0, "default", p)])[0]
             for name, p in (("first", first), ("second", second), ("one", one), ("other", other))}
    together = model().forward([(0, "default", first), (2, "default", second), (3, "default", other),
                                (4, "default", one)])  # three lengths: each run attends on its own
    for row, name in enumerate(("first", "second", "other", "one")):
        assert torch.equal(together[row], alone[name]), name
    # a mixed forward: decode rows beside a new prompt, against the same decodes alone and the prompt alone
    mixed, apart = model(), model()
    for m in (mixed, apart):
        m.forward([(0, "default", first), (1, "default", one)])
    got = mixed.forward([(0, "default", [7]), (1, "default", [9]), (5, "default", second)])
    want = apart.forward([(0, "default", [7]), (1, "default", [9])])
    assert torch.equal(got[:2], want) and torch.equal(got[2], alone["second"])
    # a one-token prompt is a one-token row (MKL) beside a decode row as alone
    beside = model()
    beside.forward([(0, "default", first)])
    assert torch.equal(beside.forward([(0, "default", [7]), (3, "default", one)])[1], alone["one"])


def test_a_prompt_in_chunks_takes_onednn_for_every_chunk_and_the_decode_step_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lm = model()
    small: list[int] = []  # rows of each small weight's oneDNN product
    real = cpu_linear.packed_linear

    def spy(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, p: cpu_linear.PackedWeight) -> torch.Tensor:
        if w.numel() < cpu_linear.MIN_PACKED_WEIGHT:
            small.append(x.shape[0])
        return real(x, w, b, p)

    monkeypatch.setattr(cpu_linear, "packed_linear", spy)
    prompt = ids(4, 11)
    lm.forward([Write(0, "default", prompt, len(prompt), 8)])  # a chunk of 8
    first = len(small)
    lm.forward([Write(0, "default", prompt, len(prompt), 0)])  # the last 3 tokens
    # every layer's products at the chunk's rows, then the last layer's past its attention at the row
    # it samples alone (llama.py's forward_at), still a prompt row
    for chunk, rows in ((small[:first], 8), (small[first:], 3)):
        assert set(chunk) == {rows, 1} and chunk == sorted(chunk, reverse=True), chunk
    small.clear()
    lm.call("decode", [Call(0, "default", (5, 0.0, 1.0))])
    assert small == []
