"""Tensor parallelism across hosts for the MoT and MoE families: BAGEL's LLM and Qwen3-Omni's thinker at
tp 2 over Gloo, one shard on each of two loopback "hosts" (each its own process tree, the real CLI),
give tp 1's text tokens and, within float tolerance, its image and audio, for requests in flight
together. The tiny presets' random weights (the same seed on every rank, each rank cutting its own
shard); the shard arithmetic itself is tests/models/{bagel,qwen3_omni}/test_tp.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tests.runtime.hosts import HEAD, Hosts, compiled, stderr
from tests.runtime.test_multihost import head_run, outputs_by_request
from wgc.plan.file import load_plan

BAGEL_DOCS = [
    {"params": {"max_tokens": 8}, "parts": [{"kind": "text", "payload": "a red cube"}]},
    {"params": {"steps": 3, "height": 64, "width": 64, "seed": 7}, "parts": [{"kind": "text", "payload": "a dog"}],
     "outputs": ["image"]},
]
OMNI_DOCS = [
    # the talker samples (its seeded draws are the same on both plans): greedy, the tiny preset's first frame is EOS
    {"params": {"max_tokens": 6, "temperature": 0.0, "talker_temperature": 0.9, "talker_max_tokens": 30},
     "parts": [{"kind": "text", "payload": p}], "outputs": ["text", "audio"]}
    for p in ("hello there", "what is a fox")
]


def run_tp2_and_tp1(tmp_path: Path, model: str, placement: str, component: str, tp1: str,
                    docs: list[dict[str, Any]]) -> tuple[dict[int, Any], dict[int, Any], str]:
    plan = compiled(tmp_path, model, placement)
    single = compiled(tmp_path, model, tp1, extra=f'model = "{model}"' if tp1 == "cpu.toml" else "")
    assert [c.tp for c in load_plan(plan)[1].components if c.name == component] == [2]
    with Hosts(tmp_path) as hosts:
        node = hosts.start(str(plan), "--headless", "--node-rank", "1", "--master-addr", HEAD)
        got = outputs_by_request(head_run(hosts, plan, docs))
        assert node.wait(timeout=30) == 0
        lines = stderr(hosts.procs[1])
        expected = outputs_by_request(head_run(hosts, single, docs))
    return got, expected, lines


def pixels(payload: Any) -> np.ndarray:
    """An image output's pixels ([H, W, 3] values as the CLI's JSON lines give them)."""
    return np.asarray(payload, dtype=np.int16)


def test_bagel_llm_at_tp2_across_two_hosts_gives_tp1s_text_and_image(tmp_path: Path) -> None:
    got, expected, lines = run_tp2_and_tp1(tmp_path, "bagel", "bagel-tp2-hosts.toml", "llm", "cpu.toml", BAGEL_DOCS)
    for rank in (0, 1):
        assert f"rank {rank}: llm tensor-parallel group [0, 1] connected over gloo" in lines
        assert f"tensor-parallel rank {rank} of 2; " in lines  # each rank's start-up line names its shard
    assert got.keys() == expected.keys() and len(got) == 2
    first, second = (got[k] for k in sorted(got))
    want_first, want_second = (expected[k] for k in sorted(expected))
    assert first["text"] == want_first["text"] and first["text"]
    (image,), (want,) = second["image"], want_second["image"]
    assert np.abs(pixels(image) - pixels(want)).max() <= 1  # float64 velocities, summed in another order


def test_qwen3_omni_thinker_at_tp2_across_two_hosts_gives_tp1s_reply_and_speech(tmp_path: Path) -> None:
    got, expected, lines = run_tp2_and_tp1(tmp_path, "qwen3_omni", "qwen3-omni-tp2-hosts.toml", "thinker",
                                           "qwen3-omni-cpu2.toml", OMNI_DOCS)
    for rank in (0, 1):
        assert f"rank {rank}: thinker tensor-parallel group [0, 1] connected over gloo" in lines
        assert f"tensor-parallel rank {rank} of 2; " in lines
    assert got.keys() == expected.keys() and len(got) == 2
    for k in got:
        assert got[k]["text"] == expected[k]["text"] and got[k]["text"]
        assert len(got[k]["audio"]) == len(expected[k]["audio"]) > 0
        for a, b in zip(got[k]["audio"], expected[k]["audio"], strict=True):
            np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), atol=1e-4)
