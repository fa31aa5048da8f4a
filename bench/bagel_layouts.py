"""bench/bagel.py's in-process measures and yardsticks: the KV layouts beside BAGEL's dense caches
(table 2), step batching (table 3), and the wire's cost of one guidance step (c of equation 5).

Dense caches: what BAGEL's own inferencer holds (NaiveCache): per label and per layer one contiguous
K and one V tensor sized to that label's context, `cfg_text` a deep copy of the context it was forked
from; a velocity query runs once per label over its own cache (the new block's K/V concatenated to
it), three forwards in turn. Built here from the very K/V the paged pool holds (`export_label`), so
the two layouts answer the same velocity, which the table checks.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import zmq
from torch import Tensor
from wgc.models.bagel import LanguageModel
from wgc.models.bagel.latents import TOKEN_DIM
from wgc.runtime.components.base import Call, Component, load_class
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process import wire
from wgc.runtime.process.local import LocalCluster
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import Data, Part

from wgc.plan.model import ComponentSpec, Plan

Row = dict[str, Any]


def t2i(prompt: str, px: int, steps: int, seed: int) -> RequestSpec:
    return RequestSpec(params={"steps": steps, "height": px, "width": px, "seed": seed}, parts=[Part("text", prompt)],
                       input_modalities=["text"], output_modalities=["image"])


def edit(px: int, prompt: str, seed: int) -> RequestSpec:
    img = torch.randint(0, 256, (px, px, 3), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)
    return RequestSpec(params={"steps": 2, "height": px, "width": px, "seed": seed, "cfg_img_scale": 2.0,
                               "cfg_interval_low": 0.0, "cfg_renorm_type": "text_channel"},
                       parts=[Part("image", img), Part("text", prompt)], input_modalities=["image", "text"],
                       output_modalities=["image"])


def tiny_factory(made: list[Component], llm: type[LanguageModel] = LanguageModel,
                 **llm_args: Any) -> Callable[[ComponentSpec, int], Component]:
    def factory(spec: ComponentSpec, rank: int) -> Component:
        if spec.name == "llm":
            made.append(llm(spec, rank, "cpu", preset="tiny", **llm_args))
        else:
            made.append(load_class(spec.cls).tiny(spec, rank, "cpu"))
        return made[-1]

    return factory


def finished(c: LocalCluster, ids: list[int]) -> None:
    """Every request done, none failed, no KV page left held: or the bench stops."""
    events = c.take_events()
    errors = [e.error for e in events if e.kind == "error"]
    done = {e.request for e in events if e.kind == "done"}
    if errors or not set(ids) <= done:
        raise RuntimeError(f"{len(set(ids) - done)} of {len(ids)} requests did not finish: {errors[:3]} {c.stuck()}")
    for comp in c.executors[0].components.values():
        if isinstance(comp, LanguageModel) and comp.counters()["requests"]:
            raise RuntimeError("the bench left requests holding KV pages")


# ---- 2. three labels over one paged pool vs three dense per-context caches -----------------------

class DenseCache:
    """One label's BAGEL-style cache, [layers, length, kv_heads, head_dim] contiguous K and V: a query
    block attends to all of it and to itself (a velocity block sees its whole context)."""

    def __init__(self, k: Tensor, v: Tensor) -> None:
        self.k, self.v = k, v

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        keys = torch.cat([self.k[layer], k])  # [T + N, kv_heads, d]: a new tensor each call, as BAGEL's
        values = torch.cat([self.v[layer], v])
        out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys.transpose(0, 1)[None],
                                             values.transpose(0, 1)[None], enable_gqa=True)  # [1, heads, N, d]
        return out[0].transpose(0, 1)  # [N, heads, d]


def dense_velocity(m: LanguageModel, call: Call, cache: dict[str, Any]) -> Tensor:
    """One label's velocity over its dense cache: the same rows, positions and experts as `velocity`."""
    z = m._rows_arg(call, TOKEN_DIM, "z")  # [n, 64]
    ids = m._latent_ids(call, z.shape[0])
    with torch.no_grad():
        x, gen = m._block_rows([m.adapter.embed(z, float(call.args[1]), ids)], gen_middle=True)  # [n + 2, hidden]
        positions = torch.full((x.shape[0],), int(cache["position"]), dtype=torch.int64)  # the block's one position
        hidden = m.language_model(x, positions, DenseCache(cache["k"], cache["v"]), gen)
        return m.adapter.velocity(hidden[1:-1]).to(m.out_dtype)  # [n, 64]


