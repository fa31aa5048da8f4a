"""Plans made directly, without a placement, for the tensor-edge tests and bench/gpu_multinode.py:
host k on 127.0.0.(k + 2) holding ranks with the devices listed for it, and a `[transport]`."""

from __future__ import annotations

from wgc.plan.model import HostSpec, Plan, RankSpec, TransportSpec


def plan_of(hosts: list[list[str]], inter: str = "gloo", port: int = 29700) -> Plan:
    """A plan whose host k holds ranks with the devices hosts[k] lists (rank numbers in host order)."""
    ranks, host_specs = [], []
    for k, devices in enumerate(hosts):
        mine = list(range(len(ranks), len(ranks) + len(devices)))
        host_specs.append(HostSpec(f"node{k}", f"127.0.0.{k + 2}", mine))
        ranks += [RankSpec(r, d, f"node{k}", []) for r, d in zip(mine, devices, strict=True)]
    return Plan("t", "t.walk", "p.toml", [], [], [], [], [], ranks, [], [], [], host_specs,
                TransportSpec("shm", inter, port))
