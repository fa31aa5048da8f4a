"""The placement schema: one typed struct per TOML table, and the one reader that fills them.

Each field of a struct is a key the table may hold; its `key(...)` says how the value is read
(type, unit and bounds: `integer(1, MAX_BATCH)`, `size` in bytes from `"80GiB"`, a rank set...)
and whether it is required. A value's reader (`fields.py`) reports a bad value at its span (P003,
P012 for a rank beyond the cluster) and leaves the field None; a key the struct does not have is
P002 with a did-you-mean, a required key that is absent P004. A field stays None unless given
(the rules in `cluster.py`, `placing.py` and `engines.py` must tell "not given" from a value, to
merge tables and to find where a value came from); `Table.get` answers the key's default. A
default that depends on other keys is computed by the rules, and its comment says so.

Tables keyed by program names (components, walks, streams, a walk's pins, dims, env) are
`map_of` a reader: name → (value, node), only the valid entries; the names are checked against
the program by the rules. `cluster` and `cluster.hosts` are `raw`: read once the rank count is
known, so that every rank set is checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar, dataclass_transform

from wgc.diag.sink import did_you_mean
from wgc.lang.span import Span
from wgc.placement import fields as value
from wgc.placement.document import Node
from wgc.placement.fields import Ctx, Reader, kind_of
from wgc.placement.schema import Engine
from wgc.placement.tables import MAX_BATCH, MAX_COUNT, MAX_RANKS, MAX_TOKEN_BUDGET

Ranks = tuple[int, ...]
Entry = tuple[Any, Node]  # a `map_of` value and the node it was read from
T = TypeVar("T", bound="Table")


def key(reader: Reader | type[Table], *, required: bool = False, default: object = None, kv_only: bool = False
        ) -> Any:
    """A struct field that is a key of its table, read by `reader` (a struct: a nested table). The
    field is None unless the file gives a valid value; `default` is what `Table.get` answers then.
    `kv_only`: an engine key that means nothing to a stateless component (`engines.py`)."""
    return field(default=None, metadata={"read": _reader(reader), "required": required, "default": default,
                                         "kv_only": kv_only})


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(key,))
@dataclass(frozen=True, kw_only=True)
class Table:
    """A TOML table read into a struct: its fields, and the node for the spans of its keys. Each
    subclass is a frozen dataclass, its fields the keys of its table."""

    node: Node = field(repr=False, compare=False)

    def __init_subclass__(cls) -> None:
        dataclass(frozen=True, kw_only=True)(cls)

    def get(self, name: str) -> Any:
        """The value given, else the key's default (an empty string counts as not given)."""
        value = getattr(self, name)
        return value if value is not None and value != "" else default(type(self), name)

    def has(self, name: str) -> bool:
        """Given in the file, valid or not."""
        return self.node.get(name) is not None

    def at(self, name: str) -> Node | None:
        """The node of a key whose value is valid."""
        return self.node.get(name) if getattr(self, name) is not None else None

    def key_span(self, name: str) -> Span:
        present = self.node.get(name)
        return present.key if present is not None else self.node.key


def default(struct: type[Table], name: str) -> Any:
    return struct.__dataclass_fields__[name].metadata["default"]


def read(node: Node, struct: type[T], ctx: Ctx) -> T | None:
    """`node` read as `struct`: every key checked and read, in the order of the struct's fields."""
    if not _is_table(node, ctx):
        return None
    keys = {f.name: f.metadata for f in fields(struct) if f.metadata}
    for name, child in node.children().items():
        if name not in keys:
            where = "at the top level" if not node.path else f"in {node.name}"
            ctx.error("P002", f"unknown key `{name}` {where}", child.key,
                      (*did_you_mean(name, keys), f"the keys of {node.name} are: {', '.join(keys)}"))
    values = {}
    for name, meta in keys.items():
        child = node.get(name)
        if child is not None:
            values[name] = meta["read"](child, ctx)
        elif meta["required"]:
            ctx.error("P004", f"{node.name} needs `{name}`", node.key)
    return struct(node=node, **values)


def _is_table(node: Node, ctx: Ctx) -> bool:
    if not node.is_table:
        ctx.error("P003", f"{node.name} must be a table, found {kind_of(node.value)}", node.span)
    return node.is_table


def _reader(of: Reader | type[Table]) -> Reader:
    """A reader as given, or the one that reads a nested table as struct `of`."""
    return (lambda node, ctx: read(node, of, ctx)) if isinstance(of, type) else of


def raw(node: Node, ctx: Ctx) -> Node:
    """A key read by the rules, once what it depends on is known."""
    return node


def map_of(of: Reader | type[Table]) -> Reader:
    """A table keyed by program names: name → (value, node), the valid entries only."""
    entry = _reader(of)

    def read_map(node: Node, ctx: Ctx) -> dict[str, Entry] | None:
        if not _is_table(node, ctx):
            return None
        entries = ((name, entry(child, ctx), child) for name, child in node.children().items())
        return {name: (v, child) for name, v, child in entries if v is not None}

    return read_map


def array_of(struct: type[T]) -> Reader:
    def read_array(node: Node, ctx: Ctx) -> tuple[T, ...] | None:
        if not node.is_array:
            ctx.error("P003", f"{node.name} must be an array of tables (`[[...]]`)", node.span)
            return None
        return tuple(t for t in (read(n, struct, ctx) for n in node.elements()) if t is not None)

    return read_array


def ranks_or(struct: type[T]) -> Reader:
    """`llm = 0` (ranks only) or `[components.llm]` with `ranks` and more."""
    return lambda node, ctx: read(node, struct, ctx) if node.is_table else value.rank_set(node, ctx)


_COUNT = value.integer(1, MAX_COUNT)

