"""bench/cold_check.py stays runnable: one round of its before/after cold `wgc check` table, each side
importing its own `wgc/`, quiet and under the load it starts and stops. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import cold_check  # noqa: E402


def test_one_round_fills_every_row_and_the_table_names_the_goal() -> None:
    rows, floors = cold_check.measure("models/orpheus.walk", "HEAD", runs=1, load_workers=1)
    assert [(r.load, r.mode) for r in rows] == [(load, mode) for load in cold_check.LOADS for mode in cold_check.MODES]
    assert all(len(r.samples[side]) == len(r.cpu[side]) == 1 for r in rows for side in ("before", "after"))
    assert all(0 < r.cpu_median(side) for r in rows for side in ("before", "after"))
    assert set(floors) == set(cold_check.LOADS) and all(wall > 0 and cpu > 0 for wall, cpu in floors.values())
    table = cold_check.markdown(rows, floors, "HEAD", "models/orpheus.walk", 1)
    assert table.count("\n| quiet |") == 2 and table.count("\n| loaded |") == 2


def test_the_table_reports_medians_ratios_and_the_goal() -> None:
    rows = [cold_check.ColdRow("quiet", "from source", {"before": [400.0, 300.0, 500.0], "after": [150.0, 100.0, 200.0]},
                               {"before": [90.0], "after": [70.0]}),
            cold_check.ColdRow("loaded", "from source", {"before": [600.0], "after": [330.0]},
                               {"before": [95.0], "after": [72.0]})]
    table = cold_check.markdown(rows, {"quiet": (40.0, 30.0), "loaded": (90.0, 31.0)}, "abc123", "models/x.walk", 2)
    assert "| quiet | from source | 40 | 400 | 150 | 0.38 | 30 | 90 | 70 | met |" in table
    assert "| loaded | from source | 90 | 600 | 330 | 0.55 | 31 | 95 | 72 | MISSED |" in table
    assert "before (abc123)" in table


def test_the_load_is_stopped_when_the_block_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[subprocess.Popen[bytes]] = []
    real = subprocess.Popen

    def spy(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(cold_check.subprocess, "Popen", spy)
    with cold_check.cpu_load(2):
        assert len(started) == 2 and all(p.poll() is None for p in started)
    assert all(p.poll() is not None for p in started)
