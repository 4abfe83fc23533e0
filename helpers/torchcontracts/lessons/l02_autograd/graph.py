"""Draw a tensor's live backward graph with matplotlib alone (no graphviz binary), for lesson 02.

``graph_nodes`` walks ``grad_fn.next_functions`` and returns plain data (nodes with their
saved tensors, leaves with their ``.grad``, and edges), so tests can check it headless;
``draw_graph`` lays that data out by depth and draws it on a matplotlib axis.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

import torch

__all__ = ["BackwardGraph", "Edge", "GraphNode", "Saved", "draw_graph", "graph_nodes"]


@dataclasses.dataclass(frozen=True)
class Saved:
    """A tensor a backward node saved for later: its name, shape, or ``freed`` after backward."""

    name: str
    shape: tuple[int, ...] | None
    freed: bool = False

    def text(self) -> str:
        if self.freed:
            return f"{self.name}: freed"
        return f"{self.name}: {self.shape}"


@dataclasses.dataclass(frozen=True)
class GraphNode:
    """One box of the drawing: an op node, a leaf (``AccumulateGrad``), or the tensor itself.

    ``kind`` is ``"output"`` (the tensor drawn), ``"op"`` (a backward node), ``"leaf"``
    (``AccumulateGrad`` with the leaf's shape and ``.grad``) or ``"no-graph"`` (nothing to draw).
    """

    id: int
    kind: str
    name: str
    depth: int
    saved: tuple[Saved, ...] = ()
    shape: tuple[int, ...] | None = None
    grad: str = ""  # "None" or the .grad shape, for leaves
    label: str = ""  # a parameter name from ``params``, for leaves

    def text(self) -> str:
        """The lines written in this node's box."""
        if self.kind == "output":
            return f"{self.name}\nshape {self.shape}"
        if self.kind == "no-graph":
            return self.name
        lines = [self.name]
        if self.kind == "leaf":
            lines.append(f"leaf {self.label + ' ' if self.label else ''}{self.shape}")
            lines.append(f".grad: {self.grad}")
        lines += [s.text() for s in self.saved]
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Edge:
    """Gradient flows from node ``src`` to node ``dst`` (``dst`` is in ``src.next_functions``)."""

    src: int
    dst: int


class BackwardGraph(NamedTuple):
    """Nodes (root first) and edges of a backward graph; unpacks as ``nodes, edges``."""

    nodes: list[GraphNode]
    edges: list[Edge]

    def names(self) -> list[str]:
        """The node type names, root first (``["output", "SumBackward0", ...]``)."""
        return [n.name for n in self.nodes]


def _shape(t: Any) -> tuple[int, ...] | None:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else None


def _saved_of(fn: Any) -> tuple[Saved, ...]:
    """The tensors a node saved: ``_saved_<name>`` for built-in ops, ``saved_tensors`` for custom Functions."""
    out: list[Saved] = []
    names = [a for a in dir(fn) if a.startswith("_saved_")]
    for attr in names:
        name = attr[len("_saved_") :]
        try:
            value = getattr(fn, attr)
        except RuntimeError:  # freed by a backward without retain_graph
            if hasattr(fn, "_raw_saved_" + name):
                out.append(Saved(name, None, freed=True))
            continue
        if isinstance(value, torch.Tensor):
            out.append(Saved(name, _shape(value)))
    if not names and hasattr(fn, "saved_tensors"):  # a custom autograd.Function node
        try:
            tensors = fn.saved_tensors
            out += [Saved(f"saved[{i}]", _shape(t)) for i, t in enumerate(tensors) if t is not None]
        except RuntimeError:
            out.append(Saved("saved_tensors", None, freed=True))
    return tuple(out)


def _grad_text(t: torch.Tensor) -> str:
    return "None" if t.grad is None else str(tuple(t.grad.shape))


def graph_nodes(tensor: torch.Tensor, params: Mapping[str, torch.Tensor] | None = None) -> BackwardGraph:
    """Walk ``tensor.grad_fn`` and return the backward graph as data, root first.

    ``params`` (e.g. ``dict(model.named_parameters())``) names the leaves it contains.
    A node's depth is its longest distance from the tensor, so every edge points downwards.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"graph_nodes needs a torch.Tensor, got {type(tensor).__name__}: pass the output tensor")
    names = {id(p): n for n, p in (params or {}).items()}
    root = GraphNode(0, "output", "output", 0, shape=tuple(tensor.shape))
    if tensor.grad_fn is None:
        if tensor.requires_grad:  # a leaf: its only node is the AccumulateGrad that backward would reach
            leaf = GraphNode(
                1,
                "leaf",
                "AccumulateGrad",
                1,
                shape=tuple(tensor.shape),
                grad=_grad_text(tensor),
                label=names.get(id(tensor), ""),
            )
            return BackwardGraph([root, leaf], [Edge(0, 1)])
        return BackwardGraph(
            [root, GraphNode(1, "no-graph", "no graph: grad_fn is None,\nrequires_grad=False", 1)], [Edge(0, 1)]
        )
    # Discover nodes depth-first, keeping Python references so id() stays unique during the walk.
    ids: dict[int, int] = {}
    fns: list[Any] = []
    children: dict[int, list[int]] = {}
    stack = [tensor.grad_fn]
    while stack:
        fn = stack.pop()
        if id(fn) in ids:
            continue
        ids[id(fn)] = len(fns) + 1
        fns.append(fn)
        nxt = [f for f, _ in fn.next_functions if f is not None]
        children[id(fn)] = [id(f) for f in nxt]
        stack.extend(reversed(nxt))
    # Longest-path depth: relax edges in topological order (the graph is a DAG).
    order: list[int] = []
    seen: set[int] = set()
    by_id = {id(f): f for f in fns}

    def visit(key: int) -> None:  # iterative post-order, so deep graphs do not hit the recursion limit
        todo = [(key, False)]
        while todo:
            k, done = todo.pop()
            if done:
                order.append(k)
                continue
            if k in seen:
                continue
            seen.add(k)
            todo.append((k, True))
            todo.extend((c, False) for c in children[k] if c not in seen)

    visit(id(tensor.grad_fn))
    depth = {k: 0 for k in by_id}
    depth[id(tensor.grad_fn)] = 1
    for k in reversed(order):
        for c in children[k]:
            depth[c] = max(depth[c], depth[k] + 1)
    nodes = [root]
    edges = [Edge(0, ids[id(tensor.grad_fn)])]
    for fn in fns:
        k = id(fn)
        var = getattr(fn, "variable", None)
        if isinstance(var, torch.Tensor):
            nodes.append(
                GraphNode(
                    ids[k],
                    "leaf",
                    "AccumulateGrad",
                    depth[k],
                    shape=tuple(var.shape),
                    grad=_grad_text(var),
                    label=names.get(id(var), ""),
                )
            )
        else:
            nodes.append(GraphNode(ids[k], "op", type(fn).__name__, depth[k], saved=_saved_of(fn)))
        edges += [Edge(ids[k], ids[c]) for c in children[k]]
    return BackwardGraph(nodes, edges)


def _layout(graph: BackwardGraph) -> dict[int, tuple[float, float]]:
    """x, y for each node: one row per depth, ordered by the mean x of the nodes above it."""
    rows: dict[int, list[GraphNode]] = {}
    for n in graph.nodes:
        rows.setdefault(n.depth, []).append(n)
    parents: dict[int, list[int]] = {}
    for e in graph.edges:
        parents.setdefault(e.dst, []).append(e.src)
    pos: dict[int, tuple[float, float]] = {}
    for d in sorted(rows):
        row = rows[d]
        key = {
            n.id: sum(pos[p][0] for p in parents.get(n.id, []) if p in pos)
            / max(1, sum(p in pos for p in parents.get(n.id, [])))
            for n in row
        }
        row.sort(key=lambda n: (key[n.id], n.id))
        for i, n in enumerate(row):
            pos[n.id] = (i - (len(row) - 1) / 2, -float(d))
    return pos


_COLORS = {"output": "#dbe9f6", "op": "#f3f3f3", "leaf": "#d8f0d2", "no-graph": "#fde2e2"}


def draw_graph(
    tensor: torch.Tensor, ax: Any = None, params: Mapping[str, torch.Tensor] | None = None, title: str | None = None
) -> Any:
    """Draw ``tensor``'s backward graph on ``ax`` (a new figure if None) and return the figure.

    Boxes: the tensor (blue), backward nodes with their saved tensors (grey), leaves as
    ``AccumulateGrad`` with shape and ``.grad`` (green). Arrows follow the gradient.
    """
    import matplotlib.pyplot as plt

    graph = graph_nodes(tensor, params)
    pos = _layout(graph)
    width = max(sum(1 for n in graph.nodes if n.depth == d) for d in {n.depth for n in graph.nodes})
    height = max(n.depth for n in graph.nodes) + 1
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(4.0, 2.6 * width), max(2.0, 1.25 * height)))
    else:
        fig = ax.figure
    boxes = {}
    for n in graph.nodes:
        x, y = pos[n.id]
        boxes[n.id] = ax.text(
            x,
            y,
            n.text(),
            ha="center",
            va="center",
            fontsize=8,
            family="monospace",
            bbox={"boxstyle": "round,pad=0.3", "fc": _COLORS[n.kind], "ec": "#777777"},
        )
    for e in graph.edges:  # anchored to the boxes, so arrows end at their edges whatever their height
        ax.annotate(
            "",
            xy=(0.5, 1.0),
            xycoords=boxes[e.dst],
            xytext=(0.5, 0.0),
            textcoords=boxes[e.src],
            arrowprops={"arrowstyle": "->", "color": "#555555", "lw": 1.0, "shrinkA": 5, "shrinkB": 5},
        )
    xs = [p[0] for p in pos.values()]
    ax.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
    ax.set_ylim(-height + 0.4, 0.6)
    ax.axis("off")
    ax.set_title(title or "backward graph (arrows: the order backward visits)", fontsize=9)
    return fig
