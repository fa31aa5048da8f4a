"""Output formats, chosen by the output file's suffix."""

from __future__ import annotations

from collections.abc import Callable

from wgc.graph.dot import write_dot
from wgc.graph.mermaid import write_mermaid
from wgc.graph.model import Graph
from wgc.graph.svg import dot_to_svg

FORMATS: dict[str, Callable[[Graph], bytes]] = {
    ".dot": lambda g: write_dot(g).encode("utf-8"),
    ".gv": lambda g: write_dot(g).encode("utf-8"),
    ".mmd": lambda g: write_mermaid(g).encode("utf-8"),
    ".svg": lambda g: dot_to_svg(write_dot(g)),
}


def render(graph: Graph, suffix: str) -> bytes:
    """The graph in the format of `suffix` (a key of FORMATS; raises KeyError otherwise).

    SVG raises GraphvizError when Graphviz is missing or fails.
    """
    return FORMATS[suffix.lower()](graph)
