"""Colours by rank: a fixed palette, the colour of each placed call, and the legend."""

from __future__ import annotations

from pathlib import Path

from wgc.graph.model import LEGEND, PLACEMENT, GCluster, GNode, Ids
from wgc.lower.place import ranks_for
from wgc.placement.schema import Placement

# Light fills that keep black text readable; rank r gets PALETTE[r % len(PALETTE)].
PALETTE: tuple[str, ...] = (
    "#a6cee3",  # blue
    "#fdbf6f",  # orange
    "#b2df8a",  # green
    "#fb9a99",  # red
    "#cab2d6",  # purple
    "#ffff99",  # yellow
    "#8dd3c7",  # teal
    "#d9d9d9",  # grey
)


def rank_colour(rank: int) -> str:
    return PALETTE[rank % len(PALETTE)]


def ranks_line(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


class Painter:
    """Colours call sites by where a placement runs them; without a placement, paints nothing."""

    def __init__(self, placement: Placement | None) -> None:
        self.placement = placement

    def paint(self, component: str, walk: str, branch: str | None) -> tuple[str | None, tuple[str, ...]]:
        """The fill of a call site and the extra label line naming its ranks (a TP or mirror group: all)."""
        if self.placement is None:
            return None, ()
        ranks = ranks_for(self.placement, component, walk, branch)
        return rank_colour(ranks[0]), (ranks_line(ranks),)

    def legend(self, ids: Ids) -> GCluster | None:
        p = self.placement
        if p is None:
            return None
        where = p.cluster.gpu or p.cluster.device
        title = f"placement {Path(p.file).name} ({p.cluster.ranks} × {where})"
        nodes = [GNode(ids.node(), LEGEND, (f"rank {r}",), rank_colour(r)) for r in range(p.cluster.ranks)]
        return GCluster(ids.cluster(), PLACEMENT, (title,), nodes)
