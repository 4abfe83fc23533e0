"""Replay allocation traces (on the allocator model or the real CUDA allocator) and picture them.

``replay`` runs ``alloc a 1.5MiB`` / ``free a`` / ``reset_peak`` / ``empty_cache`` lines through a
fresh ``AllocatorModel``; ``replay_cuda`` runs the same lines on the GPU. ``report_model`` and
``report_cuda`` record the same numbers per op (memory_stats keys, peaks, the segment layout, an OOM
message) so lesson 03 can compare the model with the real allocator; ``fresh_cuda_report`` runs
``report_cuda`` in a fresh process with a clean ``PYTORCH_ALLOC_CONF``. Every drawing takes the dict
shape of ``torch.cuda.memory._snapshot()``, so the same function draws a snapshot of the real
CUDA allocator and one of the model; ``explorer`` is the fragmentation widget of lesson 03.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    import torch

from torchcontracts.lessons.l03_memory.alloc import KiB, MiB, AllocatorModel, Config, ModelOOM, _fmt

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

Op = tuple  # ("alloc", name, size) | ("free", name) | ("reset_peak",) | ("empty_cache",)

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "kib": KiB,
    "k": KiB,
    "mb": 1000**2,
    "mib": MiB,
    "m": MiB,
    "gb": 1000**3,
    "gib": 1 << 30,
    "g": 1 << 30,
}


def parse_size(text: str | int) -> int:
    """``"1.5MiB"`` -> 1572864; plain integers are bytes."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m[2].lower() not in _UNITS:
        raise ValueError(f"cannot read size {text!r}: write e.g. 512, 300KiB, 1.5MiB")
    return int(float(m[1]) * _UNITS[m[2].lower()])


def parse_trace(text: str) -> list[Op]:
    """Read lines ``alloc a 1.5MiB`` / ``free a`` / ``empty_cache`` (``#`` starts a comment)."""
    ops: list[Op] = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#")[0].split()
        if not words:
            continue
        if words[0] == "alloc" and len(words) == 3:
            ops.append(("alloc", words[1], parse_size(words[2])))
        elif words[0] == "free" and len(words) == 2:
            ops.append(("free", words[1]))
        elif words in (["empty_cache"], ["reset_peak"]):
            ops.append((words[0],))
        else:
            raise ValueError(
                f"trace line {n} is {line.strip()!r}: use 'alloc NAME SIZE', 'free NAME', 'reset_peak' or 'empty_cache'"
            )
    return ops


@dataclasses.dataclass(frozen=True)
class Step:
    """The state after one op of a trace."""

    op: str
    allocated: int
    reserved: int
    segments: int
    inactive_split_bytes: int
    fragmentation: float
    snapshot: dict[str, Any]


def _label(op: Sequence[Any]) -> str:
    return " ".join(_fmt(x) if isinstance(x, int) else str(x) for x in op)


def replay(trace: Iterable[Op] | str, config: Config | None = None) -> list[Step]:
    """Run a trace through a fresh model and record the state after every op."""
    ops = parse_trace(trace) if isinstance(trace, str) else list(trace)
    model = AllocatorModel(config)
    steps = []
    for op in ops:
        if op[0] == "alloc":
            model.malloc(op[1], parse_size(op[2]))
        elif op[0] == "free":
            model.free(op[1])
        elif op[0] == "empty_cache":
            model.empty_cache()
        elif op[0] == "reset_peak":
            model.reset_peak_memory_stats()
        else:
            raise ValueError(f"unknown op {op!r}: use alloc, free, reset_peak or empty_cache")
        st = model.memory_stats()
        steps.append(
            Step(
                _label(op),
                model.allocated,
                model.reserved,
                st["segment.all.current"],
                st["inactive_split_bytes.all.current"],
                model.fragmentation(),
                model.snapshot(),
            )
        )
    return steps


def _apply_cuda(op: Sequence[Any], live: dict[str, torch.Tensor]) -> None:
    """Run one trace op on the real CUDA caching allocator (``live`` holds the trace's tensors by name)."""
    import torch

    if op[0] == "alloc":
        live[op[1]] = torch.empty(parse_size(op[2]), dtype=torch.uint8, device="cuda")
    elif op[0] == "free":
        del live[op[1]]
    elif op[0] == "reset_peak":
        torch.cuda.reset_peak_memory_stats()
    else:
        torch.cuda.empty_cache()