# The values some keys allow, as the schema's own data.
DEVICE_KINDS: tuple[str, ...] = ("cpu", "cuda")
# How requests choose among a component's copies (data-parallel replicas), when it has several.
ROUTING_POLICIES: dict[str, str] = {
    "round_robin": "requests go to the copies in turn",
    "least_loaded": "each request goes to the copy with the fewest requests in flight",
    "session": "requests of one session go to one copy (its KV prefix stays warm)",
    "mirror": "every copy runs each unpinned call (copies that keep different cache labels)",
}
# Tensor transports and the device kinds that can use them (cluster.py: P020 for another kind).
INTRA_HOST: dict[str, tuple[str, ...]] = {"shm": ("cpu", "cuda"), "cuda_ipc": ("cuda",), "zmq": ("cpu", "cuda")}
INTER_HOST: dict[str, tuple[str, ...]] = {"nccl": ("cuda",), "gloo": ("cpu", "cuda"), "zmq": ("cpu", "cuda")}


class EngineTable(Table):
    """`[defaults.engine]`, `[components.X.engine]`: merged by `engines.py` into a `schema.Engine`,
    whose field defaults are the defaults here."""

    kv_memory_fraction: float | None = key(value.number, kv_only=True)
    kv_memory: int | None = key(value.size, kv_only=True)
    page_size: int | None = key(value.integer(1), default=Engine.page_size, kv_only=True)
    cuda_graph_buckets: Ranks | None = key(value.int_list(1, MAX_BATCH), default=Engine.cuda_graph_buckets)
    max_batch: int | None = key(value.integer(1, MAX_BATCH))  # default: the largest bucket, else DEFAULT_MAX_BATCH
    token_budget: int | None = key(value.integer(1, MAX_TOKEN_BUDGET), kv_only=True)  # by device, ≥ max_batch
    prefill_token_budget: int | None = key(value.integer(1, MAX_TOKEN_BUDGET), kv_only=True)  # by device, ≥ token_budget
    prefix_caching: bool | None = key(value.boolean, default=Engine.prefix_caching, kv_only=True)


class HostTable(Table):
    """`[[cluster.hosts]]`: one machine, the ranks it runs and its workers' environment."""

    name: str | None = key(value.string, required=True)
    address: str | None = key(value.string, default="127.0.0.1")
    ranks: Ranks | None = key(value.rank_set, required=True)
    env: dict[str, Entry] | None = key(map_of(value.string))  # NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, ...


class ClusterTable(Table):
    device: str | None = key(value.choice(DEVICE_KINDS, "device kind"), required=True)
    gpu: str | None = key(value.string)
    memory: int | None = key(value.size)
    ranks: int | None = key(value.integer(1, MAX_RANKS), required=True)
    hosts: Node | None = key(raw)  # read as HostTable once `ranks` is known


class DefaultsTable(Table):
    ranks: Ranks | None = key(value.rank_set)
    engine: EngineTable | None = key(EngineTable)


class ComponentTable(Table):
    ranks: Ranks | None = key(value.rank_set, required=True)
    tp: int | None = key(value.integer(1), default=1)
    routing: str | None = key(value.choice(ROUTING_POLICIES, "routing policy"))
    engine: EngineTable | None = key(EngineTable)


class WalkTable(Table):
    components: dict[str, Entry] | None = key(map_of(value.rank_set))
    branches: dict[str, Entry] | None = key(map_of(value.rank_set))


class StreamTable(Table):
    capacity: int | None = key(value.integer(1))
    item_bytes: int | None = key(value.integer(1))
    dims: dict[str, Entry] | None = key(map_of(value.integer(1)))


class TransportTable(Table):
    intra_host: str | None = key(value.choice(INTRA_HOST, "intra-host transport"))  # default: DEFAULT_TRANSPORT[device]
    inter_host: str | None = key(value.choice(INTER_HOST, "inter-host transport"))
    bind: str | None = key(value.string, default="127.0.0.1")
    port: int | None = key(value.integer(1, 65535), default=29500)


class ServeTable(Table):
    """`[serve]`: the modules `wgc run` may import, and the HTTP frontend's request limits
    (runtime/http/admission/limits.py says what each bounds; `--limit NAME=VALUE` overrides it)."""

    allow_modules: tuple[str, ...] | None = key(value.module_list, default=())
    max_body_bytes: int | None = key(value.size)
    max_media_bytes: int | None = key(value.size)
    max_parts: int | None = key(_COUNT)
    max_images: int | None = key(_COUNT)
    max_image_pixels: int | None = key(_COUNT)
    max_request_pixels: int | None = key(_COUNT)
    max_audio_seconds: float | None = key(value.seconds)
    max_prompt_chars: int | None = key(_COUNT)
    max_prompt_tokens: int | None = key(_COUNT)
    max_stop: int | None = key(_COUNT)
    max_stop_chars: int | None = key(_COUNT)
    max_n: int | None = key(_COUNT)


# The request limits, in the order the plan lists them (`serve.<name>` settings).
LIMIT_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ServeTable) if f.name.startswith("max_"))


class TopTable(Table):
    """The file. `extends` is consumed by `document.py` before this is read."""

    cluster: Node | None = key(raw, required=True)  # read first, as ClusterTable
    model: str | None = key(value.string)
    defaults: DefaultsTable | None = key(DefaultsTable)
    components: dict[str, Entry] | None = key(map_of(ranks_or(ComponentTable)))
    walks: dict[str, Entry] | None = key(map_of(WalkTable))
    streams: dict[str, Entry] | None = key(map_of(StreamTable))
    transport: TransportTable | None = key(TransportTable)
    serve: ServeTable | None = key(ServeTable)
