"""Both engines' steps under torch.profiler at one cell of the engine table, grouped by what each
operator does, for bench/peer_profile.py.

wgc: the llama family's `lm` component (models/llama/model.py, the component the runtime runs, on
the checkpoint's weights, one thread), its prefill and decode entries called directly, so the
profile is the engine's forward, sampling and KV bookkeeping without the runtime around it. vLLM:
bench/peer/vllm_profile.py in the vLLM venv (its engine core in-process). Both run the same prompts
and token count greedily and the tokens are compared.

The groups are by operator name (self CPU time), so they are approximate where one operator serves
several purposes (`pow` and `mean` are RMSNorm's on both sides; `cat` is RoPE's and the fusion's).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import torch
from wgc.runtime.components.base import Call

from bench.peer.vllm_client import MARK, peer_env
from wgc.plan.model import ComponentSpec

GROUPS: list[tuple[str, tuple[str, ...]]] = [  # first match wins; names as torch.profiler keys them
    ("linear products", ("onednn_mm", "_linear_pointwise", "aten::mm", "aten::addmm", "weight_packed_linear")),
    ("attention kernel", ("scaled_dot_product", "cpu_attention_with_kv_cache", "_flash_attention")),
    ("KV gathers and writes", ("index_select", "index_copy", "reshape_and_cache", "slot_mapping")),
    ("RMSNorm (rms_norm, pow, mean, rsqrt)", ("rms_norm", "aten::pow", "aten::mean", "aten::rsqrt")),
    ("RoPE (rotary_embedding, neg, cat)", ("rotary_embedding", "aten::neg", "aten::cat")),
    ("activation and elementwise (silu, mul, add)", ("aten::silu", "aten::mul", "aten::add", "silu_and_mul")),
    ("sampling (argmax, row index)", ("argmax", "aten::index", "aten::gather")),
    ("tensor bookkeeping (views, copies, empty, to)", ("aten::view", "aten::slice", "aten::select", "as_strided",
                                                       "reshape", "transpose", "unflatten", "narrow", "split",
                                                       "chunk", "copy_", "_to_copy", "aten::to", "empty",
                                                       "unsqueeze", "aten::t", "alias", "fill_", "expand")),
]


def group_of(name: str) -> str:
    for group, needles in GROUPS:
        if any(n in name for n in needles):
            return group
    return "everything else (wrappers, planning, host ops)"


def grouped(ops: dict[str, list[float]], steps: int) -> dict[str, tuple[float, float]]:
    """{group: (self ms a step, operator calls a step)}."""
    out: dict[str, list[float]] = {}
    for name, (self_us, calls) in ops.items():
        acc = out.setdefault(group_of(name), [0.0, 0.0])
        acc[0] += self_us / 1e3 / steps
        acc[1] += calls / steps
    return {g: (v[0], v[1]) for g, v in out.items()}


def lm_spec(kv_memory: int = 256 << 20) -> ComponentSpec:
    """The llama walk's `lm` as placements/llama-cpu.toml places it (room for 64 rows a step)."""
    return ComponentSpec("lm", "wgc.models.llama.ChatModel", "kv", [], {"eos": -1}, [], {"dtype": "bf16"}, [0], 1,
                         {"page_size": 16, "max_batch": 64, "kv_memory": kv_memory})


def profile_wgc(directory: Path, prompts: list[list[int]], new: int) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile
    from wgc.models.llama import ChatModel

    torch.set_num_threads(1)
    lm = ChatModel(lm_spec(), 0, "cpu", weights=directory)

    def generate(base: int) -> list[list[int]]:
        tokens = lm.prefill([Call(base + i, "", (p, 0.0, 1.0)) for i, p in enumerate(prompts)])
        out = [[t] for t in tokens]
        for _ in range(new - 1):
            tokens = lm.decode([Call(base + i, "", (t, 0.0, 1.0)) for i, t in enumerate(tokens)])
            for row, t in zip(out, tokens):
                row.append(t)
        for i in range(len(prompts)):
            lm.release(base + i)
        return out

    generate(0)  # warm-up: packs the weights
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        tokens = generate(1000)
        wall = time.perf_counter() - start
    ops = {e.key: [e.self_cpu_time_total, e.count] for e in prof.key_averages()}
    return {"wall_s": wall, "steps": new, "ops": ops, "tokens": tokens}


def profile_vllm(python: str, directory: Path, prompts: list[list[int]], new: int, log: Path) -> dict[str, Any]:
    prompt_file = log.with_suffix(".prompts.json")
    prompt_file.write_text(json.dumps(prompts), encoding="utf-8")
    script = Path(__file__).with_name("vllm_profile.py")
    with open(log, "ab") as err:
        done = subprocess.run([python, str(script), str(directory), str(len(prompts)), str(prompt_file), str(new)],
                              stdout=subprocess.PIPE, stderr=err, text=True, env=peer_env(), timeout=900)
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    raise RuntimeError(f"the vLLM profile exited {done.returncode}; see {log}")


def top(ops: dict[str, list[float]], steps: int, n: int) -> list[tuple[str, float, float]]:
    """The n operators of most self time: (name, ms a step, calls a step)."""
    rows = sorted(ops.items(), key=lambda kv: -kv[1][0])[:n]
    return [(name, us / 1e3 / steps, calls / steps) for name, (us, calls) in rows]
