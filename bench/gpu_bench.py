"""GPU benchmarks (run by bench/gpu_check.sh on a machine with CUDA; exits 0 with a note without it).

1. Decode step time, eager vs CUDA graph, at batch 1/8/32, for the tiny Llama preset and a
   ~1B-parameter Llama shape on random weights. The step reads a static KV cache of a fixed
   context (the shape a captured graph needs) through the shared layers.
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

ONE_B = dict(vocab=32000, hidden=2048, layers=16, heads=16, kv_heads=8, head_dim=128, intermediate=5632)


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


def static_decode(model, context: int):
    """One decode step over a static [B, context] KV cache: the model's own weights, dense SDPA."""
    c = model.config

    def step(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        tokens, kcache, vcache = inputs["tokens"], inputs["k"], inputs["v"]  # [B], [L, B, ctx, kvh, d] x2
        x = model.embed_tokens(tokens)  # [B, hidden]
        positions = torch.full_like(tokens, context)
        cos, sin = model.rotary(positions, x.dtype)  # [B, d]
        from wgc.models.layers.rope import apply_rotary

        for i, layer in enumerate(model.layers):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = apply_rotary(a.q_proj(h).unflatten(-1, (c.heads, c.head_dim)), cos, sin)  # [B, heads, d]
            k = kcache[i].transpose(1, 2)  # [B, kvh, ctx, d]
            v = vcache[i].transpose(1, 2)
            out = torch.nn.functional.scaled_dot_product_attention(
                q.unsqueeze(2), k, v, enable_gqa=True).squeeze(2)  # [B, heads, d]
            x = x + a.o_proj(out.flatten(-2))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return model.lm_head(model.norm(x))  # [B, vocab]

    def make_inputs(batch: int) -> dict[str, torch.Tensor]:
        shape = (c.layers, batch, context, c.kv_heads, c.head_dim)
        return {"tokens": torch.zeros(batch, dtype=torch.long, device="cuda"),
                "k": torch.randn(shape, device="cuda", dtype=torch.bfloat16),
                "v": torch.randn(shape, device="cuda", dtype=torch.bfloat16)}

    return step, make_inputs


def decode_rows() -> list[tuple[str, float, float]]:
    from wgc.models.layers.config import LlamaConfig
    from wgc.models.layers.llama import LlamaModel
    from wgc.runtime.engines.cuda_graphs import GraphRunner

    rows = []
    for name, config in (("tiny", LlamaConfig.preset("tiny")), ("~1B", LlamaConfig(**ONE_B))):
        model = LlamaModel(config).to("cuda", torch.bfloat16).eval()
        step, make_inputs = static_decode(model, context=512)
        runner = GraphRunner(step, make_inputs, [1, 8, 32])
        with torch.no_grad():
            runner.capture()
            for batch in (1, 8, 32):
                inputs = make_inputs(batch)
                eager = timed(lambda f=step, x=inputs: f(x))
                graph = timed(lambda r=runner, x=inputs, n=batch: r.run(x, n))
                rows.append((f"decode step {name} batch {batch}: eager vs CUDA graph (ms)", eager, graph))
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
        for backend in (TorchAttention(), FlashInferAttention("cuda")):
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
