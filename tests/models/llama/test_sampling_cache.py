"""The shared Llama component keeps each sequence's SamplingParams across steps (paged_llama._params):
made again when the sampling arguments change, never shared between sequences, dropped on release;
and a sampled (not greedy) reply is the same token by token with the cache as without it."""

from __future__ import annotations

from wgc.models.llama import ChatModel
from wgc.runtime.components.base import Call

from tests.models.llama.helpers import lm_spec


def _model() -> ChatModel:
    return ChatModel(lm_spec(), 0, "cpu", preset="tiny")


def test_params_are_kept_per_sequence_and_remade_when_the_arguments_change() -> None:
    lm = _model()
    first = lm._params(1, "main", 0.7, 0.9)
    assert lm._params(1, "main", 0.7, 0.9) is first  # the same arguments: the kept one
    changed = lm._params(1, "main", 0.0, 0.9)
    assert changed.temperature == 0.0 and changed is not first and changed.seed == first.seed
    other = lm._params(2, "main", 0.0, 0.9)
    assert other is not changed and other.seed != changed.seed  # another request: its own seed
    assert lm._params(1, "alt", 0.0, 0.9).seed != changed.seed  # another label of the same request too
    lm.release(1)
    assert set(lm._sampling) == {(2, "main")}
    assert lm._params(1, "main", 0.0, 0.9) is not changed  # made again after the release


def _reply(lm: ChatModel, request: int, prompt: list[int], steps: int) -> list[int]:
    token = lm.prefill([Call(request, "", (prompt, 0.9, 0.8))])[0]
    out = [token]
    for _ in range(steps):
        token = lm.decode([Call(request, "", (token, 0.9, 0.8))])[0]
        out.append(token)
    return out


def test_a_sampled_reply_is_the_same_with_and_without_the_cache() -> None:
    cached, fresh = _model(), _model()
    fresh._params = fresh._new_params  # type: ignore[method-assign]  # every step builds its params anew
    prompt = [256, 5, 9, 13, 40, 2]
    assert _reply(cached, 3, prompt, 12) == _reply(fresh, 3, prompt, 12)
    assert len(set(_reply(cached, 4, prompt, 12))) > 1  # sampled: not one token repeated