def replay_cuda(trace: Iterable[Op] | str) -> list[tuple[int, int]]:
    """Run the same trace on the real CUDA allocator: (allocated, reserved) after each op.

    Call it in a fresh process (nothing else allocated) for a fair comparison with ``replay``.
    """
    import torch

    ops = parse_trace(trace) if isinstance(trace, str) else list(trace)
    live: dict[str, torch.Tensor] = {}
    out = []
    for op in ops:
        _apply_cuda(op, live)
        out.append((torch.cuda.memory_allocated(), torch.cuda.memory_reserved()))
    return out


# -- reports: the same numbers from the model and from the real allocator ----------------------------
STAT_KEYS = (
    "allocated_bytes.all.current",
    "requested_bytes.all.current",
    "reserved_bytes.all.current",
    "segment.all.current",
    "inactive_split_bytes.all.current",
    "num_alloc_retries",
    "num_ooms",
)
ALLOC_CONF_NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def _segments(segments: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Snapshot segments without stack frames: what draw_segments and layout need."""
    return [
        {
            "address": s["address"],
            "total_size": s["total_size"],
            "segment_type": s["segment_type"],
            "blocks": [
                {
                    "size": b["size"],
                    "requested_size": b.get("requested_size", 0),
                    "state": b["state"],
                    "name": b.get("name", ""),
                }
                for b in s["blocks"]
            ],
        }
        for s in segments
    ]


def layout(segments: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Segments as sorted (type, size, ((block size, state), ...)): comparable whatever the addresses."""
    return sorted(
        (s["segment_type"], s["total_size"], tuple((b["size"], b["state"]) for b in s["blocks"])) for s in segments
    )


def _row(
    op: Sequence[Any],
    alloc: int,
    res: int,
    peaks: tuple[int, int],
    stats: dict[str, int],
    segs: Iterable[dict[str, Any]],
    device_free: int | None = None,
) -> dict[str, Any]:
    return {
        "op": _label(op),
        "allocated": alloc,
        "reserved": res,
        "max_allocated": peaks[0],
        "max_reserved": peaks[1],
        **{k: stats.get(k, 0) for k in STAT_KEYS},
        "segments": _segments(segs),
        "device_free": device_free,
    }


def report_model(
    trace: Iterable[Op] | str, config: Config | None = None, capacity: int | None = None
) -> dict[str, Any]:
    """Replay a trace on a fresh model: one row per op, like ``report_cuda``; stops at an OOM."""
    ops = parse_trace(trace) if isinstance(trace, str) else list(trace)
    m = AllocatorModel(dataclasses.replace(config or Config(), capacity=capacity))
    rows, oom = [], None
    for op in ops:
        try:
            {
                "alloc": lambda: m.malloc(op[1], parse_size(op[2])),
                "free": lambda: m.free(op[1]),
                "reset_peak": m.reset_peak_memory_stats,
                "empty_cache": m.empty_cache,
            }[op[0]]()
        except ModelOOM as err:
            oom = str(err)
        st = m.memory_stats()
        peaks = (st.get("allocated_bytes.all.peak", 0), st.get("reserved_bytes.all.peak", 0))
        rows.append(
            _row(
                op,
                m.allocated,
                m.reserved,
                peaks,
                st,
                m.snapshot()["segments"],
                None if capacity is None else capacity - m.reserved,
            )
        )
        if oom:
            break
    return {"steps": rows, "oom": oom, "history": m.snapshot(), "source": "allocator model"}


def report_cuda(trace: Iterable[Op] | str, capacity: int | None = None, history: bool = False) -> dict[str, Any]:
    """Run a trace on the real allocator (``torch.empty(n, dtype=uint8)``): one row per op, then clean up.

    ``capacity`` caps the allocator with ``set_per_process_memory_fraction``; counters are counted
    from the start of the trace. Meant for a fresh process (``fresh_cuda_report``).
    """
    import torch

    ops = parse_trace(trace) if isinstance(trace, str) else list(trace)
    live: dict[str, torch.Tensor] = {}
    rows, oom, snap = [], None, None
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_stats()
    if capacity:  # +1 KiB: the fraction times the total must not round below the capacity
        torch.cuda.set_per_process_memory_fraction((capacity + KiB) / torch.cuda.mem_get_info()[1])
    if history:
        torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")
    try:
        for op in ops:
            try:
                _apply_cuda(op, live)
            except torch.OutOfMemoryError as err:
                oom = str(err)
            st = dict(torch.cuda.memory_stats())
            st.update({k: st.get(k, 0) - base.get(k, 0) for k in ("num_alloc_retries", "num_ooms")})
            peaks = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
            rows.append(
                _row(
                    op,
                    torch.cuda.memory_allocated(),
                    torch.cuda.memory_reserved(),
                    peaks,
                    st,
                    torch.cuda.memory_snapshot(include_traces=False),
                    torch.cuda.mem_get_info()[0],
                )
            )
            if oom:
                break
        if history:
            raw = torch.cuda.memory._snapshot()
            events = [{k: e[k] for k in ("action", "addr", "size", "stream")} for e in raw["device_traces"][0]]
            snap = {"segments": _segments(raw["segments"]), "device_traces": [events], "source": "CUDA _snapshot()"}
    finally:
        if history:
            torch.cuda.memory._record_memory_history(enabled=None)
        live.clear()
        torch.cuda.empty_cache()
        if capacity:
            torch.cuda.set_per_process_memory_fraction(1.0)
    return {"steps": rows, "oom": oom, "history": snap, "source": "CUDA caching allocator"}


def alloc_conf_env(conf: str = "", base: dict[str, str] | None = None) -> dict[str, str]:
    """A child environment whose allocator reads ``conf`` and nothing else.

    torch 2.13's ``CUDAAllocatorConfig`` reads ``PYTORCH_CUDA_ALLOC_CONF`` first and
    ``PYTORCH_ALLOC_CONF`` only when the old name is unset, so an inherited old name would win:
    drop every name, then set ``PYTORCH_ALLOC_CONF`` alone (when ``conf`` is not empty).
    """
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in ALLOC_CONF_NAMES}
    if conf:
        env["PYTORCH_ALLOC_CONF"] = conf
    return env


