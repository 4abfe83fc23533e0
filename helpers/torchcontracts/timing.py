"""Timing that tells the truth: a thin wrapper over ``torch.utils.benchmark``.

``torch.utils.benchmark.Timer`` already synchronizes CUDA and warms up; this module
runs it adaptively, reports the median and the spread (IQR), and shows a table.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
import torch.utils.benchmark as benchmark

__all__ = ["Timing", "time_fn", "table"]


@dataclasses.dataclass(frozen=True)
class Timing:
    """Median and interquartile range of one measured statement, in seconds."""

    label: str
    median_s: float
    iqr_s: float
    runs: int
    device: str

    @property
    def spread(self) -> float:
        """IQR relative to the median: above ~0.1 the machine was noisy, so re-run."""
        return self.iqr_s / self.median_s if self.median_s else float("nan")

    def __str__(self) -> str:
        return f"{self.label}: median {_human(self.median_s)} (IQR {_human(self.iqr_s)}, {self.runs} runs, {self.device})"


def _human(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def time_fn(fn: Callable[..., Any], *args: Any, label: str | None = None, min_run_time: float = 0.2,
            device: str | None = None) -> Timing:
    """Time ``fn(*args)`` with ``torch.utils.benchmark`` (CUDA is synchronized for you)."""
    timer = benchmark.Timer(stmt="fn(*args)", globals={"fn": fn, "args": args},
                            label=label or getattr(fn, "__name__", "fn"), num_threads=torch.get_num_threads())
    m = timer.blocked_autorange(min_run_time=min_run_time)
    dev = device or ("cuda" if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args) else "cpu")
    return Timing(label or getattr(fn, "__name__", "fn"), m.median, m.iqr, len(m.times), dev)


def table(timings: Sequence[Timing], baseline: int = 0) -> Any:
    """A pandas table of timings with the ratio to ``timings[baseline]`` (shown nicely in Jupyter)."""
    import pandas as pd

    base = timings[baseline].median_s
    return pd.DataFrame(
        {
            "what": [t.label for t in timings],
            "median": [_human(t.median_s) for t in timings],
            "IQR": [_human(t.iqr_s) for t in timings],
            f"x vs {timings[baseline].label}": [round(t.median_s / base, 2) for t in timings],
            "runs": [t.runs for t in timings],
            "device": [t.device for t in timings],
        }
    )
