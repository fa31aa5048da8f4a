"""How close wgc's decode step is to its matrix products' floor, at one cell of the engine table.

The llama family's `lm` component (the one the runtime runs, on the peer checkpoint's weights, one
thread) decodes greedily; per step, in thread CPU time (these 2-core hosts are shared, so wall time
lies), it reports:
- the whole decode step (`lm.decode`: forward, sampling, K/V bookkeeping);
- the step's oneDNN products as they ran inside it (each `mkldnn::_linear_pointwise` call timed);
- the floor: the same products (the step's own packed weights, shapes and biases) run back to back
  on fresh inputs, nothing in between;
- the rest (step - products): what fusing or compiling the small operators could at most remove;
- the host's plain read bandwidth (one `sum` over a tensor the size of the step's weights), so a
  one-row step's products can be read as GB/s against it.
vLLM's CPU linear (`_C::onednn_mm`) is the same oneDNN kernel (`brg_matmul:avx2`) over the same
blocked weight layout (AB16b64a for a hint of 32 rows) with bitwise equal results, so this floor is
vLLM's too; its step's share is in bench/peer_profile.py's table.

    python bench/peer/step_floor.py --model 34m --batches 1,8,32 --rounds 4
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from wgc.runtime.components.base import Call  # noqa: E402

from bench.peer.checkpoints import SHAPES, write_llama  # noqa: E402
from bench.peer.engine import NEW, prompts  # noqa: E402
from bench.peer.step_profile import lm_spec  # noqa: E402

Product = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]  # (input, packed weight, bias)


class ProductClock:
    """Wraps torch.ops.mkldnn._linear_pointwise while entered: sums its thread CPU time and keeps
    each call's (input, packed weight, bias) when `record` is set."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self.record = False
        self.seen: list[Product] = []
        self._original: Callable[..., torch.Tensor] | None = None

    def __enter__(self) -> ProductClock:
        self._original = original = torch.ops.mkldnn._linear_pointwise

        def timed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *rest: Any) -> torch.Tensor:
            start = time.thread_time()
            out = original(x, weight, bias, *rest)
            self.seconds += time.thread_time() - start
            self.calls += 1
            if self.record:
                self.seen.append((x.clone(), weight, bias))
            return out

        torch.ops.mkldnn._linear_pointwise = timed  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        torch.ops.mkldnn._linear_pointwise = self._original  # type: ignore[attr-defined]


def read_bandwidth(nbytes: int) -> float:
    """GB/s of one thread summing a float32 tensor of nbytes (best of three)."""
    data = torch.ones(nbytes // 4)
    data.sum()
    best = min(_thread_seconds(data.sum) for _ in range(3))
    return nbytes / best / 1e9


def _thread_seconds(fn: Callable[[], object]) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def floor_seconds(products: list[Product], repeats: int = 10) -> float:
    """Thread CPU seconds of the products back to back, once through (least of `repeats`)."""
    op = torch.ops.mkldnn._linear_pointwise

    def once() -> None:
        for x, weight, bias in products:
            op(x, weight, bias, "none", [], "")

    once()
    return min(_thread_seconds(once) for _ in range(repeats))


def measure(lm: Any, batch_prompts: list[list[int]], rounds: int, base: int) -> dict[str, float]:
    """Least over `rounds` of: decode step, products inside it, their floor (ms); calls a step."""
    steps = NEW - 1
    best = {"step": float("inf"), "products": float("inf"), "floor": float("inf")}
    calls = 0.0
    for r in range(rounds):
        ids = [base + 1000 * r + i for i in range(len(batch_prompts))]
        tokens = lm.prefill([Call(i, "", (p, 0.0, 1.0)) for i, p in zip(ids, batch_prompts)])
        with ProductClock() as clock:
            start = time.thread_time()
            for step in range(steps):
                clock.record = step == 0
                tokens = lm.decode([Call(i, "", (t, 0.0, 1.0)) for i, t in zip(ids, tokens)])
            step_s = (time.thread_time() - start) / steps
        for i in ids:
            lm.release(i)
        products = clock.seen
        best["step"] = min(best["step"], step_s * 1e3)
        best["products"] = min(best["products"], clock.seconds / steps * 1e3)
        best["floor"] = min(best["floor"], floor_seconds(products) * 1e3)
        calls = clock.calls / steps
    weight_bytes = sum(w.shape[0] * w.shape[1] * 4 for _, w, _ in products)  # float32, each weight once a step
    return {**best, "calls": calls, "weight_bytes": weight_bytes}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="34m", choices=sorted(SHAPES))
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--rounds", type=int, default=4, help="decodes per cell; the least counts")
    args = p.parse_args()
    from wgc.models.llama import ChatModel

    torch.set_num_threads(1)
    config = SHAPES[args.model]
    with tempfile.TemporaryDirectory(prefix="step-floor-") as tmp:
        directory = write_llama(Path(tmp) / args.model, args.model)
        lm = ChatModel(lm_spec(), 0, "cpu", weights=directory)
        weights = measure(lm, [[1] * 4], 1, 10**6)["weight_bytes"]  # also packs the weights
        print(f"{args.model}: the step's product weights {weights / 1e6:.0f} MB; "
              f"plain read {read_bandwidth(weights):.1f} GB/s (one thread)\n")
        print("| batch | decode step (ms) | products in the step (ms) | products back to back (ms) "
              "| rest (ms) | products / step | products a step | products' GB/s |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for batch in (int(b) for b in args.batches.split(",")):
            cell = measure(lm, prompts(batch, config.vocab, batch), args.rounds, 10**5 * batch)
            print(f"| {batch} | {cell['step']:.2f} | {cell['products']:.2f} | {cell['floor']:.2f} "
                  f"| {cell['step'] - cell['products']:.2f} | {cell['products'] / cell['step']:.0%} "
                  f"| {cell['calls']:.0f} | {weights / cell['floor'] / 1e6:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
