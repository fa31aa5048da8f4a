"""Where every process of one runtime listens: a PULL socket per rank and one for the coordinator.

One host: IPC (Unix domain) sockets in a directory made for this runtime with mode 0700,
reachable from this machine only, and only by this user.

Several hosts (`[[cluster.hosts]]` with more than one entry): every listener also binds TCP on its
own host's address, never all interfaces, on a port derived from the placement's `[transport]
port` P, so a firewall rule can be written from the placement alone:

    P       the c10d rendezvous store (runtime/process/store.py), on the head's address
    P + 1   the coordinator's PULL socket, on the head's address
    P + 2   the membership socket (joins, heartbeats, rank deaths: runtime/process/members.py)
    P + 10 + r   rank r's PULL socket, on its host's address

A process connects over IPC to a listener on its own host and over TCP to one on another host,
naming its own address as the source (`tcp://SRC:0;DST:PORT`), so every control packet carries
its host's address (what a partition rule matches). Gloo opens its own ephemeral ports between
the ranks of a process group (docs/architecture.md, Multi-node).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from wgc.plan.model import HostSpec, Plan
from wgc.plan.ports import Ports, ports

_MAX_PATH = 100  # a Unix socket path must fit in sockaddr_un (108 bytes on Linux)
__all__ = ["Endpoints", "Ports", "host_of", "make_run_directory", "multi_host", "ports", "where"]


def multi_host(plan: Plan) -> bool:
    return len(plan.hosts) > 1


def host_index(plan: Plan, rank: int) -> int:
    """The node rank of the host that holds `rank` (0 when the plan names no hosts)."""
    return next((k for k, h in enumerate(plan.hosts) if rank in h.ranks), 0)


def host_of(plan: Plan, rank: int) -> HostSpec:
    return plan.hosts[host_index(plan, rank)] if plan.hosts else HostSpec("localhost", "127.0.0.1", [rank])


def where(plan: Plan, rank: int) -> str:
    """`rank 3 on node1 (127.0.0.3)` in a multi-host plan, `rank 3` on one host."""
    if not multi_host(plan):
        return f"rank {rank}"
    host = host_of(plan, rank)
    return f"rank {rank} on {host.name} ({host.address})"


def tcp(address: str, port: int) -> str:
    return f"tcp://[{address}]:{port}" if ":" in address else f"tcp://{address}:{port}"


def tcp_from(source: str, address: str, port: int) -> str:
    """A TCP connect endpoint that leaves from `source` (ZeroMQ's `tcp://SRC:0;DST:PORT`)."""
    src = f"[{source}]" if ":" in source else source
    return f"tcp://{src}:0;{tcp(address, port).removeprefix('tcp://')}"


@dataclass(frozen=True)
class Endpoints:
    coordinator: str  # where this process connects to reach the coordinator
    ranks: tuple[str, ...]  # where this process connects to reach each rank
    coordinator_binds: tuple[str, ...] = ()  # what the coordinator binds (empty: `coordinator`)
    rank_binds: tuple[tuple[str, ...], ...] = ()  # what each rank binds (empty: its `ranks` entry)

    @staticmethod
    def in_directory(directory: str, n_ranks: int) -> Endpoints:
        return Endpoints(f"ipc://{directory}/coordinator", tuple(f"ipc://{directory}/rank{r}" for r in range(n_ranks)))

    @staticmethod
    def for_host(plan: Plan, node_rank: int, directory: str) -> Endpoints:
        """The endpoints as the processes of host `node_rank` see them: IPC to their own host, TCP to
        the others; a single-host plan is `in_directory`."""
        n = len(plan.ranks)
        if not multi_host(plan):
            return Endpoints.in_directory(directory, n)
        p, me, head = ports(plan), plan.hosts[node_rank], plan.hosts[0]
        ipc = Endpoints.in_directory(directory, n)
        ranks = tuple(ipc.ranks[r] if r in me.ranks else tcp_from(me.address, host_of(plan, r).address, p.rank(r))
                      for r in range(n))
        coordinator = ipc.coordinator if node_rank == 0 else tcp_from(me.address, head.address, p.coordinator)
        binds = tuple((ipc.ranks[r], tcp(host_of(plan, r).address, p.rank(r))) for r in range(n))
        return Endpoints(coordinator, ranks, (ipc.coordinator, tcp(head.address, p.coordinator)), binds)

    def binds_of_rank(self, rank: int) -> tuple[str, ...]:
        return self.rank_binds[rank] if self.rank_binds else (self.ranks[rank],)

    def binds_of_coordinator(self) -> tuple[str, ...]:
        return self.coordinator_binds or (self.coordinator,)


def make_run_directory() -> str:
    """A fresh private directory for one runtime's sockets and files (the caller removes it)."""
    base = tempfile.gettempdir()
    if len(base) + len("/wgc-XXXXXXXX/coordinator") > _MAX_PATH:
        base = "/tmp"
    directory = tempfile.mkdtemp(prefix="wgc-", dir=base)
    os.chmod(directory, 0o700)
    return directory
