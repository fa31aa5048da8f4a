"""π0.5's prompt and statistics against their closed forms: the 256-bin discretisation against
numpy.digitize (lerobot's rule), the prompt string, the tokens the component writes, the quantile
normalisation of the state and unnormalisation of the actions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from wgc.models.pi05 import Stats
from wgc.models.pi05.config import TINY_BOS, Pi05Config
from wgc.models.pi05.prompt import discretize, pi05_prompt, tiny_tokenizer
from wgc.models.pi05.stats import Quantiles
from wgc.runtime.components.base import Call, CallError

from tests.models.pi05.helpers import components


def test_discretisation_is_numpy_digitize_over_the_256_left_edges() -> None:
    edges = np.linspace(-1, 1, 257)[:-1]
    values = np.concatenate([np.linspace(-1.2, 1.2, 997), edges, [-1.0, 1.0, 0.0, 1 - 1 / 128, -1e-9]])
    expected = (np.digitize(values, bins=edges) - 1).tolist()
    assert discretize(torch.from_numpy(values)) == expected
    assert discretize(torch.tensor([-1.0, 0.0, 0.999, 1.0, -1.5])) == [0, 128, 255, 255, -1]


def test_prompt_string_and_tokens() -> None:
    assert pi05_prompt("  pick_up the\ncube ", [0, 128, 255]) == "Task: pick up the cube, State: 0 128 255;\nAction: "
    _, llm = components(Pi05Config.preset("tiny"))
    state = torch.tensor([-1.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.0, -0.5])
    ids = llm.prompt_ids(Call(1, "", (None, "fold_towel", state)))
    bins = [0, 255, 192, 128, 128, 128, 128, 64] + [128] * 24  # padded to 32 with zeros: bin 128
    text = "Task: fold towel, State: " + " ".join(map(str, bins)) + ";\nAction: "
    assert ids == [TINY_BOS, *text.encode()]
    assert tiny_tokenizer().encode(text).ids == ids


def test_quantile_statistics_normalise_the_state_and_unnormalise_the_actions() -> None:
    low, high = torch.tensor([0.0, -2.0, 5.0]), torch.tensor([10.0, 2.0, 5.0])  # the last span is zero
    stats = Stats(3, 2, Quantiles(low, high), Quantiles(low[:2], high[:2]))
    got = stats.normalize_state(torch.tensor([5.0, 2.0, 5.0]), 6)
    torch.testing.assert_close(got, torch.tensor([0.0, 1.0, -1.0, 0.0, 0.0, 0.0]))
    x = torch.tensor([[-1.0, 1.0, 0.3], [0.0, 0.0, 0.9]])
    torch.testing.assert_close(stats.actions(x), torch.tensor([[0.0, 2.0], [5.0, 0.0]]))


def test_a_state_of_the_wrong_length_or_a_long_prompt_fails_its_call_naming_it() -> None:
    _, llm = components(Pi05Config.preset("tiny"))
    with pytest.raises(CallError, match=r"`state` must be \[8\].*found \[5\]"):
        llm.prompt_ids(Call(1, "", (None, "x", torch.zeros(5))))
    with pytest.raises(CallError, match=r"^task: the prompt \(the task and the discretised state\) is .* tokens, more than the model's 400"):
        llm.prompt_ids(Call(2, "", (None, "x" * 300, torch.zeros(8))))
    demand = llm.demands("prefill", [Call(3, "", (torch.zeros(1, 16, 64), "x", torch.zeros(2)))])
    assert demand is not None and "`state` must be [8]" in demand[0].error
