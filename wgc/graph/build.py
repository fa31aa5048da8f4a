"""A checked program (and optionally its placement) → the drawing model.

Walks first (their call sites, data flow, loops and branches), then the streams joining send
sites to receiving ends across walks, then one cluster per flow and, with a placement, the
legend of rank colours.
"""

from __future__ import annotations

from wgc.check.context import Symbols
from wgc.graph.dataflow import Sink
from wgc.graph.flows import FlowDrawer
from wgc.graph.labels import stream_label
from wgc.graph.model import EMPTY, STREAM, GCluster, GNode, Graph, Ids
from wgc.graph.ranks import Painter
from wgc.graph.walks import WalkDrawer
from wgc.lang import ast
from wgc.placement.schema import Placement


def build_graph(program: ast.Program, symbols: Symbols, placement: Placement | None = None) -> Graph:
    """The drawing of a program the checker accepted (and a placement loaded against it)."""
    ids, sink, painter = Ids(), Sink(), Painter(placement)
    walks = [WalkDrawer(w, symbols, ids, sink, painter).draw() for w in program.of(ast.Walk)]
    _connect_streams(sink, {s.name: s for s in program.of(ast.Stream)})
    flows = [FlowDrawer(f, ids, sink).draw() for f in program.of(ast.Flow)]
    legend = painter.legend(ids)
    clusters = [*walks, *flows, *([legend] if legend else [])]
    _fill_empty(clusters, ids)
    models = program.of(ast.Model)
    return Graph(models[0].name if models else "model", tuple(clusters), tuple(sink.edges()))


def _connect_streams(sink: Sink, streams: dict[str, ast.Stream]) -> None:
    for site in sink.sends:
        decl = streams.get(site.stream)
        if decl is None:
            continue
        for dst in sink.receivers.get(site.stream, ()):
            for src in site.sources:
                sink.edge(src, dst, STREAM, stream_label(decl))


def _fill_empty(clusters: list[GCluster], ids: Ids) -> None:
    """A cluster with nothing in it would vanish from a drawing: it gets a placeholder node."""
    for top in clusters:
        for c in top.all_clusters():
            if not c.nodes and not c.children:
                c.nodes.append(GNode(ids.node(), EMPTY, ("(no calls)",)))
