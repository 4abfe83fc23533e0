"""Lesson 05's throughput meter: whole epochs timed, and judged with the course's contention witnesses.

``timing.time_fn`` reads a main thread that is off its CPU as contention, but a loop that waits for
its DataLoader workers is off-CPU by design, and the workers are other processes. So ``time_epochs``
times whole epochs and hands ``timing.assess`` the same witnesses measured over the process *tree*
(this process and its workers): their run-queue wait, and the CPU the rest of the machine used
(``/proc/stat`` minus the tree's own CPU, reaped workers included). A noisy row shows the word, never
a figure, in ``throughput_table`` and in the plots.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import statistics
import time
from typing import Any, Callable, Mapping, Sequence

from torchcontracts.lessons.l05_data.data_pipeline import dataloader_workers
from torchcontracts.core.timing import NOISY, Timing, _machine_busy, assess

__all__ = ["EpochTimes", "plot_stages", "plot_throughput", "throughput_table", "time_epochs"]

_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


@dataclasses.dataclass(frozen=True)
class EpochTimes:
    """Seconds per epoch (``timing``, judged) and, when each epoch returned ``{stage: seconds}``, their medians."""

    timing: Timing
    stages: dict[str, float]

    @property
    def noisy(self) -> bool:
        return self.timing.noisy


def _waited(pids: Sequence[int]) -> float | None:
    """Seconds the threads of ``pids`` spent runnable but without a CPU (Linux schedstat), else None."""
    total, seen = 0, False
    for pid in pids:
        for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
            try:
                with open(path, encoding="ascii") as fh:
                    total += int(fh.read().split()[1])
                seen = True
            except (OSError, IndexError, ValueError):
                continue  # the thread ended while we looked
    return total / 1e9 if seen else None


def _cpu_of(pid: int) -> float | None:
    """User + system CPU seconds of a live process (/proc/<pid>/stat), else None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(") ", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


def _tree_cpu(live: Sequence[int]) -> float:
    """CPU seconds of this process, of its reaped children, and of the ``live`` workers so far."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system + sum(_cpu_of(p) or 0.0 for p in live)


def time_epochs(run_epoch: Callable[[], Any], label: str, repeats: int = 5, warmup: int = 1) -> EpochTimes:
    """Time ``repeats`` calls of ``run_epoch`` after ``warmup`` ones (which also start persistent workers).

    The verdict is ``timing.assess``'s, fed the process tree's run-queue wait and the CPUs the rest
    of the machine kept busy meanwhile. If ``run_epoch`` returns ``{stage: seconds}``, the medians of
    those go to ``stages`` (a per-stage timer of the loop: waiting for a batch vs the step).
    """
    for _ in range(warmup):
        run_epoch()
    live = dataloader_workers()
    pids = [os.getpid(), *live]
    w0, c0, m0, t0 = _waited(pids), _tree_cpu(live), _machine_busy(), time.perf_counter()
    samples: list[float] = []
    parts: list[Mapping[str, float]] = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = run_epoch()
        samples.append(time.perf_counter() - start)
        if isinstance(out, Mapping):
            parts.append(out)
    wall = time.perf_counter() - t0
    w1, c1, m1 = _waited(pids), _tree_cpu([p for p in live if p in dataloader_workers()]), _machine_busy()
    wait_ratio = None if w0 is None or w1 is None else max(w1 - w0, 0.0) / wall
    others = None if m0 is None or m1 is None or wall < 0.1 else max(m1 - m0 - (c1 - c0), 0.0) / wall
    why = assess(samples, 1, None, wait_ratio, 0.0, "cpu", others)
    q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else samples * 3
    timing = Timing(label, med, q3 - q1, len(samples), "cpu", min(samples), bool(why), why)
    stages = {k: statistics.median(p.get(k, 0.0) for p in parts) for k in dict.fromkeys(k for p in parts for k in p)}
    return EpochTimes(timing, stages)


def _settings(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in ("times", "samples")}


def throughput_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Loader settings and samples/s, one row each; a noisy timing shows "noisy: rerun ..." and why, never a figure.

    Each row holds the settings (any keys), ``times`` (an ``EpochTimes``) and ``samples`` (per epoch).
    """
    import pandas as pd

    out = []
    for row in rows:
        t = row["times"].timing
        rate = "noisy" if t.noisy else f"{row['samples'] / t.median_s:,.0f}"
        out.append(
            {
                **_settings(row),
                "samples/s": rate,
                "epoch": "-" if t.noisy else f"{t.median_s * 1e3:.0f} ms",
                "why noisy": t.why,
            }
        )
    return pd.DataFrame(out)


def plot_throughput(rows: Sequence[Mapping[str, Any]], ax: Any = None) -> Any:
    """Bars of samples/s per setting; a noisy row gets no bar, only the word "noisy"."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(8, 3))[1]
    labels, any_noisy = [], False
    for i, row in enumerate(rows):
        t = row["times"].timing
        labels.append("\n".join(f"{k}={v}" for k, v in _settings(row).items()))
        if t.noisy:
            any_noisy = True
            ax.text(i, 0, "noisy", ha="center", va="bottom", fontsize=8, color="grey", rotation=90)
            continue
        rate = row["samples"] / t.median_s
        ax.bar(i, rate, color="tab:blue")
        ax.text(i, rate, f"{rate:,.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("samples/s (median epoch)")
    ax.set_title("loader throughput" + (f" (no bar: {NOISY})" if any_noisy else ""))
    return ax


def plot_stages(results: Mapping[str, EpochTimes], ax: Any = None) -> Any:
    """Stacked bars: the share of each loop's epoch spent in each stage, seconds written in when not noisy."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(8, 2.6))[1]
    names = list(results)
    kinds = list(dict.fromkeys(k for r in results.values() for k in r.stages))
    left = [0.0] * len(names)
    for kind in kinds:
        totals = [sum(results[n].stages.values()) or 1.0 for n in names]
        shares = [results[n].stages.get(kind, 0.0) / tot for n, tot in zip(names, totals)]
        bars = ax.barh(names, shares, left=left, label=kind)
        for bar, n in zip(bars, names):
            if not results[n].noisy and bar.get_width() > 0.12:
                secs = results[n].stages.get(kind, 0.0)
                ax.text(
                    bar.get_x() + bar.get_width() / 2,
                    bar.get_y() + bar.get_height() / 2,
                    f"{secs * 1e3:.0f} ms",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                )
        left = [a + b for a, b in zip(left, shares)]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the epoch (median over runs)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=len(kinds), fontsize=8)
    noisy = [n for n in names if results[n].noisy]
    ax.set_title(
        "where each loop spends its epoch" + (f" ({len(noisy)} noisy: shares only, no seconds)" if noisy else "")
    )
    return ax
