"""Allocation traces: read them, replay them on the allocator model or on the real CUDA allocator.

A trace is lines ``alloc a 1.5MiB`` / ``free a`` / ``reset_peak`` / ``empty_cache`` (``parse_trace``);
``replay`` runs one through a fresh ``AllocatorModel`` and records a ``Step`` (the numbers and a
snapshot) after every op, and ``replay_cuda`` runs the same lines on the GPU. ``fragmentation_trace``
writes lesson 03's fragmentation experiment as a trace. ``alloc_viz`` re-exports every public name here.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    import torch

from torchcontracts.lessons.l03_memory.alloc import KiB, MiB, AllocatorModel, Config, _fmt

__all__ = ["Op", "Step", "fragmentation_trace", "parse_size", "parse_trace", "replay", "replay_cuda"]

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
