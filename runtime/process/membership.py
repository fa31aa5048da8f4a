"""The messages between the head and each host's agent (joins, heartbeats, deaths), and who is alive.

They travel on their own socket pair (the head's ROUTER on `[transport] port + 2`, one DEALER per
agent), as msgspec structs: no pickle, nothing but these types is accepted. `Liveness` is the
detector, a plain state machine over a clock the caller passes in, so the rules are tested under
a fake clock (tests/runtime/test_membership.py):

- a peer is alive while its last message is younger than `timeout`;
- it is declared down once, at the first check past that; nothing it says afterwards revives it
  (a host that comes back after a freeze has been fenced: the head answers it `Fenced`, and its
  agent, which missed the head's beats for as long, has already stopped its workers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
from msgspec import Struct

from wgc.plan.model import Plan

HEARTBEAT_S = 0.25  # how often each side beats
DEFAULT_TIMEOUT_S = 3.0  # silence after which a peer is down (12 missed beats)


def fence_after(timeout: float) -> float:
    """How long a host waits without the head's beats before it stops itself: longer than the head
    waits for it, so that in a partition the head declares the host down first and the requests'
    errors name the host, not a connection its fenced workers tore down (Gloo's pairs on loopback
    may leave from 127.0.0.1, which a partition of the host's own address does not cut)."""
    return timeout + max(1.0, 0.5 * timeout)


class Join(Struct, tag="join", frozen=True):
    node_rank: int
    host: str
    plan_sha256: str  # the plan body's hash: every host must run the same plan
    version: str  # wgc's version: and the same wgc
    pid: int


class Welcome(Struct, tag="welcome", frozen=True):
    generation: int  # the head's run: an agent's later messages carry it
    timeout: float  # the head's silence threshold, which the agent uses for the head too


class Refused(Struct, tag="refused", frozen=True):
    reason: str  # one line naming the host


class Beat(Struct, tag="beat", frozen=True):
    generation: int
    node_rank: int = -1  # the sender's node rank; -1 from the head


class RankDown(Struct, tag="rank_down", frozen=True):
    generation: int
    node_rank: int
    rank: int
    reason: str  # "killed by SIGKILL", "exited with code 3: ..." (supervisor.exit_reason)


class Fenced(Struct, tag="fenced", frozen=True):
    reason: str  # why the head no longer accepts this host


class Stop(Struct, tag="stop", frozen=True):
    """The head is shutting down in order: stop the workers and exit."""


MemberMessage = Join | Welcome | Refused | Beat | RankDown | Fenced | Stop

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(MemberMessage)


def encode(msg: MemberMessage) -> bytes:
    return _encoder.encode(msg)


def decode(data: bytes) -> MemberMessage | None:
    """The message, or None for bytes that are not one (never an exception from a stranger's packet)."""
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def plan_sha256(plan: Plan) -> str:
    """The plan body's hash, as plan.bin's header records it (the same bytes encode_plan writes)."""
    import hashlib

    return hashlib.sha256(msgspec.msgpack.Encoder(order="deterministic").encode(plan)).hexdigest()


def join_problem(join: Join, n_hosts: int, host_names: list[str], plan_sha256: str, version: str) -> str | None:
    """Why the head refuses this join, in one line naming the host; None to accept it."""
    if not 0 < join.node_rank < n_hosts:
        return (f"node rank {join.node_rank} ({join.host}) is not a host of this plan: its hosts are node ranks "
                f"1..{n_hosts - 1} (0 is the head)")
    name = host_names[join.node_rank]
    if join.host != name:
        return f"node rank {join.node_rank} is host {name} in the head's plan, not {join.host}"
    if join.version != version:
        return f"host {name} runs wgc {join.version}, the head runs wgc {version}: install the same version"
    if join.plan_sha256 != plan_sha256:
        return (f"host {name} has a different plan (body sha256 {join.plan_sha256[:12]}, the head's "
                f"{plan_sha256[:12]}): copy the head's plan file to it")
    return None


@dataclass
class Liveness:
    """Who has been heard from lately: `heard(peer, now)`, then `expired(now)` names the peers gone
    silent past `timeout`, each once."""

    timeout: float
    last: dict[int, float] = field(default_factory=dict)
    down: set[int] = field(default_factory=set)

    def heard(self, peer: int, now: float) -> bool:
        """False for a peer already declared down (its message is to be ignored)."""
        if peer in self.down:
            return False
        self.last[peer] = now
        return True

    def expired(self, now: float) -> list[tuple[int, float]]:
        gone = [(p, now - t) for p, t in self.last.items() if p not in self.down and now - t > self.timeout]
        for p, _ in gone:
            self.down.add(p)
        return gone

    def silent_for(self, peer: int, now: float) -> float:
        return now - self.last.get(peer, now)
