"""Pictures of strides: where each element of a tensor lives in its storage (lesson 01, lab 01).

``draw_strides`` draws the storage as a strip of cells and the tensor's logical grid above
it, each logical cell labelled with its storage offset. ``stride_explorer`` is an
ipywidgets explorer over the same drawing. Both work headless (Agg): the explorer renders
PNG bytes into an ``Image`` widget, so it needs no display and no running kernel.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import math
from typing import Any, Callable

import torch

__all__ = ["OPS", "Exploration", "draw_strides", "explore", "offsets", "stride_explorer"]

Index = tuple[int, ...]
MAX_ELEMENTS = 64  # more cells than this make an unreadable picture
MAX_STORAGE = 96  # storage cells drawn at most (a longer storage is cut after the last one seen)
_PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]


def offsets(t: torch.Tensor) -> dict[Index, int]:
    """Every index of ``t`` mapped to its element's offset in the storage (in elements).

    offset(i) = storage_offset + sum(i[d] * stride[d]): the whole contract of a strided tensor.
    """
    base, strides = t.storage_offset(), t.stride()
    return {
        idx: base + sum(i * s for i, s in zip(idx, strides)) for idx in itertools.product(*(range(n) for n in t.shape))
    }


def _grid_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """Rows and columns of the logical picture: leading dims flattened into rows."""
    if len(shape) == 0:
        return 1, 1
    return math.prod(shape[:-1]), shape[-1]


def _title(t: torch.Tensor) -> str:
    return (
        f"shape {tuple(t.shape)}  stride {tuple(t.stride())}  offset {t.storage_offset()}"
        f"  contiguous {t.is_contiguous()}"
    )


def draw_strides(t: torch.Tensor, ax: Any = None, *, title: str | None = None) -> Any:
    """Draw ``t``'s logical grid over its storage strip; return the matplotlib Axes.

    Top: the tensor as the learner indexes it (leading dims stacked as rows), each cell
    labelled with its index and storage offset. Bottom: the storage, one cell per element,
    the cells ``t`` sees coloured by logical row. Artists carry ``gid``s (offset labels
    ``"offset:<i,j>"``, storage cells ``"cell:<k>:seen"`` or ``":unseen"``) so tests can read the picture back.
    """
    if t.numel() > MAX_ELEMENTS:
        raise ValueError(f"draw_strides: {t.numel()} elements are too many to draw; slice it first (e.g. t[:4, :4])")
    from matplotlib.patches import Rectangle

    if ax is None:
        import matplotlib.pyplot as plt

        r, c = _grid_shape(tuple(t.shape))
        _, ax = plt.subplots(
            figsize=(
                min(12.0, 2.0 + 0.5 * max(c, t.untyped_storage().nbytes() // t.element_size())),
                1.4 + 0.5 * (r + 2),
            )
        )
    mapping = offsets(t)
    storage_len = t.untyped_storage().nbytes() // max(t.element_size(), 1)
    end = max((o + 1 for o in mapping.values()), default=0)
    if end > MAX_STORAGE:
        raise ValueError(f"draw_strides: the tensor reaches storage cell {end - 1}; draw a tensor of a smaller storage")
    shown = max(end, min(storage_len, MAX_STORAGE), 1)
    rows, cols = _grid_shape(tuple(t.shape))
    width = max(shown, cols)
    colour_of: dict[int, str] = {}
    # logical grid, top
    top = 2.2
    for n, (idx, off) in enumerate(mapping.items()):
        r, c = divmod(n, cols) if cols else (0, 0)
        colour = _PALETTE[r % len(_PALETTE)]
        colour_of.setdefault(off, colour)
        y = top + (rows - 1 - r)
        ax.add_patch(Rectangle((c, y), 1, 1, facecolor=colour, alpha=0.35, edgecolor="black"))
        ax.text(c + 0.5, y + 0.72, ",".join(map(str, idx)), ha="center", va="center", fontsize=6)
        ax.text(
            c + 0.5,
            y + 0.3,
            str(off),
            ha="center",
            va="center",
            fontsize=9,
            weight="bold",
            gid=f"offset:{','.join(map(str, idx))}",
        )
    # storage strip, bottom
    for k in range(shown):
        seen = k in colour_of
        ax.add_patch(
            Rectangle(
                (k, 0),
                1,
                1,
                facecolor=colour_of.get(k, "white"),
                alpha=0.6 if seen else 1.0,
                edgecolor="black",
                gid=f"cell:{k}:{'seen' if seen else 'unseen'}",
            )
        )
        ax.text(k + 0.5, 0.5, str(k), ha="center", va="center", fontsize=8, gid=f"storage:{k}")
    ax.text(-0.2, 0.5, "storage", ha="right", va="center", fontsize=9)
    ax.text(-0.2, top + rows / 2, "tensor\n[index]\noffset", ha="right", va="center", fontsize=9)
    ax.set_xlim(-2.2, width + 0.2)
    ax.set_ylim(-0.3, top + rows + 0.2)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title or _title(t), fontsize=10)
    return ax


# --- the explorer ---------------------------------------------------------------------------

Op = Callable[[torch.Tensor], torch.Tensor]

OPS: dict[str, Op] = {
    "view(-1)": lambda t: t.view(-1),
    "reshape(-1)": lambda t: t.reshape(-1),
    "transpose(0, -1)": lambda t: t.transpose(0, -1),
    "transpose(0, -1).reshape(-1)": lambda t: t.transpose(0, -1).reshape(-1),
    "permute(reversed dims)": lambda t: t.permute(*reversed(range(t.dim()))),
    "unsqueeze(0).expand(2, ...)": lambda t: t.unsqueeze(0).expand(2, *t.shape),
    "narrow(0, 1, size-1)": lambda t: t.narrow(0, 1, t.shape[0] - 1),
    "[..., ::2]": lambda t: t[..., ::2],
    "contiguous()": lambda t: t.contiguous(),
    "transpose(0, -1).contiguous()": lambda t: t.transpose(0, -1).contiguous(),
}

SHAPES: dict[str, tuple[int, ...]] = {
    "(6,)": (6,),
    "(2, 3)": (2, 3),
    "(3, 4)": (3, 4),
    "(4, 4)": (4, 4),
    "(2, 2, 3)": (2, 2, 3),
}


@dataclasses.dataclass(frozen=True)
class Exploration:
    """What one op did to ``base = torch.arange(numel).reshape(shape)``."""

    op: str
    base: torch.Tensor
    result: torch.Tensor
    strides: tuple[int, ...]
    contiguous: bool
    shares_storage: bool

    def summary(self) -> str:
        share = "yes (a view)" if self.shares_storage else "no (a copy)"
        return (
            f"x = torch.arange({self.base.numel()}).reshape{tuple(self.base.shape)}; y = {_expr(self.op)}\n"
            f"y.shape {tuple(self.result.shape)} | y.stride() {self.strides} | offset "
            f"{self.result.storage_offset()} | y.is_contiguous() {self.contiguous} | shares x's storage: {share}"
        )


def _expr(op: str) -> str:
    return "x" + op if op.startswith("[") else "x." + op


def explore(shape: tuple[int, ...], op: str) -> Exploration:
    """Apply ``OPS[op]`` to a fresh arange tensor of ``shape`` and report strides and sharing."""
    if op not in OPS:
        raise KeyError(f"unknown op {op!r}: choose one of {', '.join(OPS)}")
    base = torch.arange(math.prod(shape)).reshape(shape)
    y = OPS[op](base)
    same = y.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    return Exploration(op, base, y, tuple(y.stride()), y.is_contiguous(), same)


def _png(e: Exploration) -> bytes:
    from matplotlib.figure import Figure

    rows_in, rows_out = _grid_shape(tuple(e.base.shape))[0], _grid_shape(tuple(e.result.shape))[0]
    fig = Figure(figsize=(9, 2.0 + 0.45 * (rows_in + rows_out + 4)))
    ax_in, ax_out = fig.subplots(2, 1, gridspec_kw={"height_ratios": [rows_in + 2.5, rows_out + 2.5]})
    draw_strides(e.base, ax_in, title="x: " + _title(e.base))
    draw_strides(e.result, ax_out, title=f"y = {_expr(e.op)}: " + _title(e.result))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


def stride_explorer(shape: str = "(2, 3)", op: str = "transpose(0, -1)") -> Any:
    """An ipywidgets explorer: pick a shape and an op, see strides, contiguity, sharing and the grid.

    Returns the widget box; ``box.update()`` re-renders and ``box.last`` is the last ``Exploration``.
    """
    import ipywidgets as w

    shape_box = w.Dropdown(options=list(SHAPES), value=shape, description="shape")
    op_box = w.Dropdown(options=list(OPS), value=op, description="op", layout=w.Layout(width="360px"))
    info = w.HTML()
    image = w.Image(format="png")
    box = w.VBox([w.HBox([shape_box, op_box]), info, image])

    def update(*_: Any) -> None:
        e = explore(SHAPES[shape_box.value], op_box.value)
        box.last = e
        info.value = "<pre>" + e.summary() + "</pre>"
        image.value = _png(e)

    shape_box.observe(update, names="value")
    op_box.observe(update, names="value")
    box.shape_box, box.op_box, box.info, box.image, box.update = shape_box, op_box, info, image, update
    update()
    return box
