"""Timing that tells the truth, or says it can't.

On a busy machine a CPU timing can be a scheduler artefact: with a core taken by another process,
torch's intra-op threads wait for a CPU and a call costs a scheduler tick (milliseconds) whatever
the op. So ``time_fn`` measures in short blocks and watches the witnesses of contention:

* CPU vs wall: the timing thread's ``time.thread_time`` over ``time.perf_counter`` (a thread that was
  descheduled, lost its vCPU to a hypervisor, or slept at a barrier for one that was, is off CPU; so is
  one whose ``fn`` blocks, which reads as noise too), and on Linux the run-queue wait of all the
  process's threads (``/proc/self/task/*/schedstat``: ready to run, but no free CPU);
* other processes: on Linux, the CPU time the whole machine spent (``/proc/stat``) minus this process's
  own. A thread that keeps its CPU still slows down while another process runs beside it: on this course's
  2-vCPU machine a 64x64 ``+ 1`` took 1.8x as long with one core spinning, at a CPU/wall of 1.00
  (vCPUs that share a physical core on the host, shared caches, lower boost clocks). No per-thread clock
  shows that, so a machine where others used more than ``OTHERS_MAX`` CPUs is reported as busy;
* stalls: blocks slower than the fastest by half a millisecond or more (ticks are 1, 4 or 10 ms);
* spread: the IQR between blocks and the drift between the two halves of the window.

It measures until a window of ``min_run_time`` is clean, for at most ``BUDGET * min_run_time``, and
reports the median, the IQR and the fastest block (``min_s``: contention only ever adds time). When no
window is clean, ``str`` and ``table`` say "noisy: rerun on a quiet machine" and why, never a figure.
The thread count is left as the caller set it: a parallel op's figure depends on it (1000x1000 ``+ 1``
takes about twice as long on 1 thread as on 2), so switching silently would change the answer.
CUDA goes through ``torch.utils.benchmark.Timer`` (it synchronizes); host CPU time says nothing
about a GPU kernel, so there only the spread is judged.
"""

from __future__ import annotations

import dataclasses
import gc
import glob
import math
import os
import statistics
import time
from typing import Any, Callable, Sequence

import torch
import torch.utils.benchmark as benchmark

__all__ = ["NOISY", "Timing", "assess", "table", "time_fn"]

NOISY = "noisy: rerun on a quiet machine"
SPREAD_MAX = 0.10  # IQR/median between blocks above this: the figure moves more than it claims
DRIFT_MAX = 0.15  # the two halves of a window differ by more: the machine changed speed meanwhile
CPU_MIN = 0.85  # timing thread on a CPU for less of the wall time: it was descheduled or waited
WAIT_MAX = 0.10  # the process's threads sat on a run queue for more than this share of wall time
OTHERS_MAX = 0.3  # other processes used more CPUs than this, on average, while we measured (a spinner is 1.0)
STALL_S = 5e-4  # a block this much slower than the fastest (and 1.5x it) lost a scheduler tick
STALL_SHARE = 0.2  # this share of stalled blocks and the quartiles are the scheduler's, not the op's
TICKS_S = (1e-3, 4e-3, 10e-3)  # scheduler ticks at HZ = 1000, 250, 100
BLOCK_S = 2e-3  # short blocks, so a stall shows as an outlier instead of being averaged in
BUDGET = 4  # keep measuring up to BUDGET * min_run_time to find a clean window
MIN_BLOCKS = 4

# The clocks, looked up at call time so that tests can replace them with deterministic fakes.
_now: Callable[[], float] = time.perf_counter
_cpu: Callable[[], float] = time.thread_time
_proc: Callable[[], float] = time.process_time


