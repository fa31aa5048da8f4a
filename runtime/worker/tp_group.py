"""A worker's tensor-parallel process groups, built at start-up before it reports Ready, never lazily.

For every TP copy the plan lists (wgc/plan/ports.py `tp_groups`) that holds this rank, one
torch.distributed process group of exactly its ranks, rendezvoused through the head's store
(runtime/process/store.py) under a prefix of its own: Gloo on CPU, its device bound to the rank's
host address (never a guessed hostname), NCCL on CUDA (that path is written but unverified: no GPU
was available to run it). There is no WORLD group: each group is built directly.

A component finds its group with `group_for(spec.name)`; `Gloo` wraps the group in the interface
models/layers/tensor_parallel.py uses. Group timeouts are long (a backstop, never the detector:
host liveness is the agents' heartbeats, runtime/process/members.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from wgc.runtime.process.endpoints import host_of
from wgc.runtime.process.store import store_address

from wgc.plan.model import Plan
from wgc.plan.ports import tp_groups

GROUP_TIMEOUT = timedelta(minutes=10)
_GROUPS: dict[str, Any] = {}  # component → this rank's group (one process builds each group once)


class Group:
    """One process group as models/layers/tensor_parallel.py's Group: rank, size, all_reduce, all_gather."""

    def __init__(self, pg: Any, rank: int, size: int, ranks: list[int]) -> None:
        self.pg, self.rank, self.size, self.ranks = pg, rank, size, ranks

    def all_reduce(self, t: Any) -> Any:
        self.pg.allreduce([t]).wait()
        return t

    def all_gather(self, t: Any) -> list[Any]:
        import torch

        out = [torch.empty_like(t) for _ in range(self.size)]
        self.pg.allgather([out], [t]).wait()
        return out


def group_for(component: str) -> Group | None:
    """This rank's group for `component`; None when the component is not tensor-parallel here."""
    return _GROUPS.get(component)


def build_groups(plan: Plan, rank: int, say: Callable[[str], None]) -> dict[str, Group]:
    """Every TP group of `rank`, connected (a start-up error names the group when one cannot be)."""
    mine = [(name, ranks) for name, ranks in tp_groups(plan) if rank in ranks]
    if not mine:
        return {}
    import torch.distributed as dist

    host, port = store_address(plan)
    store = dist.TCPStore(host, port, None, False, timedelta(seconds=120))
    address = host_of(plan, rank).address if plan.hosts else "127.0.0.1"
    cuda = plan.ranks[rank].device.startswith("cuda")
    for name, ranks in mine:
        t0 = time.perf_counter()
        prefix = dist.PrefixStore(f"wgc/tp/{name}/{ranks[0]}/", store)
        if cuda:  # unverified here: no GPU
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = GROUP_TIMEOUT
            pg = dist.ProcessGroupNCCL(prefix, ranks.index(rank), len(ranks), opts)
        else:
            opts = dist.ProcessGroupGloo._Options()
            opts._devices = [dist.ProcessGroupGloo.create_device(hostname=address)]
            opts._timeout = GROUP_TIMEOUT
            pg = dist.ProcessGroupGloo(prefix, ranks.index(rank), len(ranks), opts)
        group = _GROUPS[name] = Group(pg, ranks.index(rank), len(ranks), list(ranks))
        import torch

        group.all_reduce(torch.zeros(1, device=plan.ranks[rank].device))  # connects every pair now, not in the first request
        say(f"rank {rank}: {name} tensor-parallel group {ranks} connected over {'nccl' if cuda else 'gloo'} "
            f"in {time.perf_counter() - t0:.1f} s")
    return dict(_GROUPS)
