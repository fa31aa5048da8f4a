"""The runtime's Python API (what the HTTP layer uses): start, submit, stream events, cancel, health.

    runtime = await Runtime.start("bagel.plan", fake=True)    # a worker process per rank
    handle = runtime.submit(params={"steps": 8}, parts=[{"kind": "text", "payload": "a cat"}],
                            outputs=["image"])                  # RequestError for a bad request
    async for event in handle.events():                        # OutputEvent..., then Done/Error/Cancelled
        ...
    await handle.cancel()                                      # returns once every rank has freed it
    report = await runtime.health()                            # each rank: up/down, counters, CUDA graphs
    await runtime.close()                                      # no worker process left

Everything runs on the caller's asyncio event loop (see process/coordinator.py for why).

Start-up: each worker loads its components, captures the CUDA graphs the plan lists for its rank
(runtime/worker/startup.py), sending one Progress line per step, then its Ready; `start` returns
once every rank is ready (`ready_at`). The lines are kept in `startup_log` (and passed to
`on_progress`), each rank's capture results in `captures` and in every health report.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wgc.runtime.coordinator.core import Event
from wgc.runtime.coordinator.request import RequestError, RequestSpec
from wgc.runtime.engines.capture_report import EntryCapture
from wgc.runtime.process.coordinator import Coordinator
from wgc.runtime.process.endpoints import Endpoints, make_run_directory, multi_host, where
from wgc.runtime.process.errors import RankDownError, StartError
from wgc.runtime.process.events import CancelledEvent, DoneEvent, ErrorEvent, OutputEvent, RequestEvent
from wgc.runtime.process.handle import CancelResult, RequestFailed, RequestHandle
from wgc.runtime.process.members import Members
from wgc.runtime.process.membership import plan_sha256
from wgc.runtime.process.modules import ModuleRefused, allowed_prefixes, check_components
from wgc.runtime.process.store import HeadStore, needs_store
from wgc.runtime.process.supervisor import Supervisor
from wgc.runtime.protocol.messages import Data, Part, Progress, Ready

from wgc import __version__
from wgc.plan.file import encode_plan, load_plan
from wgc.plan.model import Plan
from wgc.settings import host_timeout

__all__ = [
    "CancelResult", "CancelledEvent", "DoneEvent", "EntryCapture", "ErrorEvent", "HealthReport", "ModuleRefused",
    "OutputEvent", "RankDownError", "RankHealth", "RequestError", "RequestEvent", "RequestFailed", "RequestHandle", "Runtime",
    "StartError", "StartupLine", "request_spec",
]

log = logging.getLogger("wgc.runtime")


@dataclass(frozen=True)
class RankHealth:
    rank: int
    pid: int
    state: str  # "up", "down" (its process is gone), "unresponsive" (no answer in time)
    reason: str  # why it is down
    counters: dict[str, int]  # the executor's counters: instances, mailbox, stream_ends, component.* ...
    captures: tuple[EntryCapture, ...] = ()  # its CUDA graphs, per CaptureSpec: captured, failed, or eager and why

    @property
    def alive(self) -> bool:
        return self.state != "down"


@dataclass(frozen=True)
class HealthReport:
    ok: bool
    ranks: tuple[RankHealth, ...]
    requests_in_flight: int


@dataclass(frozen=True)
class StartupLine:
    t: float  # time.time() when the coordinator received it
    rank: int
    line: str  # "" when it only moves its phase on
    phase: str = ""  # load, warm or capture (runtime/worker/startup.py's Step); "" outside the count
    done: int = 0  # of `total` in the phase, on this rank
    total: int = 0


class Runtime:
    """A plan served by a coordinator (this process, on the event loop) and one worker process per rank."""

    def __init__(self, plan: Plan, plan_path: str, run_dir: str, fake: bool,
                 on_progress: Callable[[StartupLine], None] | None = None, allow_modules: Sequence[str] = ()) -> None:
        self.plan = plan
        self.fake = fake
        self._run_dir = run_dir
        self._handles: dict[int, RequestHandle] = {}
        self._closed = False
        self._on_line = on_progress
        self.startup_log: list[StartupLine] = []  # every rank's start-up lines, as they came
        self.captures: dict[int, tuple[EntryCapture, ...]] = {}  # rank → its CUDA graphs, from its Ready
        self.ready_at: float | None = None  # time.time() once every rank reported ready
        self._pids: dict[int, int] = {}  # every rank's pid, from its Ready (those on other hosts too)
        endpoints = Endpoints.for_host(plan, 0, run_dir)
        self._coordinator = Coordinator(plan, endpoints, fake, self._on_event, self._on_ready, self._on_progress)
        head = plan.hosts[0] if multi_host(plan) else None  # the head runs host 0's ranks, its agents the others'
        self._supervisor = Supervisor(plan_path, endpoints, run_dir, fake, self._rank_down, allow_modules,
                                      local=head.ranks if head else None, expected=range(len(plan.ranks)),
                                      env=head.env if head else None)
        self._members: Members | None = None
        self._store: HeadStore | None = None
        if head is not None:
            self._members = Members(plan, plan_sha256(plan), __version__, host_timeout(), self._rank_down,
                                    self._joined)
            self._supervisor.absent = self._members.describe_missing

    @classmethod
    async def start(cls, plan: str | os.PathLike[str] | Plan, fake: bool = False, ready_timeout: float = 60.0,
                    on_progress: Callable[[StartupLine], None] | None = None,
                    allow_modules: Sequence[str] | None = None) -> Runtime:
        """Load the plan (PlanFileError for a bad file), start every rank, wait until all are ready:
        components loaded and CUDA graphs captured (StartError naming the rank otherwise).
        `ready_timeout` bounds a silence, not the whole start-up: it runs from the last start-up line
        any rank sent. `on_progress` gets each start-up line of every rank as it comes, with where the rank
        stands in its phase (wgc/cli/progress.py draws bars of them).
        `allow_modules`: the module prefixes component classes may come from (default: wgc.models and
        the placement's [serve] allow_modules); a class outside them is ModuleRefused before any
        process starts or anything is imported (process/modules.py)."""
        loaded = plan if isinstance(plan, Plan) else load_plan(plan)[1]
        prefixes = allowed_prefixes(loaded, allow_modules)
        if not fake:
            check_components(loaded, prefixes)
        run_dir = make_run_directory()
        try:
            plan_path = Path(run_dir) / "plan.bin"  # every process runs exactly these bytes
            plan_path.write_bytes(encode_plan(loaded, "", ""))
            runtime = cls(loaded, str(plan_path), run_dir, fake, on_progress, prefixes)
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        try:
            runtime._coordinator.start()
            if runtime._members is not None:
                runtime._members.start()
            if needs_store(loaded) and not fake:  # the rendezvous of the TP groups, on the head's address
                runtime._store = HeadStore(loaded)
            runtime._supervisor.start()
            await runtime._supervisor.wait_ready(ready_timeout)
            runtime.ready_at = time.time()
        except BaseException:
            await runtime.close()
            raise
        return runtime

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pids(self) -> dict[int, int]:
        return {**self._pids, **{r.rank: r.pid for r in self._supervisor.ranks}}

    def _rank_down(self, rank: int, why: str) -> None:
        """A rank's process is gone (here, or reported by its host's agent), or its host went silent."""
        if rank in self._coordinator.down:
            return
        if self._supervisor.fail_start(StartError(f"{where(self.plan, rank)} could not start: {why}")):
            return
        self._coordinator.rank_down(rank, why)

    def _joined(self, node_rank: int) -> None:
        host = self.plan.hosts[node_rank]
        line = f"host {host.name} ({host.address}) joined as node rank {node_rank}"
        self._supervisor.saw_progress(-1, line)  # a join is start-up progress: the silence clock restarts
        log.info("wgc: %s", line)

    # ---- requests ----------------------------------------------------------------------------

    def submit(self, params: Mapping[str, Any] | None = None, task: str = "", parts: list[Any] | None = None,
               inputs: Mapping[str, Any] | None = None, outputs: list[str] | None = None,
               input_modalities: list[str] | None = None, think: bool = False) -> RequestHandle:
        """Admit a request; RequestError (naming the field) when the plan cannot serve it."""
        return self.submit_spec(request_spec(params, task, parts, inputs, outputs, input_modalities, think))

    def submit_spec(self, spec: RequestSpec) -> RequestHandle:
        if self._closed:
            raise RuntimeError("the runtime is closed")
        if self._coordinator.down:
            rank, why = min(self._coordinator.down.items())
            raise RankDownError(f"rank {rank} is down ({why}): restart the runtime")
        self._check_sendable(spec)
        submitted = time.perf_counter()
        request = self._coordinator.core.submit(spec)
        self._handles[request] = RequestHandle(self._coordinator, request, submitted)
        self._coordinator.flush()
        return self._handles[request]

    def _check_sendable(self, spec: RequestSpec) -> None:
        values = [(f"input `{k}`", v) for k, v in spec.inputs.items()]
        values += [(f"part {i}", p.payload) for i, p in enumerate(spec.parts)]
        for what, value in values:
            try:
                self._coordinator.codec.encode(Data(0, "", "", value))
            except (TypeError, ValueError, OverflowError) as err:
                raise RequestError(f"{what}: {err}") from None

    def _on_event(self, e: Event) -> None:
        handle = self._handles.get(e.request)
        if handle is None:
            return
        handle.deliver(e)
        if handle.final is not None:
            del self._handles[e.request]

    def _on_ready(self, msg: Ready) -> None:
        self.captures[msg.rank] = tuple(msg.captures)
        self._pids[msg.rank] = msg.pid
        self._supervisor.mark_ready(msg.rank)

    def _on_progress(self, msg: Progress) -> None:
        entry = StartupLine(time.time(), msg.rank, msg.line, msg.phase, msg.done, msg.total)
        if msg.line:
            self.startup_log.append(entry)
            self._supervisor.saw_progress(msg.rank, msg.line)
            if self._on_line is None:
                log.info("%s", msg.line)  # nobody shows it (`wgc run` does): the log has it
        if self._on_line is not None:
            self._on_line(entry)

    # ---- health and shutdown ---------------------------------------------------------------

    async def health(self, timeout: float = 5.0) -> HealthReport:
        """Every rank: up (with its counters), down (and why), or unresponsive within `timeout`; and
        each rank's CUDA graphs as its start-up captured them."""
        if self._closed:
            raise RuntimeError("the runtime is closed")
        loop = asyncio.get_running_loop()
        answers: dict[int, asyncio.Future[dict[str, int] | None]] = {}
        for rank in self._coordinator.alive():
            fut = answers[rank] = loop.create_future()
            self._coordinator.probes.ask(rank, lambda _r, c, f=fut: f.done() or f.set_result(c))
        if answers:
            await asyncio.wait(list(answers.values()), timeout=timeout)
        ranks = []
        pids, local = self.pids, {rp.rank: rp for rp in self._supervisor.ranks}
        for rank in range(len(self.plan.ranks)):
            fut = answers.get(rank)
            counters = fut.result() if fut is not None and fut.done() else None
            graphs, pid = self.captures.get(rank, ()), pids.get(rank, 0)
            if rank in self._coordinator.down or (fut is not None and fut.done() and counters is None):
                why = self._coordinator.down.get(rank, local[rank].down if rank in local else "")
                ranks.append(RankHealth(rank, pid, "down", why, {}, graphs))
            elif counters is None:
                ranks.append(RankHealth(rank, pid, "unresponsive", "", {}, graphs))
            else:
                ranks.append(RankHealth(rank, pid, "up", "", dict(counters), graphs))
        return HealthReport(all(r.state == "up" for r in ranks), tuple(ranks), len(self._coordinator.core.live))

    async def close(self, grace: float = 5.0) -> None:
        """Fail what is in flight, stop every worker (SIGKILL after `grace` s), release everything."""
        if self._closed:
            return
        self._closed = True
        for request in list(self._coordinator.core.live):
            self._coordinator.core.cancel(request, "the runtime is shutting down")
        self._coordinator.flush()
        try:
            if self._members is not None:
                await self._members.close()  # every other host stops its workers
            await self._supervisor.stop(self._coordinator.shutdown, grace)
        finally:
            await self._coordinator.close()
            if self._store is not None:
                self._store.close()
            shutil.rmtree(self._run_dir, ignore_errors=True)


