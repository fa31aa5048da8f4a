"""What a component entry may return: numpy arrays become tensors at the boundary; anything the codec
cannot send fails there, naming the component and the entry."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from wgc.runtime.components.base import Call, Component
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import Data

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement
from wgc.plan.model import ComponentSpec


class Returns(Component):
    """`give` returns, for every call, whatever the test put in `self.value`."""

    value: Any = None

    def give(self, calls: list[Call]) -> list[Any]:
        return [self.value for _ in calls]


def returns(value: Any) -> Returns:
    spec = ComponentSpec("arrays", "tests.runtime.test_component_results.Returns", "stateless", [], {}, [], {}, [0],
                         1, {})
    comp = Returns(spec, 0, "cpu")
    comp.value = value
    return comp


def through_the_codec(value: Any) -> Any:
    codec = Codec()
    return codec.decode(codec.encode(Data(1, "f/w#0", "t", value))).value


GRID = np.arange(12, dtype=np.float32).reshape(3, 4)
READ_ONLY = np.arange(6, dtype=np.int64)
READ_ONLY.setflags(write=False)


@pytest.mark.parametrize(("array", "expected"), [
    (GRID, torch.arange(12, dtype=torch.float32).reshape(3, 4)),
    (GRID[:, ::2], torch.tensor([[0.0, 2.0], [4.0, 6.0], [8.0, 10.0]])),  # not contiguous
    (GRID[::-1, 0], torch.tensor([8.0, 4.0, 0.0])),  # a negative stride, which torch.from_numpy refuses
    (GRID.T, torch.arange(12, dtype=torch.float32).reshape(3, 4).T),
    (READ_ONLY, torch.arange(6)),
    (np.zeros((0, 2), dtype=np.uint8), torch.zeros((0, 2), dtype=torch.uint8)),
    (np.array(True), torch.tensor(True)),
])
def test_a_numpy_array_comes_out_of_call_as_a_tensor_and_crosses_the_codec(array: np.ndarray,
                                                                           expected: torch.Tensor) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.from_numpy warns on a read-only array: it must be copied first
        (got,) = returns(array).call("give", [Call(1, "", ())])
    assert isinstance(got, torch.Tensor) and got.dtype == expected.dtype and torch.equal(got, expected)
    assert torch.equal(through_the_codec(got), expected)


def test_arrays_inside_lists_tuples_and_dicts_and_numpy_scalars_are_converted_too() -> None:
    value = {"frames": [np.ones(2, dtype=np.int16), (np.zeros(1), 3)], "score": np.float32(0.5), "n": 2}
    (got,) = returns(value).call("give", [Call(1, "", ())])
    assert torch.equal(got["frames"][0], torch.ones(2, dtype=torch.int16))
    assert isinstance(got["frames"][1], tuple) and torch.equal(got["frames"][1][0], torch.zeros(1, dtype=torch.float64))
    assert got["score"] == 0.5 and type(got["score"]) is float and got["n"] == 2
    sent = through_the_codec(got)
    assert torch.equal(sent["frames"][0], got["frames"][0]) and sent["score"] == 0.5


def test_plain_results_and_tensors_pass_through_untouched() -> None:
    tensor = torch.ones(3)
    for value in (3, 2.5, "text", None, True, b"raw", [1, 2], tensor):
        (got,) = returns(value).call("give", [Call(1, "", ())])
        assert got is value


class Opaque:
    pass


@pytest.mark.parametrize(("value", "message"), [
    (np.array([object(), 1], dtype=object),
     "arrays.give returned a numpy array of dtype object for request 1: an object array is not data"),
    (np.array(["a", "b"]), "arrays.give returned a numpy array of dtype <U1 for request 1, which torch cannot hold"),
    ([1, Opaque()], "arrays.give returned a Opaque (inside its result) for request 1, which cannot be sent"),
    ({"x": {3.5j}}, "arrays.give returned a complex (inside its result) for request 1, which cannot be sent"),
    (Opaque(), "arrays.give returned a Opaque for request 1, which cannot be sent"),
])
def test_a_result_the_codec_cannot_send_fails_in_call_naming_the_component_and_entry(value: Any,
                                                                                     message: str) -> None:
    with pytest.raises(TypeError) as err:
        returns(value).call("give", [Call(1, "", ())])
    assert str(err.value).startswith(message)


NUMPY_WALK = """
model arrays
import tests.runtime.test_component_results as t
component arrays: t.Returns engine stateless {
    give() -> tensor[3; f32]
}
walk w() {
    emit tensor arrays.give()
}
flow { start -> w -> done }
"""


def test_a_walk_emitting_a_numpy_result_on_one_rank_delivers_a_tensor(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Returns, "value", np.arange(3, dtype=np.float32)[::-1])
    cluster = ToyCluster(compile_text(tmp_path, NUMPY_WALK, cpu_placement(1)))
    (out,) = cluster.run([RequestSpec()]).values()
    assert torch.equal(out["tensor"][0], torch.tensor([2.0, 1.0, 0.0]))
