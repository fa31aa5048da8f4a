"""Table (c): Orpheus's tiny preset, `wgc run orpheus.plan --serve` (/v1/audio/speech, raw PCM
streamed) against a peer pipeline written the way Orpheus's own package serves (bench/peer/vllm_worker.py:
vLLM streaming tokens, SNAC decoding a 28-token window every 7 tokens), on the same weights (the
preset's, written out; the tiny SNAC's too) and the same sampling (Orpheus's defaults), all
requests of a level at once: audio-seconds per wall-second and time to first audio."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.peer.checkpoints import orpheus_prompt_ids
from bench.peer.load import drive
from bench.peer.servers import start_wgc
from bench.peer.vllm_client import VllmWorker
from bench.peer.wgc_engine import wgc_env

TEXT = "Hello there, this is a test of streaming speech."
SAMPLING = {"temperature": 0.6, "top_p": 0.8, "repetition_penalty": 1.3}


def orpheus_rows(directory: Path, snac: Path, plan: Path, python: str, out: Path, levels: list[int],
                 max_tokens: int) -> list[dict[str, Any]]:
    wgc = start_wgc(plan, wgc_env("WGC_ORPHEUS_DIR", directory), out / "wgc-serve-orpheus.log")
    peer = VllmWorker(python, out / "vllm-orpheus.log")
    rows = []
    try:
        peer.ask(op="orpheus", model=str(directory), snac=str(snac))
        body = {"model": "orpheus", "input": TEXT, "voice": "tara", "response_format": "pcm",
                "params": {"max_tokens": max_tokens, **SAMPLING}}
        prompt = orpheus_prompt_ids(TEXT)
        drive("speech", wgc.url, [body], 1)  # warm-up
        peer.ask(op="speak", prompts=[prompt], max_tokens=max_tokens, **SAMPLING)
        for c in levels:
            ours = drive("speech", wgc.url, [body] * c, c).summary()
            theirs = peer.ask(op="speak", prompts=[prompt] * c, max_tokens=max_tokens, **SAMPLING)
            ttfa = sorted(t for t in theirs["ttfa_s"] if t >= 0)
            peer_row = {"audio_per_wall": sum(theirs["audio_s"]) / theirs["wall_s"],
                        "ttft_p50": ttfa[len(ttfa) // 2] if ttfa else float("nan"),
                        "ttft_p99": ttfa[-1] if ttfa else float("nan")}
            rows.append({"concurrency": c, "wgc": ours, "peer": peer_row})
            print(f"orpheus c={c}: wgc {ours['audio_per_wall']:.2f} audio-s/s (TTFA p50 "
                  f"{ours['ttft_p50'] * 1e3:.0f} ms), peer {peer_row['audio_per_wall']:.2f} audio-s/s (TTFA p50 "
                  f"{peer_row['ttft_p50'] * 1e3:.0f} ms)", flush=True)
    finally:
        wgc.stop()
        peer.close()
    return rows
