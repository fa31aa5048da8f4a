"""`ac_predictor` of models/vjepa2_ac.walk: the action-conditioned predictor (ac_net.py) over the paged
KV engine, so that a rollout of H steps computes H frame blocks, not the 1 + 2 + ... + H a predictor
that recomputes the growing prefix at every step does (models-wave2.md §3.3).

Entries (batched over their calls; each writes whole frame blocks, `Write(block=True)`, so a
label's engine position counts its frames, which is the frame index RoPE rotates by):
    context(z [C*HW, D], actions [C-1, 7], states [C-1, 7]) -> [HW, D]
        writes the clip's first C-1 frames, each with its action and state, one block per engine
        step (frame-block-causal needs them one after the other), and returns frame C-1: the
        frame a rollout starts from
    step(frame [HW, D], action [7], state [7]) -> [HW, D]
        writes one frame block (mode `prefix`: its rows see the cached frames and each other) and
        returns the next frame's prediction, layer-normed (no affine, eps 1e-5) as the
        world-model wrapper does before it feeds a prediction back or scores it
    candidates(z [HW, D], actions [K, H, 7], states [K, H, 7]) -> [K, HW, D]
        K rollouts of H steps from the call's label: the label is forked K times (its pages
        shared copy-on-write, only a partial last page copied), each step one engine step over
        every candidate of every call, and the candidates' labels dropped at the end; the
        answer is each candidate's last predicted frame (what MPC scores)

Cached frames are exact: a frame's rows at every layer depend only on frames <= it, earlier
inputs never change once written, and positions are absolute. The predictor covers `max_frames`
frame blocks (32: the reference's mask); a request that would write more fails alone with the
numbers (`demands`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from wgc.models.layers.dtypes import compute_dtype
from wgc.models.layers.init import init_random
from wgc.models.layers.presets import TinyPreset
from wgc.models.vjepa2_ac.ac_net import ACPredictorNet
from wgc.models.vjepa2_ac.blocks import normalize_reps
from wgc.models.vjepa2_ac.config import ACTION_DIM, ACConfig
from wgc.models.vjepa2_ac.rope import Rope3D, head_tables
from wgc.models.vjepa2_ac.weights import KNOB, Checkpoint
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import Call, CallError
from wgc.runtime.engines.kv_component import KVComponent
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, Write
from wgc.runtime.worker.scheduler import Demand

from wgc.plan.model import ComponentSpec

DEFAULT_PAGE_SIZE = 16
WARM_UP = -1  # the request id of the start-up warm-up (runtime request ids are never negative)
Item = tuple[int, str, Tensor, Tensor, Tensor]  # (request, label, frame [HW, D], action [7], state [7])


class ActionConditionedPredictor(TinyPreset, KVComponent):
    """The AC predictor as a kv component (see the module docstring)."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: ACConfig | None = None, seed: int = 0) -> None:
        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        self.dtype = compute_dtype(spec, self.torch_device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        if directory is not None:
            self.net = Checkpoint(directory).ac_predictor(self.torch_device, self.dtype)
        else:
            self.net = ACPredictorNet(config or ACConfig.preset(preset or "tiny"))
            init_random(self.net, seed)
            self.net.to(self.torch_device, self.dtype)
        self.net.eval()
        self.config = c = self.net.config
        geometry = Geometry(c.layers, c.heads, c.heads, c.head_dim, c.max_frames * c.block, self.dtype)
        self.kv = KVCacheEngine.for_spec(spec.settings, geometry, self.torch_device, DEFAULT_PAGE_SIZE)
        self.stats = {"forwards": 0, "frame_blocks": 0}
        self._rope: dict[int, tuple[Tensor, Tensor]] = {}  # frame index -> its block's rotary tables
        self.source = f"{c.name} preset, random weights" if directory is None else str(directory)
        announce("vjepa2_ac", spec.name, KNOB if fallback else None, "the tiny preset", self.source, self._where())

    def describe(self) -> str:
        return f"{self.source}; {self._where()}"

    def _where(self) -> str:
        return f"{self.kv.pages.num_pages} KV pages of {self.kv.page_size} tokens on {self.device}"

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """One step and two 2-step candidates on a request of its own (released), so that no request
        pays the first call's kernel builds; the counters count requests' blocks only."""
        c = self.config
        z, a = torch.zeros(c.tokens_per_frame, c.embed), torch.zeros(ACTION_DIM)
        self.step([Call(WARM_UP, "", (z, a, a))])
        self.candidates([Call(WARM_UP, "", (z, torch.zeros(2, 2, ACTION_DIM), torch.zeros(2, 2, ACTION_DIM)))])
        self.release(WARM_UP)
        self.stats = dict.fromkeys(self.stats, 0)
        progress("ran one step and two candidates")

    # ---- one engine step: one frame block per item ------------------------------------------

    def advance(self, items: list[Item]) -> list[Tensor]:
        """Write each item's frame block on its label (one forward for all): each item's next frame,
        [HW, D] layer-normed."""
        c, net = self.config, self.net
        writes = [Write(r, label, None, c.block, block=True) for r, label, *_ in items]
        with self.kv.stepping(writes, "prefix", True) as prepared, torch.no_grad():
            frames = prepared.positions[::c.block].tolist()  # each item's frame index (a block is one position)
            rows = torch.cat([net.frame_rows(z[None].to(self.dtype), a[None], s[None]) for _, _, z, a, s in items])  # [n*block, hidden]
            tables = [self._tables(int(f)) for f in frames]
            rope = Rope3D(None, c.head_dim, (torch.cat([t[0] for t in tables]), torch.cat([t[1] for t in tables])),
                          self.dtype)
            hidden = net.blocks(rows, rope, self.kv.step(prepared).attend)  # [n*block, hidden]
            out = normalize_reps(net.readout(hidden)).float()  # [n, HW, D]
        self.stats["forwards"] += 1
        self.stats["frame_blocks"] += len(items)
        return list(out)

    def _tables(self, frame: int) -> tuple[Tensor, Tensor]:
        """The rotary tables of one frame block's rows (cos, sin [block, head_dim]), computed once per frame index."""
        cached = self._rope.get(frame)
        if cached is None:
            pos = self.net.positions(frame, 1).to(self.torch_device)  # [block, 3]
            cached = self._rope[frame] = head_tables(pos, self.config.head_dim)
        return cached

    # ---- arguments ---------------------------------------------------------------------------

    def _frames(self, call: Call, x: Any, name: str, count: int | None = None) -> Tensor:
        """x as [frames, HW, D] in the compute dtype, or a CallError naming `name` and the shape."""
        c = self.config
        hw = c.tokens_per_frame
        ok = isinstance(x, Tensor) and x.dim() == 2 and x.shape[1] == c.embed and x.shape[0] % hw == 0 and x.shape[0]
        if ok and count is not None:
            ok = x.shape[0] == count * hw
        if not ok:
            shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            rows = f"{count * hw}" if count is not None else f"a multiple of {hw}"
            raise CallError(call.request, f"{self.spec.name}: `{name}` must be a tensor [{rows}, {c.embed}] "
                            f"({hw} tokens a frame), found {shape}")
        return x.to(self.torch_device, self.dtype).view(-1, hw, c.embed)

    def _vectors(self, call: Call, x: Any, name: str, lead: tuple[int, ...]) -> Tensor:
        want = [*lead, ACTION_DIM]
        if not isinstance(x, Tensor) or list(x.shape) != want:
            shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise CallError(call.request, f"{self.spec.name}: `{name}` must be a tensor {want}, found {shape}")
        return x.to(self.torch_device, self.dtype)

    def _plan(self, call: Call, entry: str) -> tuple[int, int]:
        """(frames each copy writes, copies) of a call; 0 frames when its arguments are malformed."""
        args = call.args
        if entry == "step":
            return 1, 1
        if entry == "context":
            z = args[0] if args else None
            n = int(z.shape[0]) // self.config.tokens_per_frame if isinstance(z, Tensor) and z.dim() == 2 else 1
            return max(0, n - 1), 1
        a = args[1] if len(args) > 1 else None
        return (int(a.shape[1]), int(a.shape[0])) if isinstance(a, Tensor) and a.dim() == 3 else (0, 1)

    # ---- what the scheduler asks -------------------------------------------------------------

    def demands(self, entry: str, calls: list[Call]) -> list[Demand] | None:
        kv, c = self.kv, self.config
        out = []
        for call in calls:
            label = self.label_of(call)
            seq = kv.seq(call.request, label)
            written = seq.position if seq is not None else 0
            frames, copies = self._plan(call, entry)
            tokens = frames * c.block * copies
            setup, slack = kv.pages_for(call.request, label, tokens)
            if copies > 1:  # each candidate copies the shared partial page once, and may round up once
                setup, slack = 2 * copies, 0
            error = ""
            if written + frames > c.max_frames:
                error = (f"{self.spec.name}: the rollout would hold {written + frames} frame blocks "
                         f"({written} written, {frames} more), past the {c.max_frames} the predictor covers")
            elif -(-(kv.length(call.request, label) + tokens) // kv.page_size) + setup > kv.pages.num_pages:
                error = (f"{self.spec.name}: {frames * copies} frame blocks of {c.block} tokens need more KV pages "
                         f"than the whole pool ({kv.pages.num_pages} pages of {kv.page_size})")
            out.append(Demand(call.request, tokens, False, kv.page_size, slack, setup, error))
        return out

    # ---- entries -----------------------------------------------------------------------------

    def context(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            clips = []
            for call in wave:
                z = self._frames(call, call.args[0], "z")
                n = z.shape[0] - 1
                clips.append((z, self._vectors(call, call.args[1], "actions", (n,)),
                              self._vectors(call, call.args[2], "states", (n,))))
            for t in range(max(z.shape[0] for z, _, _ in clips) - 1):
                items = [(call.request, self.label_of(call), z[t], a[t], s[t])
                         for call, (z, a, s) in zip(wave, clips) if t < z.shape[0] - 1]
                self.advance(items)
            return [z[-1].float() for z, _, _ in clips]  # each [HW, D]

        return self.waves(calls, run)

    def step(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            items = [(call.request, self.label_of(call), self._frames(call, call.args[0], "frame", 1)[0],
                      self._vectors(call, call.args[1], "action", ()), self._vectors(call, call.args[2], "state", ()))
                     for call in wave]
            return self.advance(items)

        return self.waves(calls, run)

    def candidates(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            return self._candidates(wave)

        return self.waves(calls, run)

    def _candidates(self, wave: list[Call]) -> list[Tensor]:
        runs = []
        for call in wave:
            z = self._frames(call, call.args[0], "z", 1)[0]
            a = call.args[1]
            lead = tuple(a.shape[:2]) if isinstance(a, Tensor) and a.dim() == 3 and a.shape[0] and a.shape[1] else (1, 1)
            runs.append((call, z, self._vectors(call, a, "actions", lead), self._vectors(call, call.args[2], "states", lead)))
        labels = [[f"{self.label_of(call)}#candidate{k}" for k in range(a.shape[0])] for call, _, a, _ in runs]
        try:
            for (call, _, _, _), names in zip(runs, labels):
                for name in names:
                    self.kv.fork(call.request, name, self.label_of(call))
            current = [[z] * a.shape[0] for _, z, a, _ in runs]
            for h in range(max(a.shape[1] for _, _, a, _ in runs)):
                items, where = [], []
                for i, ((call, _, a, s), names) in enumerate(zip(runs, labels)):
                    if h < a.shape[1]:
                        items += [(call.request, name, current[i][k], a[k, h], s[k, h]) for k, name in enumerate(names)]
                        where += [(i, k) for k in range(len(names))]
                for (i, k), nxt in zip(where, self.advance(items)):
                    current[i][k] = nxt
        finally:
            for (call, _, _, _), names in zip(runs, labels):
                for name in names:
                    self.kv.drop(call.request, name)
        return [torch.stack(frames) for frames in current]  # each [K, HW, D]

    def counters(self) -> dict[str, int]:
        return {**self.kv.counters(), "requests": len({r for r, _ in self.kv.seqs}), **self.stats}

