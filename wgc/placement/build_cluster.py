"""`[cluster]`, `[[cluster.hosts]]` and `[transport]`: the machines, their memory and the wires."""

from __future__ import annotations

from wgc.diag.sink import did_you_mean
from wgc.lang.span import Span
from wgc.placement.document import Node
from wgc.placement.fields import Ctx
from wgc.placement.keys import CLUSTER, HOST, Fields, array_of, read_table
from wgc.placement.schema import Cluster, Host, Transport
from wgc.placement.tables import (
    DEFAULT_BIND,
    DEFAULT_PORT,
    DEFAULT_TRANSPORT,
    GPU_MEMORY_MIB,
    INTER_HOST,
    INTRA_HOST,
    MAX_GPUS_PER_HOST,
)

_MIB = 2**20


def build_cluster(node: Node | None, ctx: Ctx) -> Cluster | None:
    """Read `[cluster]`; sets `ctx.rank_count` so every later rank set is range-checked."""
    if node is None:
        return None  # `cluster` is required: P004 comes from the top-level table
    f = read_table(node, CLUSTER, ctx)
    if f is None:
        return None
    device, ranks = f.str("device"), f.int("ranks")
    if ranks is None or device is None:
        return None
    ctx.rank_count = ranks
    memory, memory_span = _memory(f, device, ctx)
    hosts = _hosts(f, ranks, ctx)
    if device == "cuda":
        _check_gpus_per_host(hosts, f, ctx)
    gpu = f.str("gpu")
    source = "unbounded" if memory is None else ("cluster.memory" if f.has("memory") else str(gpu))
    return Cluster(device, ranks, gpu, memory, source, hosts, memory_span)


def _memory(f: Fields, device: str, ctx: Ctx) -> tuple[int | None, Span]:
    memory, gpu = f.int("memory"), f.str("gpu")
    memory_node = f.at("memory")
    if device == "cpu" and f.has("gpu"):
        ctx.error("P003", "`gpu` applies to cluster.device = \"cuda\"", f.key_span("gpu"),
                  ('for a CPU rank set `memory`, the budget per rank, or leave it out (unbounded)',))
    gpu_at = f.at("gpu")
    gpu_span = gpu_at.span if gpu_at else f.node.key
    if device == "cuda" and gpu is not None and gpu not in GPU_MEMORY_MIB and not f.has("memory"):
        known = ", ".join(GPU_MEMORY_MIB)
        ctx.error("P003", f'unknown GPU model "{gpu}": its memory is not known', gpu_span,
                  (*did_you_mean(gpu, GPU_MEMORY_MIB), f"known models: {known}; or set cluster.memory"))
    if device == "cuda" and not f.has("gpu") and not f.has("memory"):
        ctx.error("P004", "a cuda cluster needs `gpu` (a known model) or `memory` (per device)", f.node.key)
    if memory_node is not None:
        return memory, memory_node.span
    if device == "cuda" and gpu in GPU_MEMORY_MIB:
        return GPU_MEMORY_MIB[gpu] * _MIB, gpu_span
    return None, f.node.key


def _hosts(f: Fields, ranks: int, ctx: Ctx) -> tuple[Host, ...]:
    node = f.at("hosts")
    if node is None:
        return (Host("localhost", DEFAULT_BIND, tuple(range(ranks)), f.node.key),)
    items = array_of(HOST)(node, ctx)
    items = items if isinstance(items, tuple) else ()
    hosts: list[Host] = []
    owner: dict[int, str] = {}
    for h in items:
        name, rank_set = h.str("name"), h.ints("ranks")
        if name is None or rank_set is None:
            continue
        if any(x.name == name for x in hosts):
            ctx.error("P019", f"host `{name}` is listed twice", h.key_span("name"))
        for r in rank_set:
            if r in owner:
                ctx.error("P019", f"rank {r} is on two hosts, `{owner[r]}` and `{name}`", h.key_span("ranks"))
            owner.setdefault(r, name)
        address = h.str("address") or DEFAULT_BIND
        if not _is_ip(address):
            ctx.error("P019", f"host `{name}`: address {address!r} is not an IP address", h.key_span("address"),
                      ("give the address its workers listen on, such as 10.0.0.2 (a host binds only its own address)",))
        env = tuple((k, str(v)) for k, (v, _) in h.names("env").items())
        hosts.append(Host(name, address, rank_set, h.node.span, env))
    missing = [r for r in range(ranks) if r not in owner]
    if items and missing:
        shown = f"rank {missing[0]} is" if len(missing) == 1 else "ranks " + ", ".join(map(str, missing)) + " are"
        ctx.error("P019", f"{shown} on no host", node.key,
                  (f"the hosts' rank ranges must cover ranks 0..{ranks - 1}, each once",))
    return tuple(hosts)


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _check_gpus_per_host(hosts: tuple[Host, ...], f: Fields, ctx: Ctx) -> None:
    """A cuda rank is one GPU of its host: no host holds more than MAX_GPUS_PER_HOST."""
    for h in hosts:
        if len(h.ranks) > MAX_GPUS_PER_HOST:
            declared = f.at("hosts") is not None
            value = f.at("ranks")
            at = h.span if declared else value.span if value is not None else f.node.key
            ctx.error("P019", f"host `{h.name}` has {len(h.ranks)} cuda ranks, one GPU each, but a host holds at most "
                      f"{MAX_GPUS_PER_HOST} GPUs", at,
                      (f"give each host at most {MAX_GPUS_PER_HOST} ranks" if declared else
                       f"declare the machines in [[cluster.hosts]], at most {MAX_GPUS_PER_HOST} ranks each",))


def build_transport(f: Fields | None, cluster: Cluster, ctx: Ctx) -> Transport:
    intra, inter = DEFAULT_TRANSPORT[cluster.device]
    if f is not None:
        for key, table in (("intra_host", INTRA_HOST), ("inter_host", INTER_HOST)):
            value, at = f.str(key), f.at(key)
            if value is not None and at is not None and cluster.device not in table[value]:
                usable = ", ".join(f'"{k}"' for k, devs in table.items() if cluster.device in devs)
                ctx.error("P020", f'transport "{value}" needs cluster.device = "cuda"', at.span,
                          (f"on {cluster.device} use one of {usable}",))
        intra = f.str("intra_host") or intra
        inter = f.str("inter_host") or inter
    bind = (f.str("bind") if f else None) or DEFAULT_BIND
    port = (f.int("port") if f else None) or DEFAULT_PORT
    return Transport(intra, inter, bind, port)
