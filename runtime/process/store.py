"""The c10d rendezvous store, hosted by the head on its own address only.

torch.distributed's TCPStore master listens on every interface even when given an address; a
socket bound to the head's address first, handed over as `master_listen_fd` (with the non-libuv
server, which takes one), keeps it on that address (docs/architecture.md, Multi-node). Workers reach
it at `[transport] port` on the head's address to build their process groups
(runtime/worker/tp_group.py). The store exists only for plans with a process group (tp > 1).
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

from wgc.plan.model import Plan
from wgc.plan.ports import ports, tp_groups


def store_address(plan: Plan) -> tuple[str, int]:
    """Where the store listens: the head's address (127.0.0.1 for a plan without hosts), port P."""
    host = plan.hosts[0].address if plan.hosts else "127.0.0.1"
    return host, ports(plan).store


def needs_store(plan: Plan) -> bool:
    """A process group to build: a TP copy, or tensors between hosts over Gloo or NCCL (edge_plan.py)."""
    from wgc.runtime.process.edge_plan import uses_edges  # edge_plan → endpoints → store: imported late

    return bool(tp_groups(plan)) or uses_edges(plan)


def bound_master(host: str, port: int, timeout: timedelta = timedelta(seconds=300)) -> Any:
    """A master TCPStore listening on `host` only (not every interface): OSError naming the address
    when it cannot be bound."""
    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise OSError(f"cannot host the rendezvous store on {host}:{port}: {err.strerror or err}") from None
    try:
        store = dist.TCPStore(host, port, None, True, timeout, wait_for_workers=False,
                              master_listen_fd=sock.fileno(), use_libuv=False)
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store owns the listening socket now, and closes it
    return store


class HeadStore:
    """The plan's master TCPStore, alive as long as this object (`close` ends it)."""

    def __init__(self, plan: Plan) -> None:
        self.store: Any = bound_master(*store_address(plan))

    def close(self) -> None:
        self.store = None
