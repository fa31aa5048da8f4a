"""The placement schema as data: for every table, its keys, what each accepts, which are required.

`read_table` applies one of these tables to a TOML table: unknown keys are errors with a
did-you-mean (never silently ignored), missing required keys are errors, every present key is
read by its reader. Tables keyed by program names (components, walks, branches, streams) are
`map_of` a reader; the names themselves are checked against the program later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from wgc.diag.sink import did_you_mean
from wgc.lang.span import Span
from wgc.placement.document import Node
from wgc.placement.fields import (
    Ctx,
    Reader,
    boolean,
    choice,
    int_list,
    integer,
    kind_of,
    module_list,
    number,
    rank_set,
    size,
    string,
)
from wgc.placement.serve_limits import LIMIT_KEYS
from wgc.placement.tables import (
    DEVICE_KINDS,
    INTER_HOST,
    INTRA_HOST,
    MAX_BATCH,
    MAX_RANKS,
    MAX_TOKEN_BUDGET,
    ROUTING_POLICIES,
)


@dataclass(frozen=True)
class Key:
    read: Reader
    required: bool = False


Spec = Mapping[str, Key]


@dataclass(frozen=True)
class Fields:
    """A table after reading: each present, valid key's value and node."""

    node: Node
    values: dict[str, tuple[object, Node]]

    def get(self, key: str, default: object = None) -> object:
        return self.values[key][0] if key in self.values else default

    def at(self, key: str) -> Node | None:
        return self.values[key][1] if key in self.values else None

    def has(self, key: str) -> bool:
        """Present in the file, valid or not."""
        return self.node.get(key) is not None

    def key_span(self, key: str) -> Span:
        present = self.node.get(key)
        return present.key if present is not None else self.node.key

    def int(self, key: str) -> int | None:
        v = self.get(key)
        return v if type(v) is int else None

    def str(self, key: str) -> str | None:
        v = self.get(key)
        return v if isinstance(v, str) else None

    def float(self, key: str) -> float | None:
        v = self.get(key)
        return v if isinstance(v, float) else None

    def ints(self, key: str) -> tuple[int, ...] | None:
        v = self.get(key)
        return v if isinstance(v, tuple) else None

    def table(self, key: str) -> Fields | None:
        v = self.get(key)
        return v if isinstance(v, Fields) else None

    def names(self, key: str) -> dict[str, tuple[object, Node]]:
        v = self.get(key)
        return v if isinstance(v, dict) else {}

    def rank_map(self, key: str) -> dict[str, tuple[tuple[int, ...], Node]]:
        """A `map_of(rank_set)` table: name → (ranks, node), valid entries only."""
        return {k: (v, n) for k, (v, n) in self.names(key).items() if isinstance(v, tuple)}


def read_table(node: Node, spec: Spec, ctx: Ctx) -> Fields | None:
    what = node.name
    if not node.is_table:
        ctx.error("P003", f"{what} must be a table, found {kind_of(node.value)}", node.span)
        return None
    values: dict[str, tuple[object, Node]] = {}
    for name, child in node.items():
        key = spec.get(name)
        if key is None:
            shown = ", ".join(spec)
            ctx.error("P002", f"unknown key `{name}` {_in(what)}", child.key,
                      (*did_you_mean(name, spec), f"the keys of {what} are: {shown}"))
            continue
        value = key.read(child, ctx)
        if value is not None:
            values[name] = (value, child)
    for name, key in spec.items():
        if key.required and name not in node.children():
            ctx.error("P004", f"{what} needs `{name}`", node.key)
    return Fields(node, values)


def _in(what: str) -> str:
    return "at the top level" if what == "the top level" else f"in {what}"


def table(spec: Spec) -> Reader:
    return lambda node, ctx: read_table(node, spec, ctx)


def passthrough(node: Node, ctx: Ctx) -> Node:
    """A key read elsewhere (`cluster` is read first: rank sets are checked against it)."""
    return node


