"""Table (c): Orpheus's tiny preset, `wgc run orpheus.plan --serve` (/v1/audio/speech, raw PCM
streamed) against a peer pipeline written the way Orpheus's own package serves (bench/peer/vllm_worker.py:
vLLM streaming tokens, SNAC decoding a 28-token window every 7 tokens), on the same weights (the
preset's, written out; the tiny SNAC's too) and the same sampling (Orpheus's defaults), all
requests of a level at once: audio-seconds per wall-second and time to first audio.

Three wgc servers are driven beside the peer, in turn, ROUNDS times at every level (the best round
of each kept): the plan's codec decoding whole windows (WGC_SNAC_WHOLE_WINDOWS=1, as before it
computed only each window's kept frame), the kept-region codec, and the kept-region codec with the
LM and the codec on two ranks (placements/orpheus-cpu2.toml). The peer table shows `main`, and
beside its best rounds' ratio each round's own (`main` and the peer driven in that round); a second
table shows every variant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.peer.checkpoints import orpheus_prompt_ids
from bench.peer.load import drive
from bench.peer.servers import start_wgc
from bench.peer.vllm_client import VllmWorker
from bench.peer.wgc_engine import ROOT, compile_plan, wgc_env

TEXT = "Hello there, this is a test of streaming speech."
SAMPLING = {"temperature": 0.6, "top_p": 0.8, "repetition_penalty": 1.3}


ROUNDS = 3  # interleaved rounds per level; each side's best round is kept (the host is shared and noisy)
TWO_RANKS = """# bench: Orpheus's LM on rank 0 and SNAC on rank 1 (they overlap), 64 sequences per step
extends = "{placements}/orpheus-cpu2.toml"

[defaults.engine]
max_batch = 64
"""


def wgc_variants(plan: Path, directory: Path) -> dict[str, tuple[Path, dict[str, str]]]:
    """The wgc servers driven beside the peer: the codec decoding whole windows (as before), the
    kept-region codec on the same one-rank plan, and on two ranks (LM and codec apart)."""
    env = wgc_env("WGC_ORPHEUS_DIR", directory)
    placement = plan.parent / "orpheus-cpu2-64.toml"
    placement.write_text(TWO_RANKS.format(placements=ROOT / "placements"), encoding="utf-8")
    two = compile_plan("orpheus", placement, plan.parent / "orpheus-2ranks.plan")
    return {"whole windows, 1 rank": (plan, {**env, "WGC_SNAC_WHOLE_WINDOWS": "1"}),
            "kept region, 1 rank": (plan, env), "kept region, 2 ranks": (two, env)}


def orpheus_rows(directory: Path, snac: Path, plan: Path, python: str, out: Path, levels: list[int],
                 max_tokens: int, main: str = "kept region, 2 ranks", rounds: int = ROUNDS) -> list[dict[str, Any]]:
    """Rows of the peer table for the `main` variant; every variant's in the before/after table
    (each side's best of `rounds` interleaved rounds a level)."""
    servers = {name: start_wgc(p, env, out / f"wgc-serve-orpheus-{k}.log")
               for k, (name, (p, env)) in enumerate(wgc_variants(plan, directory).items())}
    peer = VllmWorker(python, out / "vllm-orpheus.log")
    rows = []
    try:
        peer.ask(op="orpheus", model=str(directory), snac=str(snac))
        body = {"model": "orpheus", "input": TEXT, "voice": "tara", "response_format": "pcm",
                "params": {"max_tokens": max_tokens, **SAMPLING}}
        prompt = orpheus_prompt_ids(TEXT)
        for served in servers.values():
            drive("speech", served.url, [body], 1)  # warm-up
        peer.ask(op="speak", prompts=[prompt], max_tokens=max_tokens, **SAMPLING)
        for c in levels:
            best: dict[str, dict[str, float]] = {}
            paired: list[float] = []  # each round's `main` / peer audio-s/s, the two driven in one round
            for _ in range(rounds):
                this_round: dict[str, dict[str, float]] = {}
                for name, served in servers.items():
                    this_round[name] = drive("speech", served.url, [body] * c, c).summary()
                this_round["peer"] = peer_row(peer.ask(op="speak", prompts=[prompt] * c, max_tokens=max_tokens,
                                                       **SAMPLING))
                for name, row in this_round.items():
                    keep_best(best, name, row)
                paired.append(this_round[main]["audio_per_wall"] / this_round["peer"]["audio_per_wall"])
            rows.append({"concurrency": c, "wgc": best[main], "peer": best["peer"], "variants": best,
                         "paired": paired})
            print(f"orpheus c={c}: " + ", ".join(f"{k} {v['audio_per_wall']:.2f} audio-s/s (TTFA p50 "
                                                  f"{v['ttft_p50'] * 1e3:.0f} ms)" for k, v in best.items()), flush=True)
    finally:
        for served in servers.values():
            served.stop()
        peer.close()
    print(variants_table(rows), flush=True)
    return rows


def peer_row(theirs: dict[str, Any]) -> dict[str, float]:
    ttfa = sorted(t for t in theirs["ttfa_s"] if t >= 0)
    return {"audio_per_wall": sum(theirs["audio_s"]) / theirs["wall_s"],
            "ttft_p50": ttfa[len(ttfa) // 2] if ttfa else float("nan"),
            "ttft_p99": ttfa[-1] if ttfa else float("nan")}


def keep_best(best: dict[str, dict[str, float]], name: str, row: dict[str, float]) -> None:
    if name not in best or row["audio_per_wall"] > best[name]["audio_per_wall"]:
        best[name] = row


def variants_table(rows: list[dict[str, Any]]) -> str:
    """Every wgc variant's audio-s/s against the peer's of the same level (best of ROUNDS each)."""
    names = [n for n in rows[0]["variants"] if n != "peer"] if rows else []
    lines = ["| concurrent | peer audio-s/s | " + " | ".join(f"{n}: audio-s/s (ratio)" for n in names)
             + " | TTFA p50 (ms): peer / " + " / ".join(names) + " |", "|---:|---:|" + "---:|" * len(names) + "---|"]
    for r in rows:
        v = r["variants"]
        p = v["peer"]["audio_per_wall"]
        cells = " | ".join(f"{v[n]['audio_per_wall']:.2f} ({v[n]['audio_per_wall'] / p:.2f})" for n in names)
        ttfa = " / ".join(f"{v[n]['ttft_p50'] * 1e3:.0f}" for n in ["peer", *names])
        lines.append(f"| {r['concurrency']} | {p:.2f} | {cells} | {ttfa} |")
    return "\n".join(lines)
