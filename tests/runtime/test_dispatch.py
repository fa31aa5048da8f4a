"""Messages are dispatched by a table keyed by their type, checked when the dispatcher is imported.

A rank (runtime/worker/executor.py) has a handler for every message a rank is sent but Shutdown (the worker
process's own); the coordinator core (runtime/coordinator/core.py) for every message a worker sends but
the three the process layer answers. A message type without its handler fails the import, not a request.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
from wgc.runtime.coordinator import core
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.protocol.messages import (
    COORDINATOR,
    Data,
    Drained,
    Output,
    Shutdown,
    ToCoordinator,
    ToWorker,
    check_handlers,
)
from wgc.runtime.worker import executor

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement

TWO_RANKS = """
model relay
import tests.runtime.toys as toy
component a: toy.Counter engine kv {
    decode(prev: token) -> token
}
component b: toy.Counter engine kv {
    decode(prev: token) -> token
}
walk w(x: token) {
    y = a.decode(x)
    z = b.decode(y)
    emit text z
}
flow { start -> w -> done }
"""


def test_every_message_a_rank_is_sent_has_its_handler() -> None:
    assert set(executor.HANDLERS) == set(get_args(ToWorker)) - {Shutdown}


def test_every_message_the_coordinator_is_sent_has_its_handler_in_the_core_or_the_process_layer() -> None:
    assert set(core.HANDLERS) | core.ELSEWHERE == set(get_args(ToCoordinator))
    assert not set(core.HANDLERS) & core.ELSEWHERE


@pytest.mark.parametrize(("table", "union", "elsewhere", "lost"), [
    (executor.HANDLERS, ToWorker, {Shutdown}, Data),
    (core.HANDLERS, ToCoordinator, core.ELSEWHERE, Drained),
])
def test_a_message_type_that_lost_its_handler_is_refused(table: dict, union: object, elsewhere: set,
                                                         lost: type) -> None:
    check_handlers(table, union, elsewhere, "here")  # the table as shipped passes
    without = {t: h for t, h in table.items() if t is not lost}
    with pytest.raises(TypeError, match=f"here: no handler for {lost.__name__};"):
        check_handlers(without, union, elsewhere, "here")


def test_a_handler_for_a_message_never_sent_there_is_refused() -> None:
    with pytest.raises(TypeError, match="handlers for messages it is never sent: Output"):
        check_handlers({**executor.HANDLERS, Output: None}, ToWorker, {Shutdown}, "here")


@pytest.mark.parametrize(("module", "union"), [("wgc.runtime.worker.executor", "ToWorker"),
                                               ("wgc.runtime.coordinator.core", "ToCoordinator")])
def test_a_new_message_type_without_a_handler_fails_the_import(module: str, union: str) -> None:
    probe = ("import msgspec\n"
             "import wgc.runtime.protocol.messages as m\n"
             "class Novel(msgspec.Struct, tag='novel', frozen=True):\n"
             "    request: int\n"
             f"m.{union} = m.{union} | Novel\n"
             f"import {module}\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "TypeError" in done.stderr and "no handler for Novel" in done.stderr, done.stderr


def test_a_renamed_message_class_is_still_dispatched(tmp_path: Path) -> None:
    """Dispatch by the class object: the old `"_on_" + class name` lookup broke on any rename."""
    cluster = ToyCluster(compile_text(tmp_path, TWO_RANKS, cpu_placement(2, "[components.b]\nranks = [1]\n")))
    names = {cls: cls.__name__ for cls in {*get_args(ToWorker), *get_args(ToCoordinator)}}
    try:
        for cls, name in names.items():
            cls.__name__ = f"Renamed{name}"
        out = cluster.run([RequestSpec(inputs={"x": 0})])
    finally:
        for cls, name in names.items():
            cls.__name__ = name
    assert next(iter(out.values())) == {"text": [2]}  # a Data crossed from rank 0 to rank 1, an Output came back
    assert cluster.leftovers() == {}


def test_the_coordinators_address_is_never_a_rank() -> None:
    assert COORDINATOR < 0