def request_spec(params: Mapping[str, Any] | None = None, task: str = "", parts: list[Any] | None = None,
                 inputs: Mapping[str, Any] | None = None, outputs: list[str] | None = None,
                 input_modalities: list[str] | None = None, think: bool = False) -> RequestSpec:
    """A RequestSpec from plain values (JSON-shaped), checked; RequestError names the bad field."""
    if not isinstance(params or {}, Mapping) or not all(isinstance(k, str) for k in params or {}):
        raise RequestError("params must be an object of named values")
    if not isinstance(inputs or {}, Mapping) or not all(isinstance(k, str) for k in inputs or {}):
        raise RequestError("inputs must be an object of named values")
    if not isinstance(task, str):
        raise RequestError("task must be a string")
    if not isinstance(think, bool):
        raise RequestError("think must be true or false")
    out_list = [] if outputs is None else outputs  # none asked for: the plan's default, chosen on admission
    if not isinstance(out_list, list | tuple) or not all(isinstance(m, str) for m in out_list) or (
            outputs is not None and not out_list):
        raise RequestError("outputs must be a non-empty list of modalities (text, image, audio, ...)")
    if not isinstance(parts or [], list | tuple):
        raise RequestError("parts must be a list of {kind, payload} objects")
    checked_parts = [_part(i, p) for i, p in enumerate(parts or [])]
    if input_modalities is None:
        input_modalities = list(dict.fromkeys(p.kind for p in checked_parts))
    elif not isinstance(input_modalities, list | tuple) or not all(isinstance(m, str) for m in input_modalities):
        raise RequestError("input_modalities must be a list of modalities")
    return RequestSpec(dict(params or {}), task, checked_parts, dict(inputs or {}), list(input_modalities),
                       list(out_list), think)


def _part(index: int, part: Any) -> Part:
    if isinstance(part, Part):
        return part
    if isinstance(part, Mapping) and isinstance(part.get("kind"), str) and "payload" in part and len(part) == 2:
        return Part(part["kind"], part["payload"])
    raise RequestError(f"part {index} must be an object {{kind, payload}} with kind a string")
