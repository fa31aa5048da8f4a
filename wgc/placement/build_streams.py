"""`[streams.*]`: buffer capacity and item size of the program's streams."""

from __future__ import annotations

from wgc.diag.sink import did_you_mean
from wgc.placement.facts import ProgramFacts
from wgc.placement.fields import Ctx
from wgc.placement.items import symbolic_dims
from wgc.placement.keys import Fields
from wgc.placement.schema import StreamSettings


def build_streams(top: Fields, facts: ProgramFacts, ctx: Ctx) -> tuple[StreamSettings, ...]:
    out = []
    for name, (f, node) in top.names("streams").items():
        stream = facts.streams.get(name)
        if stream is None:
            ctx.error("P011", f"unknown stream `{name}`: the program declares no such stream", node.key,
                      did_you_mean(name, facts.streams) or ("the program's streams: " + (", ".join(facts.streams) or "none"),))
            continue
        if not isinstance(f, Fields):
            continue
        symbolic = symbolic_dims(stream.item)
        dims: dict[str, int] = {}
        for dim, (value, at) in f.names("dims").items():
            if dim not in symbolic:
                shown = ", ".join(symbolic) or "none"
                ctx.error("P021", f"the item type of stream `{name}` has no dim `{dim}`", at.key,
                          (*did_you_mean(dim, symbolic), f"its symbolic dims: {shown}"))
            elif isinstance(value, int):
                dims[dim] = value
        capacity = f.int("capacity")
        at = f.at("capacity")
        if capacity is not None and at is not None and stream.min_capacity and capacity < stream.min_capacity:
            ctx.error("P021", f"capacity {capacity} of stream `{name}` is below one chunk ({stream.min_capacity} items)",
                      at.span, ("the consumer could never receive a chunk: the producer would block forever",))
        out.append(StreamSettings(name, capacity, f.int("item_bytes"), tuple(dims.items()), node.key))
    return tuple(out)
