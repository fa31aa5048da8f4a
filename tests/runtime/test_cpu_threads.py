"""A CPU rank's worker computes with its share of the host's cores (WGC_CPU_THREADS overrides)."""

from __future__ import annotations

import os

import pytest
import torch
from wgc.runtime.process.worker import share_cpu

from tests.lower.golden_pairs import ROOT
from wgc.compile import compile_program
from wgc.settings import cpu_threads


def test_the_cores_are_shared_out_among_the_hosts_cpu_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WGC_CPU_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert [cpu_threads(n) for n in (1, 2, 3, 32)] == [16, 8, 5, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_threads(2) is None  # torch already takes OMP_NUM_THREADS: left alone
    monkeypatch.setenv("WGC_CPU_THREADS", "3")
    assert cpu_threads(2) == 3
    monkeypatch.setenv("WGC_CPU_THREADS", "0")
    with pytest.raises(ValueError, match="WGC_CPU_THREADS='0': not a positive integer"):
        cpu_threads(2)


def test_each_of_two_cpu_ranks_takes_half(monkeypatch: pytest.MonkeyPatch) -> None:
    source = ROOT / "models" / "qwen3_omni.walk"
    plan = compile_program(str(source), source.read_text(), str(ROOT / "placements" / "qwen3-omni-cpu2.toml")).plan
    monkeypatch.delenv("WGC_CPU_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    before = torch.get_num_threads()
    try:
        share_cpu(plan, 1)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
