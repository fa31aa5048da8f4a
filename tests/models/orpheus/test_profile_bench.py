"""bench/orpheus_profile.py stays runnable: one short in-process run per codec, and its split of
the wall adds up. No timing is asserted; the numbers come from running the bench itself."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench_scripts import loaded_bench
from tests.models.orpheus.helpers import ROOT


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    with loaded_bench(ROOT / "bench" / "orpheus_profile.py", "bench_orpheus_profile") as module:
        yield module


def test_a_short_run_splits_its_wall_into_its_parts(bench: ModuleType) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plan = bench.compile_plan(Path(tmp))
    for whole in (True, False):
        llm, snac = bench.components(plan, whole)
        assert (snac.region is None) == whole
        row = bench.run_once(plan, llm, snac, 2, 42)
        assert row["audio_s"] > 0 and row["snac"] > 0 and row["lm forward"] > 0 and row["sampling"] > 0
        assert row["lm bookkeeping"] >= 0 and row["runtime"] >= 0
        assert sum(row[p] for p in bench.PARTS) == pytest.approx(row["wall"])
        assert not hasattr(llm, "call") or llm.call.__name__ != "timed"  # the timers are taken off again
        assert bench.paged_llama.sample.__name__ == "sample"
    text = bench.table([{"codec": "kept region", "concurrency": 2, **row}])
    assert text.count("\n") == 2 and "| kept region | 2 |" in text


def test_the_torch_profile_marks_the_lm_call_its_forward_and_its_sampling(bench: ModuleType) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plan = bench.compile_plan(Path(tmp))
    llm, snac = bench.components(plan, False)
    text = bench.torch_profile(plan, llm, snac, 1, 35)
    assert all(name in text for name in ("lm call", "lm forward", "sampling"))
    assert "call" not in vars(llm) and bench.paged_llama.sample.__name__ == "sample"  # wrappers taken off
