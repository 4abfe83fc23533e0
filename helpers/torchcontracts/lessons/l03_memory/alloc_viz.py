"""Pictures of the CUDA caching allocator's state, and lesson 03's fragmentation explorer.

Every drawing takes the dict shape of ``torch.cuda.memory._snapshot()``, so the same function draws a
snapshot of the real CUDA allocator and one of the model; ``explorer`` is the fragmentation widget of
lesson 03. Traces and their replay (``replay``, ``replay_cuda``) live in ``alloc_trace``, the reports
that compare the model with the real allocator (``report_model``, ``report_cuda``, ``fresh_cuda_report``)
in ``alloc_report``; every public name of both is importable from here, as before they moved.
"""

from __future__ import annotations

from typing import Any, Sequence

from torchcontracts.lessons.l03_memory.alloc import MiB, Config
from torchcontracts.lessons.l03_memory.alloc_report import (
    ALLOC_CONF_NAMES,
    STAT_KEYS,
    alloc_conf_env,
    fresh_cuda_report,
    layout,
    mismatches,
    oom_numbers,
    report_cuda,
    report_model,
)
from torchcontracts.lessons.l03_memory.alloc_trace import (
    Op,
    Step,
    fragmentation_trace,
    parse_size,
    parse_trace,
    replay,
    replay_cuda,
)

__all__ = [
    "ALLOC_CONF_NAMES",
    "STAT_KEYS",
    "Op",
    "Step",
    "alloc_conf_env",
    "draw_segments",
    "draw_steps",
    "draw_timeline",
    "explorer",
    "fragmentation_trace",
    "fresh_cuda_report",
    "layout",
    "mismatches",
    "oom_numbers",
    "parse_size",
    "parse_trace",
    "replay",
    "replay_cuda",
    "report_cuda",
    "report_model",
    "timeline_from_events",
]


# -- pictures ------------------------------------------------------------------------------------
ALLOCATED, FREE = "#4C72B0", "#DDDDDD"


