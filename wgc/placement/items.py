"""Bytes of one stream item, from its `.walk` type: the size behind a stream's buffer."""

from __future__ import annotations

import math

from wgc.lang import ast
from wgc.placement.facts import ComponentFacts, StreamFacts
from wgc.placement.tables import TOKEN_BYTES
from wgc.placement.units import DTYPE_BYTES

# Element bytes of each sizable item type; a tensor's come from its dtype.
ELEMENT_BYTES: dict[str, int] = {"token": TOKEN_BYTES, "scalar": 8, "action": 4}


def symbolic_dims(t: ast.TypeRef) -> tuple[str, ...]:
    """Dims a placement can size in `dims`: named ones (`D`) and the wildcard `_` (all of them)."""
    return tuple(dict.fromkeys(a.name for a in t.args if isinstance(a, ast.TypeRef) and not a.args))


def item_bytes(
    stream: StreamFacts, dims: dict[str, int], producer: ComponentFacts | None
) -> tuple[int | None, str]:
    """(bytes, how) — or (None, why not) for a type whose size the placement must give."""
    t = stream.item
    element = DTYPE_BYTES.get(t.dtype or "") if t.name == "tensor" else ELEMENT_BYTES.get(t.name)
    if element is None:
        return None, f"items of type `{t.name}` have no fixed size"
    sizes: list[int] = []
    hidden = producer.ints.get("hidden") if producer else None
    for i, arg in enumerate(t.args):
        if isinstance(arg, ast.DimInt):
            sizes.append(arg.value)
        elif isinstance(arg, ast.TypeRef) and arg.name in dims:
            sizes.append(dims[arg.name])
        elif isinstance(arg, ast.TypeRef) and t.name == "tensor" and i == len(t.args) - 1 and hidden:
            sizes.append(hidden)  # a hidden-state stream: the feature dim is the producer's `hidden`
        else:
            name = arg.name if isinstance(arg, ast.TypeRef) else "?"
            return None, f"dim `{name}` of the item type has no size"
    shape = " × ".join(map(str, sizes))
    how = f"{shape} × {element} B" if sizes else f"{element} B"
    return math.prod(sizes) * element, how