def fresh_cuda_report(
    traces: dict[str, str], conf: str = "", capacity: int | None = None, history: bool = False
) -> dict[str, dict[str, Any]]:
    """``report_cuda`` of each trace, in one fresh Python process (nothing cached) under ``conf``."""
    code = (
        "import json, sys; from torchcontracts.lessons.l03_memory.alloc_viz import report_cuda; a = json.loads(sys.argv[1]); "
        "print(json.dumps({k: report_cuda(t, a['capacity'], a['history']) for k, t in a['traces'].items()}))"
    )
    arg = json.dumps({"traces": traces, "capacity": capacity, "history": history})
    out = subprocess.run([sys.executable, "-c", code, arg], env=alloc_conf_env(conf), capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the fresh CUDA process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def mismatches(real: dict[str, Any], model: dict[str, Any]) -> list[str]:
    """Where a ``report_cuda`` and a ``report_model`` of one trace differ (empty: they agree)."""
    keys = ("allocated", "reserved", "max_allocated", "max_reserved", *STAT_KEYS)
    out = [
        f"{r['op']}: {k} real {r[k]} != model {m[k]}"
        for r, m in zip(real["steps"], model["steps"])
        for k in keys
        if r[k] != m[k]
    ]
    out += [
        f"{r['op']}: segments real {layout(r['segments'])} != model {layout(m['segments'])}"
        for r, m in zip(real["steps"], model["steps"])
        if layout(r["segments"]) != layout(m["segments"])
    ]
    if len(real["steps"]) != len(model["steps"]) or bool(real["oom"]) != bool(model["oom"]):
        out.append(
            f"steps {len(real['steps'])} vs {len(model['steps'])}, oom {bool(real['oom'])} vs {bool(model['oom'])}"
        )
    return out


def oom_numbers(message: str) -> dict[str, str]:
    """The sizes an OOM message states: requested, allocated by PyTorch, reserved but unallocated."""
    pats = {
        "tried to allocate": r"Tried to allocate ([\d.]+ \w+)",
        "allocated by PyTorch": r"([\d.]+ \w+) is allocated by PyTorch",
        "reserved but unallocated": r"([\d.]+ \w+) is reserved by PyTorch but unallocated",
    }
    return {k: (m[1] if (m := re.search(p, message)) else "?") for k, p in pats.items()}


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


def fragmentation_trace(
    n: int = 8, size_mib: float = 6.0, free_order: str = "every other", big_mib: float = 12.0
) -> str:
    """The lesson's fragmentation experiment: n tensors, free some, then ask for one big tensor."""
    lines = [f"alloc t{i} {size_mib}MiB" for i in range(n)]
    order = {
        "every other": list(range(0, n, 2)),
        "first half": list(range(n // 2)),
        "all, in order": list(range(n)),
        "all, reversed": list(range(n))[::-1],
    }[free_order]
    lines += [f"free t{i}" for i in order]
    lines += [f"alloc big {big_mib}MiB", "empty_cache"]
    return "\n".join(lines)


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
    split = w.Dropdown(options=[("unlimited", 0), ("8 MiB", 8), ("16 MiB", 16)], value=0, description="max_split")
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
