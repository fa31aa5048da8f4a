"""Table (b): `wgc run llama.plan --serve` against `vllm serve` on the same checkpoint, one load
generator through the OpenAI chat API at each concurrency (wgc then vLLM), greedy, 64 tokens each;
and whether one greedy reply (not streamed) is the same from both."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx
from wgc.models.llama.config import LlamaChatConfig
from wgc.models.llama.tokenizer import ChatTokenizer, load_chat_tokenizer

from bench.peer.load import drive
from bench.peer.servers import start_vllm, start_wgc
from bench.peer.wgc_engine import wgc_env

NEW = 64
# Requests a level sends at least, so that its p99 means something: of 8 requests (one stream of 8)
# the p99 is their maximum, one slow moment of the host's.
MIN_REQUESTS = 32


def bodies(model: str, count: int, seed: int, vllm: bool) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words = " ".join("".join(rng.choice("abcdefghij") for _ in range(4)) for _ in range(6))
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": words}], "stream": True,
                                "max_tokens": NEW, "temperature": 0, "stream_options": {"include_usage": True}}
        if vllm:
            body["ignore_eos"] = True  # vLLM takes the tokenizer's eos_token as a stop; wgc's checkpoint has none
        out.append(body)
    return out


def whole_reply(url: str, vllm: bool, tokenizer: ChatTokenizer) -> str:
    """One greedy reply, not streamed. vLLM's is its token ids (`return_token_ids`) decoded by wgc's
    tokenizer: its own detokenizer drops the trailing U+FFFD a random model's stray bytes decode to,
    which wgc shows as a one-shot decode does, so equal tokens would show as different text."""
    body = {**bodies("llama", 1, 0, vllm)[0], "stream": False}
    body.pop("stream_options")
    if vllm:
        body["return_token_ids"] = True
    choice = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()["choices"][0]
    if vllm:
        return tokenizer.decode(choice["token_ids"]).decode("utf-8", errors="replace")
    return str(choice["message"]["content"])


def serving_rows(name: str, directory: Path, plan: Path, python: str, out: Path, levels: list[int],
                 requests_per_stream: int, rounds: int = 1) -> list[dict[str, Any]]:
    """Per concurrency, `rounds` interleaved rounds (wgc, vLLM, wgc, ...); each server's best round by
    req/s is kept, with its own latencies (the round the machine's other load disturbed least)."""
    wgc = start_wgc(plan, wgc_env("WGC_LLAMA_DIR", directory), out / f"wgc-serve-{name}.log")
    vllm = None
    rows = []
    try:
        vllm = start_vllm(python, directory, "llama", out / f"vllm-serve-{name}.log")
        for url, is_vllm in ((wgc.url, False), (vllm.url, True)):
            drive("chat", url, bodies("llama", 4, 1, is_vllm), 2)  # warm-up
        tokenizer = load_chat_tokenizer(directory, LlamaChatConfig.from_directory(directory))
        same = whole_reply(wgc.url, False, tokenizer) == whole_reply(vllm.url, True, tokenizer)
        for c in levels:
            count = max(MIN_REQUESTS, c * requests_per_stream)
            best: dict[str, dict[str, float]] = {}
            paired: list[float] = []  # each round's wgc / vLLM req/s, the two driven back to back
            for round_ in range(rounds):
                seed = 1000 * c + round_  # prompts new to both servers' prefix caches each round, the same for both
                a = drive("chat", wgc.url, bodies("llama", count, seed, False), c).summary()
                b = drive("chat", vllm.url, bodies("llama", count, seed, True), c).summary()
                paired.append(a["req_s"] / b["req_s"])
                for key, summary in (("wgc", a), ("vllm", b)):
                    if key not in best or summary["req_s"] > best[key]["req_s"]:
                        best[key] = summary
                print(f"serving {name} c={c}: wgc {a['req_s']:.2f} req/s (TTFT p99 {a['ttft_p99'] * 1e3:.0f} ms), "
                      f"vLLM {b['req_s']:.2f} req/s (TTFT p99 {b['ttft_p99'] * 1e3:.0f} ms), same greedy reply: {same}",
                      flush=True)
            rows.append({"model": name, "concurrency": c, "wgc": best["wgc"], "vllm": best["vllm"], "same": same,
                         "paired": paired})
    finally:
        wgc.stop()
        if vllm is not None:
            vllm.stop()
    return rows
