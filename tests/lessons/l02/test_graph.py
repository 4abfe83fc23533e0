"""The backward-graph walker and drawing of lesson 02 (torchcontracts.lessons.l02_autograd.graph), tested headless."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from torchcontracts.lessons.l02_autograd.graph import draw_graph, graph_nodes  # noqa: E402


def test_graph_of_a_product_names_the_op_and_the_leaf():
    x = torch.randn(3, requires_grad=True)
    nodes, edges = graph_nodes(x * 2)
    assert [n.name for n in nodes] == ["output", "MulBackward0", "AccumulateGrad"]
    assert [(e.src, e.dst) for e in edges] == [(0, 1), (1, 2)]
    leaf = nodes[2]
    assert leaf.kind == "leaf" and leaf.shape == (3,) and leaf.grad == "None"


def test_saved_tensors_of_matmul_are_listed_with_shapes():
    a = torch.randn(2, 3, requires_grad=True)
    b = torch.randn(3, 5, requires_grad=True)
    mm = next(n for n in graph_nodes(a @ b).nodes if n.name == "MmBackward0")
    assert {s.name: s.shape for s in mm.saved} == {"self": (2, 3), "mat2": (3, 5)}


def test_backward_frees_saved_tensors_and_fills_leaf_grads():
    a = torch.randn(4, requires_grad=True)
    y = a.exp().sum()
    y.backward()
    graph = graph_nodes(y)
    exp = next(n for n in graph.nodes if n.name == "ExpBackward0")
    assert exp.saved and all(s.freed for s in exp.saved)
    assert "freed" in exp.text()
    leaf = next(n for n in graph.nodes if n.kind == "leaf")
    assert leaf.grad == "(4,)"


def test_retain_graph_keeps_saved_tensors():
    a = torch.randn(4, requires_grad=True)
    y = a.exp().sum()
    y.backward(retain_graph=True)
    exp = next(n for n in graph_nodes(y).nodes if n.name == "ExpBackward0")
    assert exp.saved and not any(s.freed for s in exp.saved)


@pytest.mark.parametrize(
    "make", [lambda x: (x * 2).detach(), lambda x: torch.no_grad()(lambda: x * 2)(), lambda x: torch.ones(3)]
)
def test_tensor_without_history_draws_as_no_graph(make):
    x = torch.randn(3, requires_grad=True)
    nodes, _ = graph_nodes(make(x))
    assert [n.kind for n in nodes] == ["output", "no-graph"]


def test_a_leaf_that_requires_grad_is_its_own_accumulate_grad():
    w = torch.randn(2, 2, requires_grad=True)
    nodes, _ = graph_nodes(w, params={"weight": w})
    assert nodes[1].name == "AccumulateGrad" and nodes[1].label == "weight"


def test_params_name_the_leaves_of_a_module():
    lin = torch.nn.Linear(3, 2)
    out = lin(torch.randn(4, 3)).sum()
    labels = {n.label for n in graph_nodes(out, params=dict(lin.named_parameters())).nodes if n.kind == "leaf"}
    assert labels == {"weight", "bias"}


def test_shared_subexpression_is_one_node_at_its_longest_depth():
    x = torch.randn(3, requires_grad=True)
    e = x.exp()
    y = e * e.sin()  # e reached directly from Mul and via Sin
    graph = graph_nodes(y)
    assert graph.names().count("ExpBackward0") == 1
    depth = {n.name: n.depth for n in graph.nodes}
    assert depth["ExpBackward0"] == depth["SinBackward0"] + 1


def test_custom_function_saved_tensors_are_shown():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = torch.randn(5, requires_grad=True)
    node = graph_nodes(Square.apply(x)).nodes[1]
    assert node.name == "SquareBackward"
    assert [s.shape for s in node.saved] == [(5,)]


def test_in_place_op_on_a_non_leaf_adds_a_node():
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    before = graph_nodes(y).names()
    y.add_(1)
    after = graph_nodes(y).names()
    assert after[1] == "AddBackward0" and after[2:] == before[1:]


def test_deep_chain_does_not_hit_the_recursion_limit():
    x = torch.randn(2, requires_grad=True)
    y = x
    for _ in range(3000):
        y = y + 1
    graph = graph_nodes(y)
    assert len(graph.nodes) == 3002 and max(n.depth for n in graph.nodes) == 3001


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["exp", "mul_self", "add_x", "sum_keep", "t"]), min_size=1, max_size=8))
def test_every_edge_points_down_and_every_node_is_reachable(ops):
    x = torch.randn(3, 3, requires_grad=True)
    y = x
    for op in ops:
        y = {
            "exp": lambda t: t.exp(),
            "mul_self": lambda t: t * t,
            "add_x": lambda t: t + x,
            "sum_keep": lambda t: t.sum(0, keepdim=True).expand(3, 3),
            "t": lambda t: t.t(),
        }[op](y)
    nodes, edges = graph_nodes(y)
    depth = {n.id: n.depth for n in nodes}
    assert all(depth[e.dst] > depth[e.src] for e in edges)
    assert {e.dst for e in edges} == {n.id for n in nodes} - {0}
    assert sum(n.kind == "leaf" for n in nodes) == 1


def test_draw_graph_puts_one_box_per_node_on_the_axis():
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    y = (x * w).sum()
    fig, ax = plt.subplots()
    assert draw_graph(y, ax=ax, params={"w": w}) is fig
    texts = [t.get_text() for t in ax.texts if t.get_text()]  # arrows are empty annotations
    assert len(texts) == len(graph_nodes(y).nodes)
    assert any("leaf w (3,)" in t for t in texts)
    plt.close(fig)


def test_graph_of_a_non_tensor_says_what_to_pass():
    with pytest.raises(TypeError, match="pass the output tensor"):
        graph_nodes([1, 2, 3])  # type: ignore[arg-type]
