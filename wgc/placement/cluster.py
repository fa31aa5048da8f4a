"""`[cluster]`, `[[cluster.hosts]]` and `[transport]`: the machines, their memory and the wires."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from wgc.diag.sink import did_you_mean
from wgc.lang.span import Span
from wgc.placement.fields import Ctx
from wgc.placement.schema import Cluster, ComponentPlacement, Host, Transport
from wgc.placement.spec import INTER_HOST, INTRA_HOST, ClusterTable, HostTable, TransportTable, array_of, default
from wgc.placement.tables import DEFAULT_TRANSPORT, GPU_MEMORY_MIB, MAX_GPUS_PER_HOST


def build_cluster(t: ClusterTable | None, ctx: Ctx) -> Cluster | None:
    """`[cluster]`; sets `ctx.rank_count` so every later rank set is range-checked."""
    if t is None or t.device is None or t.ranks is None:
        return None
    ctx.rank_count = t.ranks
    memory, memory_span = _memory(t, t.device, ctx)
    hosts = _hosts(t, t.ranks, ctx)
    if t.device == "cuda":
        _check_gpus_per_host(hosts, t, ctx)
    source = "unbounded" if memory is None else ("cluster.memory" if t.has("memory") else str(t.gpu))
    return Cluster(t.device, t.ranks, t.gpu, memory, source, hosts, memory_span)


def _memory(t: ClusterTable, device: str, ctx: Ctx) -> tuple[int | None, Span]:
    gpu, gpu_at = t.gpu, t.at("gpu")
    if device == "cpu" and t.has("gpu"):
        ctx.error("P003", "`gpu` applies to cluster.device = \"cuda\"", t.key_span("gpu"),
                  ('for a CPU rank set `memory`, the budget per rank, or leave it out (unbounded)',))
    gpu_span = gpu_at.span if gpu_at else t.node.key
    if device == "cuda" and gpu is not None and gpu not in GPU_MEMORY_MIB and not t.has("memory"):
        known = f"known models: {', '.join(GPU_MEMORY_MIB)}; or set cluster.memory"
        ctx.error("P003", f'unknown GPU model "{gpu}": its memory is not known', gpu_span,
                  (*did_you_mean(gpu, GPU_MEMORY_MIB), known))
    if device == "cuda" and not t.has("gpu") and not t.has("memory"):
        ctx.error("P004", "a cuda cluster needs `gpu` (a known model) or `memory` (per device)", t.node.key)
    memory_at = t.at("memory")
    if memory_at is not None:
        return t.memory, memory_at.span
    if device == "cuda" and gpu in GPU_MEMORY_MIB:
        return GPU_MEMORY_MIB[gpu] * 2**20, gpu_span
    return None, t.node.key


def _hosts(t: ClusterTable, ranks: int, ctx: Ctx) -> tuple[Host, ...]:
    if t.hosts is None:
        return (Host("localhost", default(HostTable, "address"), tuple(range(ranks)), t.node.key),)
    items: tuple[HostTable, ...] = array_of(HostTable)(t.hosts, ctx) or ()  # type: ignore[assignment]
    hosts: list[Host] = []
    owner: dict[int, str] = {}
    for h in items:
        if h.name is None or h.ranks is None:
            continue
        if any(x.name == h.name for x in hosts):
            ctx.error("P019", f"host `{h.name}` is listed twice", h.key_span("name"))
        for r in h.ranks:
            if r in owner:
                ctx.error("P019", f"rank {r} is on two hosts, `{owner[r]}` and `{h.name}`", h.key_span("ranks"))
            owner.setdefault(r, h.name)
        address = h.get("address")
        try:
            ipaddress.ip_address(address)
        except ValueError:
            ctx.error("P019", f"host `{h.name}`: address {address!r} is not an IP address", h.key_span("address"),
                      ("give the address its workers listen on, such as 10.0.0.2 (a host binds only its own address)",))
        env = tuple((k, str(v)) for k, (v, _) in (h.env or {}).items())
        hosts.append(Host(h.name, address, h.ranks, h.node.span, env))
    missing = [r for r in range(ranks) if r not in owner]
    if items and missing:
        shown = f"rank {missing[0]} is" if len(missing) == 1 else "ranks " + ", ".join(map(str, missing)) + " are"
        ctx.error("P019", f"{shown} on no host", t.hosts.key,
                  (f"the hosts' rank ranges must cover ranks 0..{ranks - 1}, each once",))
    return tuple(hosts)


def _check_gpus_per_host(hosts: tuple[Host, ...], t: ClusterTable, ctx: Ctx) -> None:
    """A cuda rank is one GPU of its host: no host holds more than MAX_GPUS_PER_HOST."""
    declared = t.hosts is not None
    value = t.at("ranks")
    for h in (h for h in hosts if len(h.ranks) > MAX_GPUS_PER_HOST):
        at = h.span if declared else value.span if value is not None else t.node.key
        ctx.error("P019", f"host `{h.name}` has {len(h.ranks)} cuda ranks, one GPU each, but a host holds at most "
                  f"{MAX_GPUS_PER_HOST} GPUs", at,
                  (f"give each host at most {MAX_GPUS_PER_HOST} ranks" if declared else
                   f"declare the machines in [[cluster.hosts]], at most {MAX_GPUS_PER_HOST} ranks each",))


def build_transport(t: TransportTable | None, cluster: Cluster, ctx: Ctx) -> Transport:
    intra, inter = DEFAULT_TRANSPORT[cluster.device]
    if t is None:
        return Transport(intra, inter, default(TransportTable, "bind"), default(TransportTable, "port"))
    for k, allowed in (("intra_host", INTRA_HOST), ("inter_host", INTER_HOST)):
        value, at = getattr(t, k), t.at(k)
        if value is not None and at is not None and cluster.device not in allowed[value]:
            usable = ", ".join(f'"{name}"' for name, devs in allowed.items() if cluster.device in devs)
            ctx.error("P020", f'transport "{value}" needs cluster.device = "cuda"', at.span,
                      (f"on {cluster.device} use one of {usable}",))
    return Transport(t.intra_host or intra, t.inter_host or inter, t.get("bind"), t.get("port"))


def warn_tp_across_hosts(cluster: Cluster, comps: Iterable[ComponentPlacement], ctx: Ctx) -> None:
    """W101: a tensor-parallel copy whose ranks are on different hosts. It works (the group is
    built over the inter-host transport), but every layer's all-reduces then cross the network
    instead of NVLink or shared memory, so it is worth saying once per component."""
    host = {r: h.name for h in cluster.hosts for r in h.ranks}
    for comp in comps:
        spread = [c for c in comp.copies if len({host[r] for r in c if r in host}) > 1]
        if comp.tp > 1 and spread:
            names = ", ".join(f"`{n}`" for n in dict.fromkeys(host[r] for r in spread[0] if r in host))
            ctx.warn("W101", f"tensor-parallel `{comp.name}` (tp = {comp.tp}) spans hosts {names}: its all-reduces "
                     "cross the network every layer", comp.span,
                     (f"ranks {', '.join(map(str, spread[0]))} form one copy of `{comp.name}`: put each copy's ranks "
                      "on one host, or lower tp",))
