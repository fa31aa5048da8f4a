"""A component on every rank of an in-process tensor-parallel copy: one thread per rank, each with its
member of a thread group (tests/models/test_tensor_parallel.py) as the component's process group."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from wgc.runtime.worker import tp_group

from tests.models.test_tensor_parallel import Member, on_threads


def on_ranks(tp: int, component: str, build: Callable[[int, int], Any], work: Callable[[Any], Any],
             monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """`work(build(tp, rank))` on each rank's thread, `component`'s group being that rank's member."""
    mine = threading.local()
    monkeypatch.setattr(tp_group, "group_for", lambda name: mine.group if name == component else None)

    def rank(group: Member) -> Any:
        mine.group = group
        return work(build(tp, group.rank))

    return on_threads(tp, rank)
