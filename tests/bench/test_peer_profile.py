"""bench/peer_profile.py without vLLM (as in CI): it skips with a clear message and exits 0; its
operator groups put each side's kernels where the table says (vLLM's `_C::` ops and wgc's aten ones;
`aten::index` is sampling's row index while `aten::index_select` is a KV gather); and the wgc side
profiles the llama component's own steps on a generated checkpoint. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.peer.checkpoints import write_llama
from bench.peer.step_profile import group_of, grouped, profile_wgc

ROOT = Path(__file__).resolve().parents[2]


def test_without_vllm_it_skips_with_a_clear_message(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "peer_profile.py"), "--vllm-python",
                           str(tmp_path / "no-such-python")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert "skipped: vLLM is not installed" in done.stdout


@pytest.mark.parametrize("name, group", [
    ("_C::onednn_mm", "linear products"), ("mkldnn::_linear_pointwise", "linear products"),
    ("aten::mm", "linear products"),
    ("_C::cpu_attention_with_kv_cache", "attention kernel"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention kernel"),
    ("aten::index_select", "KV gathers and writes"), ("aten::index_copy_", "KV gathers and writes"),
    ("_C::cpu_attn_reshape_and_cache", "KV gathers and writes"),
    ("aten::index", "sampling (argmax, row index)"), ("_C::greedy_argmax", "sampling (argmax, row index)"),
    ("aten::rms_norm", "RMSNorm (rms_norm, pow, mean, rsqrt)"), ("_C::rotary_embedding", "RoPE (rotary_embedding, neg, cat)"),
    ("vllm::unified_attention_with_output", "everything else (wrappers, planning, host ops)"),
])
def test_each_sides_operators_fall_in_their_group(name: str, group: str) -> None:
    assert group_of(name) == group


def test_groups_are_per_step_sums() -> None:
    ops = {"aten::mm": [4000.0, 8], "mkldnn::_linear_pointwise": [2000.0, 4], "aten::cos": [100.0, 2]}
    got = grouped(ops, steps=2)
    assert got["linear products"] == (3.0, 6.0)  # (4000 + 2000) us / 2 steps, 12 calls / 2
    assert got["everything else (wrappers, planning, host ops)"] == (0.05, 1.0)


def test_the_wgc_side_profiles_the_components_steps(tmp_path: Path) -> None:
    directory = write_llama(tmp_path / "tiny", "0.7m")
    result = profile_wgc(directory, [[256, 1, 2, 3], [256, 4, 5, 6, 7]], 3)
    assert result["steps"] == 3 and [len(t) for t in result["tokens"]] == [3, 3]
    groups = grouped(result["ops"], result["steps"])
    assert groups["linear products"][1] > 0 and groups["attention kernel"][1] > 0