def map_of(read: Reader) -> Reader:
    """A table whose keys are program names, each value read by `read`: name → (value, node)."""

    def read_map(node: Node, ctx: Ctx) -> dict[str, tuple[object, Node]] | None:
        if not node.is_table:
            ctx.error("P003", f"{node.name} must be a table, found {kind_of(node.value)}", node.span)
            return None
        out = {}
        for name, child in node.items():
            value = read(child, ctx)
            if value is not None:
                out[name] = (value, child)
        return out

    return read_map


def array_of(spec: Spec) -> Reader:
    def read(node: Node, ctx: Ctx) -> tuple[Fields, ...] | None:
        if not node.is_array:
            ctx.error("P003", f"{node.name} must be an array of tables (`[[...]]`)", node.span)
            return None
        items = [read_table(n, spec, ctx) for n in node.elements()]
        return tuple(f for f in items if f is not None)

    return read


def ranks_or_table(spec: Spec) -> Reader:
    """`llm = 0` (ranks only) or `[components.llm]` with `ranks` and more."""

    def read(node: Node, ctx: Ctx) -> Fields | tuple[int, ...] | None:
        return read_table(node, spec, ctx) if node.is_table else rank_set(node, ctx)

    return read


ENGINE: Spec = {
    "kv_memory_fraction": Key(number),
    "kv_memory": Key(size),
    "page_size": Key(integer(1)),
    "cuda_graph_buckets": Key(int_list(1, MAX_BATCH)),
    "max_batch": Key(integer(1, MAX_BATCH)),
    "token_budget": Key(integer(1, MAX_TOKEN_BUDGET)),
    "prefix_caching": Key(boolean),
}

HOST: Spec = {
    "name": Key(string, required=True),
    "address": Key(string),
    "ranks": Key(rank_set, required=True),
    "env": Key(map_of(string)),  # environment of this host's workers (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, ...)
}

CLUSTER: Spec = {
    "device": Key(choice(DEVICE_KINDS, "device kind"), required=True),
    "gpu": Key(string),
    "memory": Key(size),
    "ranks": Key(integer(1, MAX_RANKS), required=True),
    "hosts": Key(passthrough),  # read once `ranks` is known
}

DEFAULTS: Spec = {
    "ranks": Key(rank_set),
    "engine": Key(table(ENGINE)),
}

COMPONENT: Spec = {
    "ranks": Key(rank_set, required=True),
    "tp": Key(integer(1)),
    "routing": Key(choice(ROUTING_POLICIES, "routing policy")),
    "engine": Key(table(ENGINE)),
}

WALK: Spec = {
    "components": Key(map_of(rank_set)),
    "branches": Key(map_of(rank_set)),
}

STREAM: Spec = {
    "capacity": Key(integer(1)),
    "item_bytes": Key(integer(1)),
    "dims": Key(map_of(integer(1))),
}

TRANSPORT: Spec = {
    "intra_host": Key(choice(INTRA_HOST, "intra-host transport")),
    "inter_host": Key(choice(INTER_HOST, "inter-host transport")),
    "bind": Key(string),
    "port": Key(integer(1, 65535)),
}

SERVE: Spec = {
    "allow_modules": Key(module_list),  # module prefixes `wgc run` may import component classes from
    **{name: Key(read) for name, read in LIMIT_KEYS.items()},  # request limits of the HTTP frontend
}

# The top level. `extends` is consumed by `extends.py` before the schema is applied; `cluster`
# is read on its own first (rank sets elsewhere are checked against its `ranks`).
TOP: Spec = {
    "cluster": Key(passthrough, required=True),
    "model": Key(string),
    "defaults": Key(table(DEFAULTS)),
    "components": Key(map_of(ranks_or_table(COMPONENT))),
    "walks": Key(map_of(table(WALK))),
    "streams": Key(map_of(table(STREAM))),
    "transport": Key(table(TRANSPORT)),
    "serve": Key(table(SERVE)),
}