def _waited() -> float | None:
    """Seconds all threads of this process spent runnable but without a CPU (Linux schedstat), else None."""
    total, seen = 0, False
    for path in glob.glob("/proc/self/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[1])
            seen = True
        except (OSError, IndexError, ValueError):
            continue  # the thread ended while we looked
    return total / 1e9 if seen else None


_CLK_TCK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0  # jiffies per second


def _machine_busy() -> float | None:
    """CPU seconds the whole machine has spent busy since boot, all CPUs together (Linux), else None.

    Busy is user + nice + system + irq + softirq + steal jiffies of /proc/stat's first line; steal (a
    hypervisor running someone else on our vCPU) counts as busy because it delays us the same way.
    """
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    except (OSError, ValueError, IndexError):
        return None
    return (user + nice + system + irq + softirq + steal) / _CLK_TCK


@dataclasses.dataclass(frozen=True)
class Timing:
    """Per-call seconds of one statement over blocks: median, IQR, minimum, and whether to trust them.

    ``median_s`` stays the raw median when ``noisy``; check ``noisy`` (``str``, ``table`` and ``ratio``
    do) before stating it as a fact. ``cpu_wall_ratio`` is the timing thread's CPU time over wall time
    (about 1.0 on a quiet machine; NaN on CUDA, where it does not apply).
    """

    label: str
    median_s: float
    iqr_s: float
    runs: int
    device: str
    min_s: float = math.nan
    noisy: bool = False
    why: str = ""
    cpu_wall_ratio: float = math.nan

    @property
    def spread(self) -> float:
        """IQR relative to the median: above ``SPREAD_MAX`` the measurement is reported noisy."""
        return self.iqr_s / self.median_s if self.median_s else float("nan")

    def ratio(self, other: Timing) -> float | None:
        """How many times ``other``'s median this one is; None when either is noisy (no figure to divide)."""
        if self.noisy or other.noisy or not other.median_s > 0:
            return None
        return self.median_s / other.median_s

    def differs(self, other: Timing) -> bool:
        """Whether the two medians are further apart than the two IQRs together: a smaller gap is not a measured
        difference, even between two clean timings (each may spread up to ``SPREAD_MAX``)."""
        return abs(self.median_s - other.median_s) > self.iqr_s + other.iqr_s

    def __str__(self) -> str:
        if self.noisy:
            return f"{self.label}: {NOISY} ({self.why})"
        return (
            f"{self.label}: median {_human(self.median_s)} (min {_human(self.min_s)}, "
            f"IQR {_human(self.iqr_s)}, {self.runs} runs, {self.device})"
        )


def _human(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _on_ticks(excess: Sequence[float]) -> bool:
    """Whether every stall is a whole number of one scheduler tick: the signature of time slicing."""
    return any(all(round(e / q) >= 1 and abs(e - round(e / q) * q) <= 0.15 * q for e in excess) for q in TICKS_S)


def assess(
    samples_s: Sequence[float],
    calls: int = 1,
    cpu_wall_ratio: float | None = None,
    wait_ratio: float | None = None,
    pool_share: float = 0.0,
    device: str = "cpu",
    others_ratio: float | None = None,
) -> str:
    """Why per-call ``samples_s`` (one per block of ``calls`` calls, in order) can't be trusted, or "".

    ``wait_ratio``: seconds the process's threads waited for a CPU per wall second (None: unknown);
    ``pool_share``: CPU seconds of torch's other threads per wall second; ``others_ratio``: CPUs that
    other processes kept busy, on average, meanwhile (None: unknown). On CUDA only the spread counts.
    """
    n = len(samples_s)
    if n < MIN_BLOCKS:
        return f"only {n} blocks measured"
    why: list[str] = []
    if device == "cpu":
        if wait_ratio is not None and wait_ratio > WAIT_MAX:
            hint = " (torch.set_num_threads(1) gives a steadier but different figure)" if pool_share > 0.1 else ""
            why.append(
                f"threads waited for a free CPU for {wait_ratio:.2f}x the wall time: another process is busy{hint}"
            )
        elif cpu_wall_ratio is not None and cpu_wall_ratio < CPU_MIN:  # descheduled, stolen by a hypervisor,
            why.append(f"the timing thread was on a CPU for only {cpu_wall_ratio:.0%} of the wall time")  # or fn blocks
        if others_ratio is not None and others_ratio > OTHERS_MAX and not why:
            why.append(
                f"other processes kept {others_ratio:.2f} CPUs busy meanwhile: an op slows beside them "
                "even on a CPU of its own (shared cores, caches and clocks)"
            )
        fastest = min(samples_s) * calls
        excess = [s * calls - fastest for s in samples_s]
        stalled = [e for e in excess if e >= max(STALL_S, 0.5 * fastest)]
        if stalled and len(stalled) >= STALL_SHARE * n:
            ticks = " by whole scheduler ticks" if _on_ticks(stalled) else ""
            why.append(f"{len(stalled)} of {n} blocks stalled{ticks}")
    q1, med, q3 = statistics.quantiles(samples_s, n=4, method="inclusive")
    if med > 0 and (q3 - q1) / med > SPREAD_MAX:
        why.append(f"blocks spread {(q3 - q1) / med:.0%} (IQR/median)")
    first, second = statistics.median(samples_s[: n // 2]), statistics.median(samples_s[n // 2 :])
    if min(first, second) > 0 and abs(first - second) / min(first, second) > DRIFT_MAX:
        why.append(f"the run's two halves differ by {abs(first - second) / min(first, second):.0%}")
    return "; ".join(why)


@dataclasses.dataclass
class _Round:
    """Per-call samples of one round, and the seconds each clock advanced over it."""

    samples: list[float]
    wall: float
    cpu: float
    proc: float
    waited: float | None


def _block(fn: Callable[..., Any], args: tuple[Any, ...], calls: int) -> float:
    t0 = _now()
    for _ in range(calls):
        fn(*args)
    return _now() - t0


def _round(fn: Callable[..., Any], args: tuple[Any, ...], calls: int, seconds: float) -> _Round:
    """At least 2 blocks and ``seconds`` of them, with the CPU and run-queue clocks read around them."""
    w0, c0, p0, q0 = _now(), _cpu(), _proc(), _waited()
    samples: list[float] = []
    while len(samples) < 2 or _now() - w0 < seconds:
        samples.append(_block(fn, args, calls) / calls)
    wall, cpu, proc, q1 = _now() - w0, _cpu() - c0, _proc() - p0, _waited()
    return _Round(samples, wall, cpu, proc, None if q0 is None or q1 is None else max(q1 - q0, 0.0))


def _others(since: tuple[float, float, float | None]) -> float | None:
    """CPUs other processes kept busy, on average, since ``since`` = (wall, process CPU, machine busy).

    /proc/stat counts in 10 ms jiffies, so spans under 0.1 s give no reading (None).
    """
    w0, p0, m0 = since
    m1, wall = _machine_busy(), _now() - w0
    if m0 is None or m1 is None or wall < 0.1:
        return None
    return max(m1 - m0 - (_proc() - p0), 0.0) / wall


def _measure_cpu(
    fn: Callable[..., Any], args: tuple[Any, ...], min_run_time: float
) -> tuple[list[float], dict[str, Any]]:
    """Blocks of about ``BLOCK_S``, in rounds of ``min_run_time / 2``, until the last two rounds are clean."""
    calls = 1
    while True:  # calibrate the block size (and warm up)
        took = _block(fn, args, calls)
        if took >= BLOCK_S or calls >= 1 << 20:
            break
        calls = min(calls * 10, max(calls * 2, math.ceil(calls * 1.5 * BLOCK_S / max(took, 1e-9))))
    start, rounds = _now(), []
    since = (start, _proc(), _machine_busy())  # the whole measurement, for the coarse /proc/stat witness
    while True:
        rounds.append(_round(fn, args, calls, min_run_time / 2))
        if len(rounds) < 2:
            continue
        window = rounds[-2:]
        samples = [s for r in window for s in r.samples]
        wall, cpu = sum(r.wall for r in window), sum(r.cpu for r in window)
        waits = [r.waited for r in window]
        judged = {
            "calls": calls,
            "cpu_wall_ratio": cpu / wall,
            "pool_share": (sum(r.proc for r in window) - cpu) / wall,  # torch's other threads at work
            "wait_ratio": None if None in waits else sum(w for w in waits if w is not None) / wall,
            "others_ratio": _others(since),
        }
        if not assess(samples, **judged) or _now() - start >= BUDGET * min_run_time:
            return samples, judged


def _measure_timer(fn: Callable[..., Any], args: tuple[Any, ...], label: str, min_run_time: float) -> list[float]:
    """``torch.utils.benchmark`` synchronizes CUDA around each block; it repeats until IQR/median settles."""
    timer = benchmark.Timer(
        "fn(*args)", globals={"fn": fn, "args": args}, label=label, num_threads=torch.get_num_threads()
    )
    m = timer.adaptive_autorange(SPREAD_MAX, min_run_time=min_run_time, max_run_time=BUDGET * min_run_time)
    return list(m.times)


def _device_of(objs: Sequence[Any]) -> str:
    """The first non-CPU device among tensors in ``objs`` (one level into lists, tuples, dicts)."""
    for obj in objs:
        items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else (obj,)
        for item in items:
            if isinstance(item, torch.Tensor) and item.device.type != "cpu":
                return item.device.type
    return "cpu"


def time_fn(
    fn: Callable[..., Any], *args: Any, label: str | None = None, min_run_time: float = 0.2, device: str | None = None
) -> Timing:
    """Time ``fn(*args)``; a noisy machine gives a Timing whose ``str`` says so instead of a figure.

    The device is ``device``, else the first non-CPU tensor among ``args`` and the first result (so
    ``lambda: g + 1`` on a CUDA ``g`` is timed as CUDA, synchronized).
    """
    name = label or getattr(fn, "__name__", "fn")
    dev = device or _device_of((*args, fn(*args)))  # the first call doubles as warm-up
    if dev == "cpu":
        gc_was_on = gc.isenabled()
        gc.disable()  # as timeit does: a collection is not the op's cost
        try:
            samples, judged = _measure_cpu(fn, args, min_run_time)
        finally:
            if gc_was_on:
                gc.enable()
        why, cpu_ratio = assess(samples, **judged), judged["cpu_wall_ratio"]
    else:
        samples, cpu_ratio = _measure_timer(fn, args, name, min_run_time), math.nan
        why = assess(samples, device=dev)
    q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else samples * 3
    return Timing(name, med, q3 - q1, len(samples), dev, min(samples), bool(why), why, cpu_ratio)


def table(timings: Sequence[Timing], baseline: int = 0) -> Any:
    """A pandas table with the ratio to ``timings[baseline]``; a noisy row or baseline shows "noisy", no figure."""
    import pandas as pd

    base = timings[baseline]
    ratios = [t.ratio(base) for t in timings]
    return pd.DataFrame(
        {
            "what": [t.label for t in timings],
            "median": ["noisy" if t.noisy else _human(t.median_s) for t in timings],
            "IQR": ["-" if t.noisy else _human(t.iqr_s) for t in timings],
            f"x vs {base.label}": ["noisy" if r is None else round(r, 2) for r in ratios],
            "runs": [t.runs for t in timings],
            "device": [t.device for t in timings],
            "min": ["-" if t.noisy else _human(t.min_s) for t in timings],
            "why noisy": [t.why for t in timings],
        }
    )
