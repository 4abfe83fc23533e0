"""The stride drawing labels every element with its true storage offset; the explorer reports ops truthfully.

Truth comes from torch itself: a view of ``torch.arange(n)`` holds, at each index, the
storage offset of that element, so the drawing can be checked without trusting its formula.
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from torchcontracts.lessons.l01_tensors import viz  # noqa: E402

STORE = torch.arange(48)

VIEWS = {
    "fresh (3, 4)": lambda: STORE[:12].reshape(3, 4),
    "transpose": lambda: STORE[:12].reshape(3, 4).t(),
    "column slice with offset": lambda: STORE[:24].reshape(4, 6)[1:, 2:5],
    "every other element from 3": lambda: STORE[3::2][:8],
    "expand (stride 0)": lambda: STORE[5:8].expand(2, 3),
    "3-d permute": lambda: STORE[:24].reshape(2, 3, 4).permute(2, 0, 1),
    "0-dim element": lambda: STORE[7],
    "empty": lambda: STORE[:12].reshape(3, 4)[:, :0],
}


def _drawn_offsets(ax) -> dict[tuple[int, ...], int]:
    out = {}
    for text in ax.texts:
        gid = text.get_gid() or ""
        if gid.startswith("offset:"):
            idx = tuple(int(v) for v in gid[len("offset:") :].split(",") if v)
            out[idx] = int(text.get_text())
    return out


def _seen_cells(ax) -> set[int]:
    return {
        int(p.get_gid().split(":")[1])
        for p in ax.patches
        if (p.get_gid() or "").startswith("cell:") and p.get_gid().endswith(":seen")
    }


@pytest.mark.parametrize("name", VIEWS)
def test_drawn_offsets_match_storage_offset_plus_index_times_stride(name):
    t = VIEWS[name]()
    fig, ax = plt.subplots()
    try:
        viz.draw_strides(t, ax)
        drawn = _drawn_offsets(ax)
        indices = list(itertools.product(*(range(n) for n in t.shape)))
        assert sorted(drawn) == sorted(indices), "every index is drawn exactly once"
        for idx in indices:
            formula = t.storage_offset() + sum(i * s for i, s in zip(idx, t.stride()))
            assert drawn[idx] == formula == int(t[idx]), f"{name} {idx}"
        assert _seen_cells(ax) == {int(t[idx]) for idx in indices}, "the highlighted storage cells are the ones t reads"
        title = ax.get_title()
        assert str(tuple(t.stride())) in title and f"offset {t.storage_offset()}" in title
    finally:
        plt.close(fig)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_offsets_agree_with_torch_for_random_permuted_sliced_views(shape, data):
    base = torch.arange(64)[: int(torch.tensor(shape).prod())].reshape(shape)
    perm = data.draw(st.permutations(range(len(shape))))
    t = base.permute(*perm)
    dim = data.draw(st.integers(0, t.dim() - 1))
    start = data.draw(st.integers(0, t.shape[dim] - 1))
    t = t.narrow(dim, start, t.shape[dim] - start)
    for idx, off in viz.offsets(t).items():
        assert off == int(t[idx])


def test_draw_refuses_a_tensor_too_big_to_read():
    with pytest.raises(ValueError, match="slice it first"):
        viz.draw_strides(torch.zeros(100, 100))


def test_draw_makes_its_own_axes_when_none_given():
    ax = viz.draw_strides(torch.arange(6).reshape(2, 3))
    assert ax.figure is not None
    plt.close(ax.figure)


def _expected(op: str, x: torch.Tensor) -> torch.Tensor:
    """Each op written out again, independently of viz.OPS."""
    return {
        "view(-1)": lambda: x.view(-1),
        "reshape(-1)": lambda: x.reshape(-1),
        "transpose(0, -1)": lambda: x.transpose(0, x.dim() - 1),
        "transpose(0, -1).reshape(-1)": lambda: x.transpose(0, x.dim() - 1).reshape(-1),
        "permute(reversed dims)": lambda: x.permute(*range(x.dim() - 1, -1, -1)),
        "unsqueeze(0).expand(2, ...)": lambda: x.expand(2, *x.shape),
        "narrow(0, 1, size-1)": lambda: x[1:],
        "[..., ::2]": lambda: x[..., ::2],
        "contiguous()": lambda: x.contiguous(),
        "transpose(0, -1).contiguous()": lambda: x.transpose(0, x.dim() - 1).contiguous(),
    }[op]()


SHARES = {  # whether the result may share x's storage, by op (for shapes with >= 2 dims)
    "view(-1)": True,
    "reshape(-1)": True,
    "transpose(0, -1)": True,
    "transpose(0, -1).reshape(-1)": False,
    "permute(reversed dims)": True,
    "unsqueeze(0).expand(2, ...)": True,
    "narrow(0, 1, size-1)": True,
    "[..., ::2]": True,
    "contiguous()": True,
    "transpose(0, -1).contiguous()": False,
}


@pytest.mark.parametrize("shape", list(viz.SHAPES.values()), ids=str)
@pytest.mark.parametrize("op", list(viz.OPS))
def test_explore_reports_strides_contiguity_and_sharing(shape, op):
    e = viz.explore(shape, op)
    want = _expected(op, torch.arange(e.base.numel()).reshape(shape))
    assert torch.equal(e.result, want)
    assert e.strides == tuple(want.stride())
    assert e.contiguous == want.is_contiguous()
    # on 1-D a transpose is the identity, so even reshape/contiguous after it keep the storage
    assert e.shares_storage == (SHARES[op] if len(shape) >= 2 else True), f"{op} on {shape}"
    assert str(e.strides) in e.summary()


def test_explore_rejects_an_unknown_op_with_the_choices():
    with pytest.raises(KeyError, match="choose one of"):
        viz.explore((2, 3), "flip")


def test_explorer_widget_updates_text_and_picture_without_a_display():
    box = viz.stride_explorer()
    first_png = box.image.value
    assert first_png[:8] == b"\x89PNG\r\n\x1a\n"
    box.shape_box.value = "(3, 4)"
    box.op_box.value = "[..., ::2]"
    assert box.last.strides == (4, 2) and box.last.shares_storage
    assert "(4, 2)" in box.info.value and "yes (a view)" in box.info.value
    box.op_box.value = "transpose(0, -1).contiguous()"
    assert not box.last.shares_storage and "no (a copy)" in box.info.value
    assert box.image.value != first_png
