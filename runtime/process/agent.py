"""A host's agent: `wgc run PLAN --node-rank K --master-addr HEAD[:PORT] --headless` on every host but the head.

It joins the head (membership.py) and, once welcomed, starts this host's workers with the
supervisor the head itself uses (its ranks, its `env`, device indices local to the host), then:

- beats every HEARTBEAT_S, and reports a worker's death (`RankDown`) the moment its pidfd fires;
- watches the head's beats: silent a little past the head's threshold (`fence_after`), or
  `Fenced`, the agent stops its workers and exits 1 (self-fencing: no host outlives its head
  spinning on dead sockets);
- on the head's `Stop` (an orderly shutdown) or SIGINT/SIGTERM, stops its workers and exits.

Start order is free: the join is repeated every JOIN_EVERY_S until the head answers, for at most
`join_timeout` seconds. A refusal (another plan, another wgc) is one line naming this host.
The silence check runs before any message is read: after a freeze (SIGSTOP), the head's queued
beats must not make a stale host believe it is still a member.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass

import zmq
from wgc.runtime.process import membership as mb
from wgc.runtime.process.endpoints import Endpoints, make_run_directory, tcp_from
from wgc.runtime.process.errors import StartError
from wgc.runtime.process.supervisor import Supervisor

from wgc import __version__
from wgc.plan.model import Plan

JOIN_EVERY_S = 0.5
TICK_S = 0.05


def say(line: str) -> None:
    """One line on stderr: the agent's own output (its workers' lines go there too)."""
    sys.stderr.write(f"wgc: {line}\n")
    sys.stderr.flush()


class AgentExit(Exception):
    """The agent stops: `code` is the exit status, `line` what it says (one line)."""

    def __init__(self, code: int, line: str) -> None:
        super().__init__(line)
        self.code = code


@dataclass(frozen=True)
class AgentOptions:
    node_rank: int
    master_addr: str
    master_port: int  # the head's [transport] port; membership listens on port + 2
    fake: bool = False
    allow_modules: tuple[str, ...] = ()
    join_timeout: float = 120.0


class Agent:
    def __init__(self, plan: Plan, plan_path: str, options: AgentOptions) -> None:
        self.plan = plan
        self.plan_path = os.path.abspath(plan_path)
        self.opt = options
        self.host = plan.hosts[options.node_rank]
        self.ctx = zmq.Context()  # a plain socket read on a timer (members.py says why)
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IMMEDIATE, 1)  # nothing queued for a head that is not there yet
        self.sock.setsockopt(zmq.RECONNECT_IVL, 100)
        self.sock.connect(tcp_from(self.host.address, options.master_addr, options.master_port + 2))
        self.generation = 0
        self.timeout = mb.DEFAULT_TIMEOUT_S
        self.run_dir = ""
        self.supervisor: Supervisor | None = None

    def _send(self, msg: mb.MemberMessage) -> None:
        try:
            self.sock.send(mb.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            pass  # not connected (yet, or any more): the join repeats, the head's detector sees silence

    async def run(self) -> int:
        try:
            await self._join()
            self._start_workers()
            await self._serve()
        except AgentExit as done:
            if str(done):
                say(str(done))
            return done.code
        finally:
            await self.close()
        return 0

    async def _join(self) -> None:
        loop = asyncio.get_running_loop()
        join = mb.Join(self.opt.node_rank, self.host.name, mb.plan_sha256(self.plan), __version__, os.getpid())
        deadline = loop.time() + self.opt.join_timeout
        where = f"{self.opt.master_addr}:{self.opt.master_port + 2}"
        say(f"host {self.host.name} (node rank {self.opt.node_rank}) joining the head at {where} ...")
        while loop.time() < deadline:
            self._send(join)
            for msg in await self._receive(JOIN_EVERY_S):
                if isinstance(msg, mb.Refused):
                    raise AgentExit(1, f"the head refused host {self.host.name}: {msg.reason}")
                if isinstance(msg, mb.Welcome):
                    self.generation, self.timeout = msg.generation, mb.fence_after(msg.timeout)
                    say(f"host {self.host.name} joined; starting ranks {', '.join(map(str, self.host.ranks))}")
                    return
        raise AgentExit(1, f"host {self.host.name}: the head at {where} did not answer in "
                           f"{self.opt.join_timeout:g} s")

    def _start_workers(self) -> None:
        self.run_dir = make_run_directory()
        endpoints = Endpoints.for_host(self.plan, self.opt.node_rank, self.run_dir)
        sup = Supervisor(self.plan_path, endpoints, self.run_dir, self.opt.fake, self._rank_down,
                         self.opt.allow_modules, local=self.host.ranks, env=self.host.env)
        self.supervisor = sup
        sup.start()
        sup.started_elsewhere()

    def _rank_down(self, rank: int, why: str) -> None:
        self._send(mb.RankDown(self.generation, self.opt.node_rank, rank, why))

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        last_head = last_beat = loop.time()
        while True:
            messages = await self._receive(TICK_S)
            now = loop.time()
            if now - last_head > self.timeout:  # first: after a freeze, queued beats are stale
                raise AgentExit(1, f"host {self.host.name}: no heartbeat from the head at {self.opt.master_addr} "
                                   f"for {now - last_head:.1f} s: stopped this host's workers")
            for msg in messages:
                if isinstance(msg, mb.Beat) and msg.generation == self.generation:
                    last_head = now
                elif isinstance(msg, mb.Stop):
                    raise AgentExit(0, "")
                elif isinstance(msg, mb.Fenced):
                    raise AgentExit(1, f"host {self.host.name} was fenced by the head: {msg.reason}")
            if now - last_beat >= mb.HEARTBEAT_S * 0.8:
                self._send(mb.Beat(self.generation, self.opt.node_rank))
                last_beat = now

    async def _receive(self, wait: float) -> list[mb.MemberMessage]:
        """After `wait` seconds (the loop runs meanwhile: worker deaths), every message that came."""
        await asyncio.sleep(wait)
        out = []
        while True:
            try:
                msg = mb.decode(self.sock.recv(zmq.NOBLOCK))
            except zmq.Again:
                return out
            if msg is not None:
                out.append(msg)

    async def close(self) -> None:
        import shutil

        if self.supervisor is not None:
            await self.supervisor.stop(lambda _rank: None, grace=2.0)  # workers end on their closed pipe
        self.sock.close(linger=0)
        self.ctx.destroy(linger=0)
        if self.run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)


def check_node(plan: Plan, node_rank: int, nnodes: int | None) -> None:
    """StartError (one line) for a node rank or node count that does not fit the plan."""
    n = len(plan.hosts)
    if n < 2:
        raise StartError("this plan has one host: run it with `wgc run PLAN`, not --headless")
    if nnodes is not None and nnodes != n:
        raise StartError(f"--nnodes {nnodes}: the plan has {n} hosts ({', '.join(h.name for h in plan.hosts)})")
    if not 0 < node_rank < n:
        raise StartError(f"--node-rank {node_rank}: the plan's other hosts are node ranks 1..{n - 1} "
                         f"({', '.join(f'{k} {h.name}' for k, h in enumerate(plan.hosts) if k)}); 0 is the head")
