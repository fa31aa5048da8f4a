"""GPU benchmarks (run by bench/gpu_check.sh on a machine with CUDA; exits 0 with a note without it).

1. Decode step time, eager vs CUDA graph, at batch 1/8/32, for the Orpheus LM component with the
   tiny preset and with a ~1B Llama shape on random weights: the graphs are captured by the code
   the workers run at start-up (runtime/worker/startup.py), and both columns time the component's
   own forward over its paged KV cache (prompts of 512 tokens), as the server runs a decode step;
   and the eager step with its attention planned synchronously vs planned ahead on the side thread
   (runtime/engines/plan_ahead.py), with the plan-ahead hits and misses of the timed steps.
2. FlashInfer vs the torch attention path on a paged decode batch (when flashinfer is installed).
3. BAGEL's guidance step: the fused Triton kernel vs the torch reference.
Absolute times are only meaningful on the GPU; every row shows its baseline beside it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

def timed(fn: Callable[[], object], iters: int = 50) -> float:
    """Median milliseconds per call, with CUDA events."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    samples.sort()
    return samples[len(samples) // 2]


def decode_model(name: str):
    """The Orpheus LM component on CUDA: the tiny preset, or Llama-3.2-1B's shape with Orpheus's
    vocabulary (~1.3B parameters, bf16, random weights)."""
    from wgc.models.layers.config import LlamaConfig
    from wgc.models.orpheus import LanguageModel, OrpheusConfig

    from wgc.plan.model import ComponentSpec

    spec = ComponentSpec("llm", "wgc.models.orpheus.LanguageModel", "kv", [], {}, [], {"dtype": "bf16"}, [0], 1,
                         {"page_size": 16, "max_batch": 32, "kv_memory": 2 << 30})
    if name == "tiny":
        return LanguageModel(spec, 0, "cuda", preset="tiny")
    one_b = LlamaConfig(vocab=156940, hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64, intermediate=8192,
                        tie_embeddings=True)
    return LanguageModel(spec, 0, "cuda", config=OrpheusConfig("~1b", one_b))


def decode_rows(context: int = 512) -> list[tuple[str, float, float]]:
    """The decode step as the server runs it: graphs captured by the workers' start-up code
    (runtime/worker/startup.py's capture_one for a CaptureSpec of buckets 1/8/32), then the LM's own
    forward, eager (FlashInfer when installed and the model is bf16, else torch) vs graph replay."""
    from wgc.runtime.worker.startup import capture_one

    from wgc.plan.model import CaptureSpec

    rows = []
    for name in ("tiny", "~1B"):
        lm = decode_model(name)
        entry = capture_one(lm, CaptureSpec(0, 0, "llm", "decode", "decode", [1, 8, 32]), print)
        if not entry.report.captured:
            rows.append((f"decode step {name}: {entry.report.summary()}", 0.0, 0.0))
            continue
        first = 0
        for batch in (1, 8, 32):
            requests = range(first, first + batch)
            first += batch
            lm.forward([(r, "", [(r * 7 + i) % 1000 for i in range(context)]) for r in requests])  # the prompts
            items = [(r, "", [1]) for r in requests]  # every timed call appends one token per sequence
            lm.planner.enabled = False
            synchronous = timed(lambda lm=lm, items=items: lm.forward(items))
            lm.planner.enabled = True
            before = lm.counters()
            eager = timed(lambda lm=lm, items=items: lm.forward(items))
            hits, misses, none = (lm.counters()[f"plan_ahead_{k}"] - before[f"plan_ahead_{k}"]
                                  for k in ("hits", "misses", "unpredicted"))
            rows.append((f"eager decode step {name} batch {batch}: attention planned synchronously vs ahead (ms; "
                         f"{hits} hits, {misses} misses, {none} unpredicted)", synchronous, eager))
            replays = lm.graphs.replays
            graph = timed(lambda lm=lm, items=items: lm.forward(items, graphs=True))
            assert lm.graphs.replays > replays, "the graph path did not replay"
            rows.append((f"decode step {name} batch {batch}, context {context}: eager vs CUDA graph (ms)", eager, graph))
            for r in requests:
                lm.release(r)
        del lm
        torch.cuda.empty_cache()
    return rows


def attention_rows() -> list[tuple[str, float, float]]:
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return [("flashinfer not installed: attention comparison skipped", 0.0, 0.0)]
    from wgc.runtime.engines.attention import AttentionBatch, KVStorage, TorchAttention
    from wgc.runtime.engines.attention_cuda import FlashInferAttention

    rows = []
    for batch in (8, 32):
        pages_per_seq, page = 32, 16
        storage = KVStorage.allocate(1, batch * pages_per_seq, page, 8, 128, torch.bfloat16, "cuda")
        tables = [list(range(b * pages_per_seq, (b + 1) * pages_per_seq)) for b in range(batch)]
        step = AttentionBatch(tables, [pages_per_seq * page - 1] * batch, [1] * batch, page, write=True)
        q = torch.randn(batch, 32, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, 8, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        kp, vp = storage.layer(0)
        results = []
        for backend in (TorchAttention("cuda"), FlashInferAttention("cuda", 32, 8, 128, page, torch.bfloat16)):
            plan = backend.plan(step)
            args = (q, k, v, kp, vp)
            results.append(timed(lambda b=backend, p=plan, a=args: b.attend(p, *a)))
        rows.append((f"paged decode attention batch {batch}: torch vs FlashInfer (ms)", *results))
    return rows


def guidance_rows() -> list[tuple[str, float, float]]:
    from wgc.models.bagel.guidance import Guidance, guided_step
    from wgc.models.bagel.guidance_triton import fused_guided_step

    z, main, txt, img = (torch.randn(4096, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    rows = []
    for mode in ("global", "channel"):
        g = Guidance(text_scale=4.0, image_scale=2.0, renorm=mode)
        torch_ms = timed(lambda g=g: guided_step(z, main, txt, img, 0.7, -0.02, g))
        fused_ms = timed(lambda g=g: fused_guided_step(z, main, txt, img, 0.7, -0.02, g))
        rows.append((f"guidance step 4096x64 ({mode}): torch vs fused Triton (ms)", torch_ms, fused_ms))
    return rows


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: GPU benchmarks skipped")
        return 0
    print(f"device: {torch.cuda.get_device_name()}")
    rows = decode_rows() + attention_rows() + guidance_rows()
    print("| case | baseline | wgc path | speed-up |")
    print("|---|---:|---:|---:|")
    for name, base, ours in rows:
        ratio = f"{base / ours:.2f}x" if ours else "-"
        print(f"| {name} | {base:.3f} | {ours:.3f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
