"""Starts one worker process per rank, waits until each reports ready (components loaded, CUDA graphs
captured: runtime/worker/startup.py), watches them, stops them.

Workers are plain subprocesses (`python -P -m wgc.runtime.process.worker_main`)
with string arguments: nothing is pickled. Their import path excludes the
working directory, and they import only component modules under the allowed
prefixes (modules.py). Each one's standard input is a pipe
from this process, so a worker whose parent dies sees end of file and exits.
A worker's exit is noticed through a pidfd on the event loop (a 50 ms poll
where pidfds are missing); an unexpected exit is reported once, with the exit
status and the reason the worker wrote.

Stopping: Shutdown to every worker and its pipe closed, a grace period, then
SIGKILL for any still running; every process is reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wgc.runtime.process.endpoints import Endpoints
from wgc.runtime.process.errors import StartError
from wgc.runtime.process.modules import worker_command, worker_env

OnDown = Callable[[int, str], None]


@dataclass
class RankProcess:
    rank: int
    proc: subprocess.Popen[bytes]
    error_file: Path
    exited: asyncio.Future[int]
    ready: bool = False
    down: str = ""  # why the process is gone, once it is
    watch: list[Callable[[], None]] = field(default_factory=list)  # undoes the exit watch

    @property
    def pid(self) -> int:
        return self.proc.pid


def exit_reason(code: int, error_file: Path) -> str:
    if code < 0:
        try:
            why = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            why = f"killed by signal {-code}"
    else:
        why = f"exited with code {code}"
    with contextlib.suppress(OSError, UnicodeDecodeError):
        line = error_file.read_text(encoding="utf-8").strip()
        if line:
            why += f": {line}"
    return why


class Supervisor:
    """The workers of one host (its agent's half: runtime/process/agent.py on the others), and the wait
    until every rank of the plan is ready, wherever it runs (`expected`; default: the ranks started here)."""

    def __init__(self, plan_path: str, endpoints: Endpoints, run_dir: str, fake: bool, on_down: OnDown,
                 allow_modules: Sequence[str] = (), local: Sequence[int] | None = None,
                 expected: Sequence[int] | None = None, env: Mapping[str, str] | None = None) -> None:
        self.plan_path = plan_path
        self.allow_modules = tuple(allow_modules)  # module prefixes the workers may import components from
        self.endpoints = endpoints
        self.run_dir = Path(run_dir)
        self.fake = fake
        self.on_down = on_down
        self.local = None if local is None else tuple(local)  # the ranks this host runs (None: every rank)
        self.expected = None if expected is None else set(expected)
        self.env = dict(env or {})  # the host's environment from the placement ([[cluster.hosts]] env)
        self.ranks: list[RankProcess] = []
        self.ready: set[int] = set()
        self.absent: Callable[[], str] | None = None  # what the wait is missing besides ranks (hosts not joined)
        self.stopping = False
        self._all_ready: asyncio.Future[None] | None = None
        self._last_progress: tuple[float, int, str] = (0.0, -1, "")  # loop time, rank, line

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._all_ready = loop.create_future()
        ranks = range(len(self.endpoints.ranks)) if self.local is None else self.local
        for rank in ranks:
            error_file = self.run_dir / f"rank{rank}.error"
            args = ["--plan", self.plan_path, "--rank", str(rank), "--coordinator", self.endpoints.coordinator,
                    "--endpoints", ",".join(self.endpoints.ranks), "--error-file", str(error_file)]
            if self.endpoints.rank_binds:
                args += ["--bind", ",".join(self.endpoints.binds_of_rank(rank))]
            args += ["--fake"] if self.fake else [a for p in self.allow_modules for a in ("--allow-module-prefix", p)]
            # stdout goes to our stderr: a worker's prints must never mix into our own output
            proc = subprocess.Popen(worker_command(args), stdin=subprocess.PIPE, stdout=2, close_fds=True,
                                    env={**worker_env(os.environ), **self.env})
            rp = RankProcess(rank, proc, error_file, loop.create_future())
            self.ranks.append(rp)
            self._watch(rp, loop)

    def waiting_for(self) -> set[int]:
        return (self.expected if self.expected is not None else {r.rank for r in self.ranks}) - self.ready

    def started_elsewhere(self) -> None:
        """The start-up is awaited elsewhere (on the head): from now on every exit is a death to report."""
        if self._all_ready is not None and not self._all_ready.done():
            self._all_ready.set_result(None)

    def fail_start(self, error: StartError) -> bool:
        """Abandon the start with `error`; False when start-up is over (ready, or failed already)."""
        if self._all_ready is None or self._all_ready.done():
            return False
        self._all_ready.set_exception(error)
        return True

    def _watch(self, rp: RankProcess, loop: asyncio.AbstractEventLoop) -> None:
        try:
            fd = os.pidfd_open(rp.pid)
        except (AttributeError, OSError):
            task = loop.create_task(self._poll_exit(rp))
            rp.watch.append(task.cancel)
            return
        loop.add_reader(fd, self._exited, rp)
        rp.watch.append(lambda: (loop.remove_reader(fd), os.close(fd)))

    async def _poll_exit(self, rp: RankProcess) -> None:
        while rp.proc.poll() is None:
            await asyncio.sleep(0.05)
        self._exited(rp)

    def _exited(self, rp: RankProcess) -> None:
        for undo in rp.watch:
            undo()
        rp.watch.clear()
        code = rp.proc.wait()
        rp.down = exit_reason(code, rp.error_file)
        if not rp.exited.done():
            rp.exited.set_result(code)
        if self.stopping:
            return
        if self.fail_start(StartError(f"rank {rp.rank} could not start: {rp.down}")):
            return
        self.on_down(rp.rank, rp.down)

    def mark_ready(self, rank: int) -> None:
        for rp in self.ranks:
            if rp.rank == rank:
                rp.ready = True
        self.ready.add(rank)
        if not self.waiting_for() and self._all_ready is not None and not self._all_ready.done():
            self._all_ready.set_result(None)

    def saw_progress(self, rank: int, line: str) -> None:
        """A start-up line from a rank: it is alive and working (loading weights, capturing graphs)."""
        self._last_progress = (asyncio.get_running_loop().time(), rank, line)

    async def wait_ready(self, timeout: float) -> None:
        """Until every rank is ready, or until `timeout` seconds pass with no start-up progress from any
        rank: a large model's weights and graphs may take minutes, a rank stuck saying nothing does not."""
        assert self._all_ready is not None, "start() first"
        loop = asyncio.get_running_loop()
        self._last_progress = (loop.time(), -1, "")
        while not self._all_ready.done():
            quiet_until = self._last_progress[0] + timeout
            if loop.time() >= quiet_until:
                late = ", ".join(str(r) for r in sorted(self.waiting_for()))
                _, rank, line = self._last_progress
                last = f"; the last start-up line was rank {rank}'s: {line}" if line else "; none said anything"
                absent = self.absent() if self.absent is not None else ""
                absent = f"; {absent}" if absent else ""
                raise StartError(f"rank {late} did not report ready: no start-up progress for {timeout:g} s"
                                 f"{absent}{last}")
            await asyncio.wait([self._all_ready], timeout=quiet_until - loop.time())
        self._all_ready.result()

    async def stop(self, shutdown: Callable[[int], None], grace: float = 5.0) -> None:
        """Shutdown to each live worker and its pipe closed; SIGKILL after `grace` seconds; all reaped."""
        self.stopping = True
        if self._all_ready is not None:
            if self._all_ready.done() and not self._all_ready.cancelled():
                self._all_ready.exception()  # retrieved: a start failure was already raised or is moot
            else:
                self._all_ready.cancel()
        live = [r for r in self.ranks if not r.exited.done()]
        for rp in live:
            shutdown(rp.rank)
            with contextlib.suppress(OSError):
                if rp.proc.stdin is not None:
                    rp.proc.stdin.close()
        if live:
            await asyncio.wait([r.exited for r in live], timeout=grace)
        for rp in self.ranks:
            if rp.proc.poll() is None:
                rp.proc.kill()
            rp.proc.wait()
            for undo in rp.watch:
                undo()
            rp.watch.clear()
            with contextlib.suppress(OSError):
                if rp.proc.stdin is not None:
                    rp.proc.stdin.close()
