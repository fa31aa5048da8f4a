"""The head's side of membership: which hosts have joined, which are alive, on the asyncio loop.

One ROUTER socket on the head's address (`[transport] port + 2`). Each other host's agent joins
over it, beats every HEARTBEAT_S and reports a worker's death the moment its pidfd fires; the head
beats back to every joined host. A host silent for `timeout` seconds is declared down: its ranks go
down with a reason naming the host (the requests in flight fail, `/health` says so), and whatever
it sends later is answered `Fenced`. Joins are checked (same plan, same wgc; membership.py).

The detector is the agent's heartbeat, never a worker's: a worker inside a long RUN (a prefill, a
diffusion step) answers nothing for seconds, its agent beats on.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import zmq
from wgc.runtime.process import membership as mb
from wgc.runtime.process.endpoints import ports, tcp

from wgc.plan.model import Plan

log = logging.getLogger("wgc.runtime")
TICK_S = 0.05  # how often the head reads membership messages (a death is reported within this)


@dataclass
class Member:
    node_rank: int
    identity: bytes
    pid: int


class Members:
    """`on_rank_down(rank, why)` for a reported death or a host gone silent; `on_join(node_rank)`."""

    def __init__(self, plan: Plan, plan_sha256: str, version: str, timeout: float,
                 on_rank_down: Callable[[int, str], None], on_join: Callable[[int], None]) -> None:
        self.plan = plan
        self.plan_sha256 = plan_sha256
        self.version = version
        self.timeout = timeout
        self.generation = int.from_bytes(os.urandom(4), "big") or 1
        self.on_rank_down = on_rank_down
        self.on_join = on_join
        self.joined: dict[int, Member] = {}
        self.refused: list[str] = []  # every refusal, as the head logged it
        self.liveness = mb.Liveness(timeout)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        head = plan.hosts[0]
        endpoint = tcp(head.address, ports(plan).membership)
        try:
            self.sock.bind(endpoint)
        except zmq.ZMQError as err:
            self.ctx.destroy(linger=0)
            raise OSError(f"cannot listen on {endpoint}: {err.strerror}") from None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._tick(), name="wgc-members")]

    def missing(self) -> list[int]:
        return [k for k in range(1, len(self.plan.hosts)) if k not in self.joined]

    def describe_missing(self) -> str:
        gone = [self.plan.hosts[k] for k in self.missing()]
        if not gone:
            return ""
        names = ", ".join(f"{h.name} ({h.address})" for h in gone)
        return f"host {names} has not joined" if len(gone) == 1 else f"hosts {names} have not joined"

    def _send(self, identity: bytes, msg: mb.MemberMessage) -> None:
        try:
            self.sock.send_multipart([identity, mb.encode(msg)], zmq.NOBLOCK)
        except zmq.ZMQError:  # a peer that went away: its silence is the detector's business
            pass

    def _handle(self, identity: bytes, msg: mb.MemberMessage | None, now: float) -> None:
        if isinstance(msg, mb.Join):
            self._join(identity, msg, now)
            return
        if not isinstance(msg, mb.Beat | mb.RankDown) or msg.generation != self.generation:
            return  # a stranger, or a host of an earlier run of the head
        member = self.joined.get(msg.node_rank)
        if member is None or member.identity != identity:
            return
        if not self.liveness.heard(msg.node_rank, now):
            self._send(identity, mb.Fenced(f"host {self._name(msg.node_rank)} was declared down"))
            return
        if isinstance(msg, mb.RankDown) and msg.rank in self.plan.hosts[msg.node_rank].ranks:
            self.on_rank_down(msg.rank, f"host {self._name(msg.node_rank)}: {msg.reason}")

    def _join(self, identity: bytes, join: mb.Join, now: float) -> None:
        names = [h.name for h in self.plan.hosts]
        problem = mb.join_problem(join, len(names), names, self.plan_sha256, self.version)
        known = self.joined.get(join.node_rank)
        if problem is None and join.node_rank in self.liveness.down:
            problem = f"host {self._name(join.node_rank)} was declared down: restart the head to bring it back"
        elif problem is None and known is not None and known.pid != join.pid:
            problem = f"host {self._name(join.node_rank)} has joined already (agent pid {known.pid})"
        if problem is not None:
            if problem not in self.refused:
                self.refused.append(problem)
                log.warning("wgc: refused a host: %s", problem)
            self._send(identity, mb.Refused(problem))
            return
        self._send(identity, mb.Welcome(self.generation, self.timeout))
        if known is None:  # its first join (the agent repeats its join until it hears the welcome)
            self.joined[join.node_rank] = Member(join.node_rank, identity, join.pid)
            self.liveness.heard(join.node_rank, now)
            self.on_join(join.node_rank)

    def _name(self, node_rank: int) -> str:
        h = self.plan.hosts[node_rank]
        return f"{h.name} ({h.address})"

    def _drain(self, now: float) -> None:
        """Handle every message already here."""
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2:
                continue
            try:
                self._handle(frames[0], mb.decode(frames[1]), now)
            except Exception:  # one bad message must not stop membership
                log.exception("wgc membership: a message could not be handled")

    async def _tick(self) -> None:
        """Every TICK_S: read what came; every HEARTBEAT_S also beat and look for silent hosts. (A plain
        socket read on a timer: an asyncio socket that is also written to can miss its wake-ups.)"""
        loop = asyncio.get_running_loop()
        next_beat = loop.time()
        while True:
            await asyncio.sleep(TICK_S)
            now = loop.time()
            self._drain(now)  # first: after this loop was held up, the hosts' beats are queued, not missing
            if now < next_beat:
                continue
            next_beat = now + mb.HEARTBEAT_S
            for k, member in self.joined.items():
                if k not in self.liveness.down:
                    self._send(member.identity, mb.Beat(self.generation))
            for k, silent in self.liveness.expired(now):
                why = f"host {self._name(k)} is down: no heartbeat for {silent:.1f} s"
                log.warning("wgc: %s", why)
                for rank in self.plan.hosts[k].ranks:
                    self.on_rank_down(rank, why)

    async def close(self) -> None:
        """Stop every joined host (its agent stops its workers and exits), then close."""
        for k, member in self.joined.items():
            if k not in self.liveness.down:
                self._send(member.identity, mb.Stop())
        await asyncio.sleep(0.05)  # let the Stops leave before the socket closes
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.sock.close(linger=0)
        self.ctx.destroy(linger=0)
