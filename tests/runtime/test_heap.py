"""runtime/process/heap.py: the start-up heap frozen, or left alone with WGC_GC_FREEZE=0; each run
in a fresh interpreter, so this test process's own collector is not touched."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = ("import gc, torch; from wgc.runtime.process.heap import freeze_startup_heap, gc_counters; "
         "n = freeze_startup_heap(); print(n, gc.get_freeze_count(), gc_counters()['gc_frozen_objects'])")


@pytest.mark.parametrize("knob", ["", "0"])
def test_freezing_the_start_up_heap_and_turning_it_off(knob: str) -> None:
    env = {**os.environ, "WGC_GC_FREEZE": knob} if knob else {k: v for k, v in os.environ.items()
                                                                if k != "WGC_GC_FREEZE"}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    returned, frozen, reported = map(int, out.stdout.split())
    if knob == "0":
        assert returned == frozen == reported == 0
    else:
        assert returned == frozen == reported > 50_000  # torch alone leaves ~100,000 objects


def test_a_health_report_does_not_count_the_frozen_objects_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """gc.get_freeze_count walks every frozen object (~1 ms at 250,000): asked on every health probe,
    it took a third of a 2-rank Orpheus LM worker's time. The count is the one taken at freeze time."""
    import gc

    from wgc.runtime.process import heap

    def walk() -> int:
        raise AssertionError("counted the frozen objects again")

    monkeypatch.setattr(heap, "_frozen", 123)
    monkeypatch.setattr(gc, "get_freeze_count", walk)
    assert heap.gc_counters()["gc_frozen_objects"] == 123
