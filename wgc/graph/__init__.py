"""`wgc graph`: draw a checked program (and its placement) as DOT, Mermaid or SVG.

`build_graph` makes the drawing model; `render` writes it in the format an output suffix names.
"""

from __future__ import annotations

from wgc.graph.build import build_graph
from wgc.graph.formats import FORMATS, render
from wgc.graph.model import Graph
from wgc.graph.svg import GraphvizError

__all__ = ["FORMATS", "Graph", "GraphvizError", "build_graph", "render"]