def draw_segments(snapshot: dict[str, Any], ax: Any = None, title: str = "") -> Any:
    """One row per segment (cudaMalloc), blocks drawn to scale: blue = allocated, grey = cached free."""
    import matplotlib.pyplot as plt

    segs = snapshot.get("segments", [])
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * max(1, len(segs))))
    for row, seg in enumerate(segs):
        offset = 0
        for b in seg["blocks"]:
            alloc = b["state"] == "active_allocated"
            ax.barh(
                row,
                b["size"] / MiB,
                left=offset / MiB,
                color=ALLOCATED if alloc else FREE,
                edgecolor="black",
                linewidth=0.6,
            )
            if b["size"] / max(seg["total_size"], 1) > 0.08:
                label = b.get("name") or ""
                ax.text(
                    (offset + b["size"] / 2) / MiB,
                    row,
                    f"{label} {b['size'] / MiB:.3g}".strip(),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if alloc else "black",
                )
            offset += b["size"]
    ax.set_yticks(range(len(segs)))
    ax.set_yticklabels([f"{s['segment_type']} {s['total_size'] / MiB:.0f} MiB" for s in segs], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("offset in segment (MiB)")
    ax.set_title(title or f"{len(segs)} segments ({snapshot.get('source', 'CUDA snapshot')})", fontsize=9)
    return ax


def timeline_from_events(events: Sequence[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Running (requested-by-live-tensors, reserved) bytes after each trace event of a snapshot."""
    live = reserved = 0
    lives, reserveds = [], []
    for e in events:
        act, size = e["action"], int(e["size"])
        if act == "alloc":
            live += size
        elif act == "free_completed":
            live -= size
        elif act in ("segment_alloc", "segment_map"):
            reserved += size
        elif act in ("segment_free", "segment_unmap"):
            reserved -= size
        else:
            continue
        lives.append(live)
        reserveds.append(reserved)
    return lives, reserveds


def draw_timeline(snapshot: dict[str, Any], ax: Any = None, title: str = "") -> Any:
    """Memory over the trace events of a snapshot (``_record_memory_history`` must have been on)."""
    import matplotlib.pyplot as plt

    traces = snapshot.get("device_traces") or [[]]
    lives, reserveds = timeline_from_events(traces[0])
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 2.6))
    ax.step(range(len(reserveds)), [r / MiB for r in reserveds], where="post", label="reserved (segments)")
    ax.step(range(len(lives)), [v / MiB for v in lives], where="post", label="requested by live tensors")
    ax.set_xlabel("trace event")
    ax.set_ylabel("MiB")
    ax.legend(fontsize=8)
    ax.set_title(title or "memory timeline", fontsize=9)
    return ax


def draw_steps(steps: Sequence[Step] | Sequence[dict[str, Any]], ax: Any = None, title: str = "") -> Any:
    """Allocated vs reserved after each op of a replayed trace (``Step``s or report rows), labelled by op."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 2.8))
    rows = [s if isinstance(s, dict) else {"op": s.op, "allocated": s.allocated, "reserved": s.reserved} for s in steps]
    xs = range(len(rows))
    ax.step(xs, [s["reserved"] / MiB for s in rows], where="post", label="reserved")
    ax.step(xs, [s["allocated"] / MiB for s in rows], where="post", label="allocated")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([s["op"] for s in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("MiB")
    ax.legend(fontsize=8)
    ax.set_title(title or "allocated vs reserved", fontsize=9)
    return ax


def _explorer_png(steps: Sequence[Step]) -> bytes:
    """The explorer's picture: segments before ``empty_cache`` over allocated vs reserved, as PNG bytes."""
    import io

    from matplotlib.figure import Figure

    before = steps[-2]
    fig = Figure(figsize=(8, 5.5))
    axes = fig.subplots(2, 1)
    draw_segments(before.snapshot, axes[0], title=f"after '{before.op}'")
    draw_steps(steps, axes[1])
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


def _explorer_summary(steps: Sequence[Step]) -> str:
    before = steps[-2]
    return (
        f"allocated {before.allocated / MiB:.2f} MiB | reserved {before.reserved / MiB:.2f} MiB | "
        f"segments {before.segments} | free but stuck in split segments "
        f"{before.inactive_split_bytes / MiB:.2f} MiB | fragmentation {before.fragmentation:.2f} | "
        f"after empty_cache: reserved {steps[-1].reserved / MiB:.2f} MiB"
    )


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - ipywidgets needs IPython
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def explorer() -> Any:
    """A widget: change the tensor size, the order of frees and max_split_size_mb; watch fragmentation.

    The picture is PNG bytes in an ``Image`` widget and the numbers are text in an ``HTML`` widget:
    drawing sets widget values and never captures cell output (no ``Output`` widget, no
    ``plt.show()``). Output captured while a cell runs makes nbclient (so ``torchcontracts ledger``
    and any headless run) echo each captured output back to the kernel as a ``comm_msg`` on the
    shell socket, through a blocking shadow of the asyncio socket it is polling for the cell's
    ``execute_reply``; a send just after the reply lands swallows the poll's wake-up, and the cell
    then sits out the client's whole timeout (and passes). Outside a kernel (a script, a test) each
    drawing also prints the numbers.
    ``box.update()`` redraws; ``box.steps`` holds the last replayed trace.
    """
    import html

    import ipywidgets as w
    from IPython.display import display

    size = w.FloatSlider(value=6.0, min=0.25, max=16.0, step=0.25, description="tensor MiB")
    big = w.FloatSlider(value=12.0, min=1.0, max=40.0, step=1.0, description="big MiB")
    order = w.Dropdown(
        options=["every other", "first half", "all, in order", "all, reversed"], value="every other", description="free"
    )
    split = w.Dropdown(options=[("unlimited", 0), ("20 MiB", 20), ("32 MiB", 32)], value=0, description="max_split")
    image = w.Image(format="png")
    info = w.HTML()
    box = w.VBox([w.HBox([size, big]), w.HBox([order, split]), image, info])

    def render(*_: Any) -> None:
        cfg = Config(max_split_size=split.value * MiB if split.value else None)
        steps = replay(fragmentation_trace(8, size.value, order.value, big.value), cfg)
        text = _explorer_summary(steps)
        box.steps = steps
        image.value = _explorer_png(steps)
        info.value = "<pre>" + html.escape(text) + "</pre>"
        if not _in_kernel():
            print(text)

    for ctl in (size, big, order, split):
        ctl.observe(render, names="value")
    box.size_slider, box.big_slider, box.order_box, box.split_box = size, big, order, split
    box.image, box.info, box.update = image, info, render
    render()
    display(box)
    return box
