"""The vLLM side of bench/peer_vllm.py, run by the vLLM venv's interpreter (it imports vLLM, never wgc).

One model per process, commands as JSON lines on stdin, one JSON line of answer each on stdout
after a marker (vLLM may log to stdout too):
    {"op": "engine", "model": DIR}                   load it with `LLM` (no tokenizer: token ids in)
    {"op": "generate", "prompts": [[id, ...]], "max_tokens": 64}
        -> {"tokens": [[id, ...]], "seconds": s}     one greedy `LLM.generate` over the whole batch
    {"op": "orpheus", "model": DIR, "snac": DIR}     load it with `AsyncLLM` and SNAC (the `snac` package)
    {"op": "speak", "prompts": [[id, ...]], "max_tokens": N, "temperature": t, "top_p": p,
     "repetition_penalty": r}
        -> {"audio_s": [...], "ttfa_s": [...], "wall_s": s}   the prompts at once, as Orpheus serves
    {"op": "quit"}

The Orpheus pipeline is written the way Orpheus's own package (orpheus_tts) serves: vLLM streams
each request's tokens; once 28 have come and at every 7th after, the last 28 are turned into SNAC
codes and decoded at once, one window at a time, keeping the window's second frame. The tiny
preset's compact vocabulary is read here as the component maps it (code value = id - 269, frame
position = the token's index mod 7), so both pipelines decode the same codes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

CODE_START = 269  # the compact vocabulary's id of code value 0 (wgc.models.orpheus.vocab)
FRAME, WINDOW, CODEBOOK = 7, 28, 4096
LEVELS = ((0,), (1, 4), (2, 3, 5, 6))


MARK = "@@peer "  # answers start with it: vLLM may log to stdout too


def _say(value: Any) -> None:
    sys.stdout.write(MARK + json.dumps(value) + "\n")
    sys.stdout.flush()


class Engine:
    def __init__(self, model: str) -> None:
        from vllm import LLM

        self.llm = LLM(model=model, skip_tokenizer_init=True, dtype="float32", max_model_len=1024,
                       max_num_seqs=64, gpu_memory_utilization=0.15, enforce_eager=True, seed=0)

    def generate(self, prompts: list[list[int]], max_tokens: int) -> dict[str, Any]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
        batch = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        start = time.perf_counter()
        outs = self.llm.generate(batch, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        return {"tokens": [list(o.outputs[0].token_ids) for o in outs], "seconds": seconds}


class Speaker:
    def __init__(self, model: str, snac: str) -> None:
        from snac import SNAC
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(model=model, skip_tokenizer_init=True, dtype="float32", max_model_len=2048,
                               max_num_seqs=64, gpu_memory_utilization=0.15, enforce_eager=True, seed=0)
        self.engine = AsyncLLM.from_engine_args(args)
        with open(os.path.join(snac, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        from safetensors.torch import load_file

        self.snac = SNAC(**config).eval()
        self.snac.load_state_dict(load_file(os.path.join(snac, "model.safetensors")))
        hop = 1
        for rate in self.snac.decoder_rates:
            hop *= rate
        self.frame = hop * max(self.snac.vq_strides)  # samples per frame: 2048 at 24 kHz
        self.rate = int(self.snac.sampling_rate)

    def window(self, ids: list[int]) -> int:
        """Decode one 28-token window (4 whole frames); the samples kept (0: an invalid window)."""
        codes = [t - CODE_START for t in ids]
        if any(not 0 <= c < CODEBOOK for c in codes):
            return 0  # orpheus_tts skips a window with a non-code token
        frames = [codes[i:i + FRAME] for i in range(0, WINDOW, FRAME)]
        levels = [torch.tensor([[f[p] for f in frames for p in pos]]) for pos in LEVELS]
        with torch.inference_mode():
            audio = self.snac.decode(levels)  # [1, 1, 4 * frame]
        return int(audio[:, :, self.frame:2 * self.frame].numel())

    async def one(self, rid: str, prompt: list[int], params: Any, start: float) -> tuple[float, float]:
        from vllm.inputs import TokensPrompt

        tokens: list[int] = []
        samples, first_audio = 0, -1.0
        async for out in self.engine.generate(TokensPrompt(prompt_token_ids=prompt), params, rid):
            for t in out.outputs[0].token_ids:
                tokens.append(int(t))
                count = len(tokens)
                if count % FRAME == 0 and count >= WINDOW:
                    kept = self.window(tokens[-WINDOW:])
                    if kept and first_audio < 0:
                        first_audio = time.perf_counter() - start
                    samples += kept
        return samples / self.rate, first_audio

    def speak(self, prompts: list[list[int]], max_tokens: int, temperature: float, top_p: float,
              repetition_penalty: float) -> dict[str, Any]:
        import asyncio

        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(temperature=temperature, top_p=top_p, repetition_penalty=repetition_penalty,
                                max_tokens=max_tokens, detokenize=False, output_kind=RequestOutputKind.DELTA,
                                stop_token_ids=[258])  # compact id of end-of-speech

        async def run() -> list[tuple[float, float]]:
            start = time.perf_counter()
            return await asyncio.gather(*[self.one(f"{time.time_ns()}-{i}", p, params, start)
                                          for i, p in enumerate(prompts)])

        start = time.perf_counter()
        results = self.loop.run_until_complete(run())
        return {"audio_s": [a for a, _ in results], "ttfa_s": [t for _, t in results],
                "wall_s": time.perf_counter() - start}


def main() -> None:
    import asyncio

    worker: Any = None
    loop = asyncio.new_event_loop()
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            break
        if op == "engine":
            worker = Engine(cmd["model"])
            _say({"ok": True})
        elif op == "orpheus":
            asyncio.set_event_loop(loop)
            worker = loop.run_until_complete(_speaker(cmd["model"], cmd["snac"]))
            worker.loop = loop
            _say({"ok": True, "rate": worker.rate})
        elif op == "generate":
            _say(worker.generate(cmd["prompts"], cmd["max_tokens"]))
        elif op == "speak":
            _say(worker.speak(cmd["prompts"], cmd["max_tokens"], cmd["temperature"], cmd["top_p"],
                              cmd["repetition_penalty"]))
    if isinstance(worker, Speaker):
        worker.engine.shutdown()


async def _speaker(model: str, snac: str) -> Speaker:
    return Speaker(model, snac)  # AsyncLLM starts its output handler on the running loop


if __name__ == "__main__":
    main()
