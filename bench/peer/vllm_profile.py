"""The vLLM side of bench/peer_profile.py, run by the vLLM venv's interpreter (it imports vLLM, never wgc):
torch.profiler around one greedy `LLM.generate` of the engine table's cell, the engine core in this
process (VLLM_ENABLE_V1_MULTIPROCESSING=0, bench/peer/vllm_client.peer_env), so every operator of
vLLM's CPU step is seen. Prints one JSON line after the marker: {"wall_s", "steps", "ops": {name:
[self_us, calls]}}.

    python vllm_profile.py MODEL_DIR BATCH PROMPT_JSON_FILE NEW_TOKENS
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

MARK = "@@peer "


def main() -> None:
    model, batch_size, prompt_file, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from torch.profiler import ProfilerActivity, profile
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    with open(prompt_file, encoding="utf-8") as f:
        prompts = json.load(f)[:batch_size]
    llm = LLM(model=model, skip_tokenizer_init=True, dtype="float32", max_model_len=1024, max_num_seqs=64,
              gpu_memory_utilization=0.15, enforce_eager=True, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True, detokenize=False)
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    llm.generate(batch, params, use_tqdm=False)  # warm-up: oneDNN primitives, the KV cache
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        outs = llm.generate(batch, params, use_tqdm=False)
        wall = time.perf_counter() - start
    ops = {e.key: [e.self_cpu_time_total, e.count] for e in prof.key_averages()}
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    sys.stdout.write(MARK + json.dumps({"wall_s": wall, "steps": new, "ops": ops, "tokens": tokens}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
