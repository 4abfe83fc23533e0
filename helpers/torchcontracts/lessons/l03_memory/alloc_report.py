"""Reports of one trace from the allocator model and from the real CUDA allocator, in the same numbers.

``report_model`` and ``report_cuda`` record per op the ``memory_stats`` keys, the peaks, the segment
layout and an OOM message, so lesson 03 can compare the model with the real allocator (``mismatches``);
``fresh_cuda_report`` runs ``report_cuda`` in a fresh process whose ``PYTORCH_ALLOC_CONF`` is exactly
the one asked for (``alloc_conf_env``). ``alloc_viz`` re-exports every public name here.
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

from torchcontracts.lessons.l03_memory.alloc import KiB, AllocatorModel, Config, ModelOOM
from torchcontracts.lessons.l03_memory.alloc_trace import Op, _apply_cuda, _label, parse_size, parse_trace

__all__ = [
    "ALLOC_CONF_NAMES",
    "STAT_KEYS",
    "alloc_conf_env",
    "fresh_cuda_report",
    "layout",
    "mismatches",
    "oom_numbers",
    "report_cuda",
    "report_model",
]

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
        "import json, sys; from torchcontracts.lessons.l03_memory.alloc_report import report_cuda; a = json.loads(sys.argv[1]); "
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