def layouts(m: LanguageModel, calls: list[Call], repeats: int) -> Row:
    """At a request's first step (its three labels in one call list): what each layout holds, and the
    step's time three ways, interleaved: paged (one forward, as the walk runs it on one rank), paged one
    label at a time, dense one label at a time (BAGEL)."""
    calls = [c._replace(args=(*c.args[:2], 1)) for c in calls]  # every label computed, whatever the walk skips
    g, request = m.kv.geometry, calls[0].request
    token_bytes = 2 * g.layers * g.kv_heads * g.head_dim * torch.empty((), dtype=g.dtype).element_size()
    labels = [m.label_of(c) for c in calls]
    caches = {label: m.kv.export_label(request, label) for label in labels}
    caches = {k: {**v, "k": v["k"].contiguous(), "v": v["v"].contiguous()} for k, v in caches.items()}
    dense_bytes = sum(c["k"].nbytes + c["v"].nbytes for c in caches.values())
    paged = m.kv.counters()
    velocity = LanguageModel.velocity
    ways: dict[str, Callable[[], list[Tensor]]] = {
        "paged": lambda: velocity(m, calls),
        "paged_serial": lambda: [velocity(m, [c])[0] for c in calls],
        "dense": lambda: [dense_velocity(m, c, caches[label]) for c, label in zip(calls, labels)]}
    outs = {name: way() for name, way in ways.items()}  # warm, and the answers compared
    diff = max(float((a - b).abs().max().detach()) for a, b in zip(outs["paged"], outs["dense"]))
    times: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(repeats):
        order = list(ways) if i % 2 == 0 else list(reversed(ways))
        for name in order:
            start = time.perf_counter()
            ways[name]()
            times[name].append(time.perf_counter() - start)
    return {"lengths": {label: int(c["length"]) for label, c in caches.items()}, "latents": int(calls[0].args[0].shape[0]),
            "paged_bytes": paged["kv_pages_used"] * m.kv.page_size * token_bytes, "shared_pages": paged["kv_pages_shared"],
            "dense_bytes": dense_bytes, "max_diff": diff, **{name: statistics.median(t) for name, t in times.items()}}


class LayoutProbe(LanguageModel):
    """The tiny LLM; at each request's first velocity call it measures `layouts`, then runs the call."""

    repeats = 5

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rows: dict[int, Row] = {}

    def velocity(self, calls: list[Call]) -> list[Any]:
        if calls and calls[0].request not in self.rows and len({c.request for c in calls}) == 1:
            self.rows[calls[0].request] = layouts(self, calls, self.repeats)
        return super().velocity(calls)


def contexts(plan: Plan, specs: list[tuple[str, RequestSpec]], repeats: int) -> list[Row]:
    """Each request alone on one rank (the walk's prefills build its labels); its first step measured."""
    made: list[Component] = []
    LayoutProbe.repeats = repeats
    c = LocalCluster(plan, tiny_factory(made, LayoutProbe), fake_inputs=False)
    probe = next(m for m in made if isinstance(m, LayoutProbe))
    rows = []
    for name, spec in specs:
        (request,) = c.run([spec])
        rows.append({"context": name, **probe.rows[request]})
    return rows


# ---- 3. step batching ----------------------------------------------------------------------------

def batching(plan: Plan, n: int, px: int, steps: int, together: bool) -> Row:
    """n text-to-image requests, submitted together (their steps batch) or one after another."""
    made: list[Component] = []
    c = LocalCluster(plan, tiny_factory(made), fake_inputs=False, rounds=1)
    specs = [t2i(f"request {i}: a small red boat on a lake", px, steps, seed=i) for i in range(n)]
    start = time.perf_counter()
    if together:
        ids = [c.submit(spec) for spec in specs]
        c.pump()
    else:
        ids = []
        for spec in specs:
            ids.append(c.submit(spec))
            c.pump()
    wall = time.perf_counter() - start
    finished(c, ids)
    stats = c.executors[0].counters()
    return {"images_per_s": n / wall, "wall": wall,
            "items_per_forward": stats["llm.velocity.items"] / stats["llm.velocity.calls"]}


# ---- c of equation 5: the wire's cost of one guidance step ----------------------------------------

ECHO = """
import sys, zmq
ctx = zmq.Context()
inbox, out = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
inbox.bind(sys.argv[1])
out.connect(sys.argv[2])
while True:
    z = inbox.recv_multipart()
    if z == [b"stop"]:
        break
    inbox.recv_multipart()  # t
    out.send_multipart(z)  # z's own frames back as the velocity: a message of the same shape and size
"""


def wire_step(tokens: int, rounds: int) -> float:
    """Rank 0's communication in one step of the three-rank walk, timed on the runtime's own wire
    (ZeroMQ over IPC; this side encodes and decodes with the wire codec): z and t to each of two echo
    processes standing in for ranks 1 and 2 (they compute nothing, and return z's frames as the
    velocity), a velocity back from each. The median of `rounds`, after a warm-up."""
    z = torch.randn(tokens, TOKEN_DIM)  # [N, 64] float32, as llm.velocity returns and combine.step makes
    with tempfile.TemporaryDirectory(prefix="wgc-c-", dir="/tmp") as tmp:
        ctx = zmq.Context()
        home = f"ipc://{tmp}/home"
        inbox = wire.pull_socket(ctx, home)
        echoes = [subprocess.Popen([sys.executable, "-c", ECHO, f"ipc://{tmp}/r{r}", home]) for r in (1, 2)]
        peers = [wire.push_socket(ctx, f"ipc://{tmp}/r{r}") for r in (1, 2)]
        codec = Codec()
        times = []
        try:
            for i in range(rounds + 20):
                start = time.perf_counter()
                for peer in peers:
                    wire.send(peer, codec, Data(1, "image_gen", "z", z))
                    wire.send(peer, codec, Data(1, "image_gen", "t", 0.5))
                for _ in peers:
                    wire.decode(codec, inbox.recv_multipart(copy=False))
                if i >= 20:  # the first rounds wait for the echoes to start
                    times.append(time.perf_counter() - start)
        finally:
            for peer in peers:
                peer.send(b"stop")
            for p in echoes:
                p.wait(10)
            ctx.destroy(linger=0)
    return statistics.median(times)
