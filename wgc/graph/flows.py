"""A flow as a cluster: its state machine (start, walks, each-blocks, done), conditions on the edges.

Transitions out of a state are tried in source order, so where a state has several they are
numbered and an unconditional one after others reads `otherwise`. An each-block is a nested
cluster: its arms (numbered the same way when there are several) run walks, then go back to
the block for the next input part.
"""

from __future__ import annotations

from wgc.graph.dataflow import Sink
from wgc.graph.labels import condition, each_lines, flow_lines
from wgc.graph.model import DONE, EACH, EACH_BLOCK, FLOW, NEXT_PART, START, STATE, TRANSITION, GCluster, GNode, Ids
from wgc.lang import ast

STATE_KINDS = {"start": START, "done": DONE}


def ordered_labels(conditions: list[str | None]) -> list[str]:
    """Edge labels for the transitions out of one state, in the order they are tried."""
    if len(conditions) == 1:
        return [conditions[0] or ""]
    return [f"{k}. {c or ('otherwise' if k > 1 else 'always')}" for k, c in enumerate(conditions, 1)]


class FlowDrawer:
    def __init__(self, flow: ast.Flow, ids: Ids, sink: Sink) -> None:
        self.flow = flow
        self.ids = ids
        self.sink = sink
        self.box = GCluster(ids.cluster(), FLOW, flow_lines(flow))
        self.eaches = {item.name: item for item in flow.items if isinstance(item, ast.Each)}
        self.states: dict[str, str] = {}  # state name → node

    def draw(self) -> GCluster:
        transitions: list[tuple[str, str, str | None]] = []
        for item in self.flow.items:
            if isinstance(item, ast.Chain):
                nodes = [self.state(n.name) for n in item.nodes]
                for k, (a, b) in enumerate(zip(nodes, nodes[1:])):
                    transitions.append((a, b, condition(item.when) if k == 0 else None))
            else:
                self.state(item.name)
        by_source: dict[str, list[tuple[str, str | None]]] = {}
        for a, b, cond in transitions:
            by_source.setdefault(a, []).append((b, cond))
        for a, outs in by_source.items():
            for (b, _), label in zip(outs, ordered_labels([c for _, c in outs])):
                self.sink.edge(a, b, TRANSITION, label)
        return self.box

    def state(self, name: str) -> str:
        if name not in self.states:
            if name in self.eaches:
                self.states[name] = self._each(self.eaches[name])
            else:
                node = GNode(self.ids.node(), STATE_KINDS.get(name, STATE), (name,))
                self.box.nodes.append(node)
                self.states[name] = node.id
        return self.states[name]

    def _each(self, each: ast.Each) -> str:
        block = GCluster(self.ids.cluster(), EACH_BLOCK, (f"each {each.name}",))
        head = GNode(self.ids.node(), EACH, each_lines(each))
        block.nodes.append(head)
        self.box.children.append(block)
        labels = ordered_labels([_arm_text(arm) for arm in each.arms])
        for arm, label in zip(each.arms, labels):
            prev = head.id
            for i, walk in enumerate(arm.walks):
                node = GNode(self.ids.node(), STATE, (walk.name,))
                block.nodes.append(node)
                self.sink.edge(prev, node.id, TRANSITION, label if i == 0 else None)
                prev = node.id
            self.sink.edge(prev, head.id, NEXT_PART, "next part")
        return head.id


def _arm_text(arm: ast.EachArm) -> str:
    cond = condition(arm.when)
    return arm.kind + (f" when {cond}" if cond else "")
