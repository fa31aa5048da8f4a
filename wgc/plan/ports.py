"""The deterministic ports of a multi-host plan, derived from `[transport] port` P alone, so that a
firewall rule can be written from the placement (and `wgc inspect` prints them):

    P            the c10d rendezvous store, on the head's address
    P + 1        the coordinator's PULL socket, on the head's address
    P + 2        membership: joins, heartbeats, rank deaths (the head's ROUTER)
    P + 10 + r   rank r's PULL socket, on its host's address
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.plan.model import Plan

DEFAULT_PORT = 29500
RANK_OFFSET = 10


@dataclass(frozen=True)
class Ports:
    base: int

    @property
    def store(self) -> int:
        return self.base

    @property
    def coordinator(self) -> int:
        return self.base + 1

    @property
    def membership(self) -> int:
        return self.base + 2

    def rank(self, rank: int) -> int:
        return self.base + RANK_OFFSET + rank


def ports(plan: Plan) -> Ports:
    return Ports(plan.transport.port if plan.transport is not None else DEFAULT_PORT)


def tp_groups(plan: Plan) -> list[tuple[str, list[int]]]:
    """(component, ranks) for every tensor-parallel copy: `tp` consecutive ranks of the component's."""
    out = []
    for c in plan.components:
        if c.tp > 1:
            out.extend((c.name, c.ranks[i : i + c.tp]) for i in range(0, len(c.ranks), c.tp))
    return out


def host_lines(plan: Plan) -> list[str]:
    """`wgc inspect`'s view of the hosts, their ports and the TP groups; nothing for one host without TP."""
    groups = tp_groups(plan)
    if len(plan.hosts) < 2 and not groups:
        return []
    out = []
    if len(plan.hosts) > 1:
        p = ports(plan)
        out.append(f"hosts: (store {p.store}, coordinator {p.coordinator}, membership {p.membership} on the head; "
                   f"rank r on port {p.base + RANK_OFFSET} + r)")
        for k, h in enumerate(plan.hosts):
            role = "head" if k == 0 else f"node rank {k}"
            env = "  env " + " ".join(f"{n}={v}" for n, v in sorted(h.env.items())) if h.env else ""
            rank_ports = ", ".join(str(p.rank(r)) for r in h.ranks)
            out.append(f"  {h.name} ({role})  {h.address}  ranks {h.ranks}  ports {rank_ports}{env}")
    if groups:
        t = plan.transport
        backend = "gloo" if any(r.device == "cpu" for r in plan.ranks) else "nccl"
        out.append(f"tensor-parallel groups: ({backend}{', inter_host ' + t.inter_host if t else ''})")
        out.extend(f"  {name}: ranks {ranks}" for name, ranks in groups)
    out.append("")
    return out
